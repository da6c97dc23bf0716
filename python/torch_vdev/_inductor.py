"""Inductor on vdev: C++ kernels generated for vdev memory.

vdev's memory is host RAM, so Inductor's C++ code generator (``CppScheduling``, the
one the CPU uses) produces vdev's kernels: they take the data pointers of vdev
tensors. The wrappers that call them allocate graph buffers on vdev devices, from
vdev's caching allocator, and run the ops Inductor does not
generate code for (matmuls, convolutions, attention, custom ops) as extern kernels,
which dispatch to vdev's own kernels.

Every generated kernel launch goes through one place per wrapper,
``launch_kernel_in_stream_order``: a generated kernel runs on the calling thread once
the work queued before it on the device's current stream is complete (queuing the
kernels themselves on the stream is the next step, with the rest of the eager ops).
"""

import functools
import os
import re
import warnings
from typing import Any, Optional

import torch
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from . import BACKEND_NAME

# Extern kernels of C++ wrappers on vdev (aoti_torch_vdev_<op>), installed with vdev's headers.
_C_SHIM_HEADER = os.path.join(os.path.dirname(__file__), "include", "torch_vdev", "inductor", "c_shim_vdev.h")

# The device C++ kernels are generated for: they read and write host memory directly.
_KERNEL_DEVICE = torch.device("cpu")


class VdevDeviceOpOverrides(DeviceOpOverrides):
    """The device calls Inductor writes into generated wrappers."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_vdev._dynamo import VdevInterface\n{name} = VdevInterface.get_raw_stream"

    def set_device(self, device_idx: int) -> str:
        return f"torch.vdev.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.vdev.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.vdev.device({device_idx})"

    def cpp_kernel_type(self) -> str:
        return "void*"


# What generated Python wrappers call vdev's buffer allocation (torch_vdev._C.empty_strided).
_ALLOCATE = f"empty_strided_{BACKEND_NAME}"
_LAUNCH_KERNEL = f"launch_kernel_{BACKEND_NAME}"


@functools.cache
def _c_shim_functions() -> frozenset:
    with open(_C_SHIM_HEADER) as header:
        names = re.findall(r"^TORCH_VDEV_SHIM\(\s*(\w+),", header.read(), re.MULTILINE)
    return frozenset(f"aoti_torch_{BACKEND_NAME}_{name}" for name in names)


def _is_vdev(device: Optional[torch.device]) -> bool:
    device = device or V.graph.get_current_device_or_throw()
    return device.type == BACKEND_NAME


def _warn_if_graphs_requested() -> None:
    from torch._inductor import config

    if config.triton.cudagraphs:
        warnings.warn(
            f"torch.compile(mode='reduce-overhead') does not use {BACKEND_NAME} graphs yet "
            f"(compiled {BACKEND_NAME} kernels run on the calling thread, which a graph capture "
            f"refuses): this graph's compiled code runs without graphs. Use mode='default' or "
            "mode='max-autotune-no-cudagraphs' on vdev.",
            stacklevel=2,
        )


class VdevPythonWrapperCodegen(PythonWrapperCodegen):
    """The Python wrapper of a compiled graph with vdev tensors."""

    def __init__(self) -> None:
        super().__init__()
        _warn_if_graphs_requested()

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return VdevPythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(f"from torch_vdev._C import empty_strided as {_ALLOCATE}")
        self.imports.writeline(f"from torch_vdev._C import launch_kernel as {_LAUNCH_KERNEL}")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        from torch._inductor import config

        if device.type != BACKEND_NAME or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        # On the buffer's own vdev device, whichever is current when the graph runs.
        shape_code = self.codegen_python_shape_tuple(shape)
        stride_code = self.codegen_python_shape_tuple(stride)
        allocation_shape_code = self.codegen_python_shape_tuple(allocation_shape or shape)
        allocation = f"{name} = {_ALLOCATE}({allocation_shape_code}, {stride_code}, {dtype}, {device.index or 0})"
        if allocation_shape_code != shape_code:
            allocation += f".as_strided({shape_code}, {stride_code})"
        return allocation

    def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None, **kwargs) -> None:
        if _is_vdev(device):
            self.launch_kernel_in_stream_order(kernel_name, call_args, device)
        else:
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    def launch_kernel_in_stream_order(self, kernel_name: str, call_args, device: torch.device) -> None:
        # The C++ kernel runs on the calling thread, once the work queued before it on
        # the device's current stream (copies, extern kernels) is complete, and is
        # profiled as a vdev kernel (torch_vdev._C.launch_kernel).
        launch_args = [repr(kernel_name), str(device.index or 0), kernel_name, *call_args]
        self.writeline(self.wrap_kernel_call(_LAUNCH_KERNEL, launch_args))


class VdevCppWrapperCodegen(CppWrapperCpu):
    """The C++ wrapper (``cpp_wrapper=True`` and AOTInductor) of a graph with vdev tensors.

    Its model device is vdev; its code is CPU code: it includes the CPU's wrapper
    headers, its kernels are vectorized, and cpp_wrapper builds it as the CPU's.
    vdev tensors reach it as ``AtenTensorHandle``s, its buffers are allocated on vdev
    through AOTInductor's C shim, and its extern kernels are vdev's C shim
    (``c_shim_vdev.h``)."""

    def __init__(self) -> None:
        self.device = BACKEND_NAME
        super().__init__()
        self.needs_vec_isa = True
        _warn_if_graphs_requested()

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Any = None,
    ) -> "VdevCppWrapperCodegen":
        return VdevCppWrapperCodegen()

    def codegen_model_constructor(self) -> None:
        from torch._inductor import config

        if V.graph.constants and config.aot_inductor.package_constants_in_so:
            raise RuntimeError(
                f"AOTInductor cannot package the weights of a {BACKEND_NAME} model into it: its "
                f"runtime allocates them in host memory, not {BACKEND_NAME} memory. Compile with "
                "inductor_configs={'aot_inductor.package_constants_in_so': False} and give the "
                "weights when loading: loaded.load_constants(weights, check_full_update=True, "
                "user_managed=True) in Python, AOTIModelPackageLoader::load_constants in C++."
            )
        super().codegen_model_constructor()
        # AOTInductor's model runtime knows only PyTorch's device names: vdev's model
        # runner passes "cpu:<index>" (csrc/inductor/AotiModelRunner.cpp), and the
        # constructor, whose closing brace is the last line, makes the device vdev.
        closing_brace = self.prefix._lines.pop()
        with self.prefix.indent():
            self.prefix.writeline("device_type_ = aoti_torch_device_type_privateuse1();")
        self.prefix._lines.append(closing_brace)

    def _generate_end_jit(self, result) -> None:
        # Emits the build of the cpp_wrapper module, which is the CPU's.
        self.device = _KERNEL_DEVICE.type
        try:
            super()._generate_end_jit(result)
        finally:
            self.device = BACKEND_NAME

    def add_device_include(self, device: str) -> None:
        if device != BACKEND_NAME:
            super().add_device_include(device)
        elif device not in self.included_devices:
            super().add_device_include(_KERNEL_DEVICE.type)
            self.included_devices.add(device)
            self.header.splice(f'#include "{_C_SHIM_HEADER}"')

    def generate_c_shim_extern_kernel_call(self, kernel: str, args, device: str, **kwargs) -> None:
        if device == BACKEND_NAME:
            self.add_device_include(device)
            shim_function = self.get_c_shim_func_name(kernel, device)
            if shim_function not in _c_shim_functions():
                raise NotImplementedError(
                    f"{kernel} on {BACKEND_NAME} has no C shim function ({shim_function}) for C++ "
                    f"wrappers (cpp_wrapper=True, AOTInductor); add it to {_C_SHIM_HEADER}, or "
                    "compile with cpp_wrapper=False"
                )
        super().generate_c_shim_extern_kernel_call(kernel, args, device, **kwargs)

    def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None, **kwargs) -> None:
        if _is_vdev(device):
            self.launch_kernel_in_stream_order(kernel_name, call_args, device, **kwargs)
        else:
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    def launch_kernel_in_stream_order(self, kernel_name: str, call_args, device: torch.device, **kwargs) -> None:
        # The C++ kernel runs on the calling thread, as on the CPU, once the work queued
        # before it on the device's current stream is complete, and is profiled as a
        # vdev kernel (c_shim_vdev.h).
        self.add_device_include(BACKEND_NAME)
        self.writeline("{")
        self.writeline(
            f'torch_vdev::inductor_shim::GeneratedKernel launch("{kernel_name}", {device.index or 0});'
        )
        super()._generate_kernel_call_helper(kernel_name, call_args, device=_KERNEL_DEVICE, **kwargs)
        self.writeline("}")


def _treat_vdev_as_cpp_device() -> None:
    """Some of Inductor's steps test ``device.type == "cpu"`` where they mean "C++
    kernels"; vdev's kernels are C++ kernels, so these answer for vdev as for the CPU:

    - ``get_current_backend``, which names the kernel language of a device ("triton"
      for every device it does not know): the C++ code generator tracks the dtypes of
      its variables only when it is "cpp";
    - ``is_cpu`` of scheduler nodes: the scheduler skips the loop reordering and
      reindexing the C++ code generator does not support;
    - ``ir.is_cpu``: the thresholds for realizing large pointwise expressions;
    - the devices whose convolutions run through mkldnn, for which the layout
      optimization makes convolution graphs channels-last (vdev's convolutions run
      the CPU's kernels, mkldnn's);

    and one step whose result is wrong on vdev otherwise (below).
    """
    from torch._inductor import config, graph, ir, scheduler, utils
    from torch._inductor.codegen import common
    from torch._inductor.kernel import mm_common

    current_backend = utils.get_current_backend

    def get_current_backend(device_type: Optional[str] = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return config.cpu_backend if device_type == BACKEND_NAME else current_backend(device_type)

    for module in (utils, common, scheduler, mm_common):
        module.get_current_backend = get_current_backend

    is_cpu_ir, is_cpu_node = ir.is_cpu, scheduler.BaseSchedulerNode.is_cpu

    def is_cpu_or_vdev_ir(x) -> bool:
        return is_cpu_ir(x) or ir.get_device_type(x) == BACKEND_NAME

    def is_cpu_or_vdev_node(node) -> bool:
        device = node.get_device()
        return is_cpu_node(node) or (device is not None and device.type == BACKEND_NAME)

    ir.is_cpu = is_cpu_or_vdev_ir
    scheduler.BaseSchedulerNode.is_cpu = is_cpu_or_vdev_node
    graph.SUPPORTED_MKLDNN_DEVICES = (*graph.SUPPORTED_MKLDNN_DEVICES, BACKEND_NAME)

    # The C++ code generator holds kernels back to group them, and the scheduler emits
    # them before an extern call only when the call has a device: an extern call without
    # one (torch.vdev.synchronize(), stream and event ops) would be written before the
    # kernels that precede it, after the buffers they read were freed.
    codegen_extern_call = scheduler.Scheduler.codegen_extern_call

    def codegen_extern_call_after_pending_kernels(self, node) -> None:
        if node.get_device() is None:
            self.flush()
        codegen_extern_call(self, node)

    scheduler.Scheduler.codegen_extern_call = codegen_extern_call_after_pending_kernels


def _build_cpp_wrappers_as_cpu_code() -> None:
    """C++ wrappers refer to vdev's device type as ``at::kPrivateUse1`` (AOTInductor's C
    shim has ``aoti_torch_device_type_privateuse1()``), and their code is CPU code: the
    header AOTInductor precompiles for a vdev model is the CPU's."""
    from torch._inductor import codecache
    from torch._inductor.codegen import cpp_utils

    cpp_utils.DEVICE_TO_ATEN[BACKEND_NAME] = "at::kPrivateUse1"
    cpp_utils.DEVICE_TO_INT[BACKEND_NAME] = int(torch._C._autograd.DeviceType.PrivateUse1)

    wrapper_header = codecache._get_cpp_wrapper_header

    def cpp_wrapper_header(device: str, aot_mode: bool = False) -> str:
        if device.split(":", maxsplit=1)[0] == BACKEND_NAME:
            device = _KERNEL_DEVICE.type
        return wrapper_header(device, aot_mode)

    codecache._get_cpp_wrapper_header = cpp_wrapper_header


def register() -> None:
    _treat_vdev_as_cpp_device()
    _build_cpp_wrappers_as_cpu_code()
    from . import _inductor_config

    register_device_op_overrides(BACKEND_NAME, VdevDeviceOpOverrides())
    register_backend_for_device(
        BACKEND_NAME,
        CppScheduling,
        VdevPythonWrapperCodegen,
        VdevCppWrapperCodegen,
        device_custom_config=_inductor_config,
    )
