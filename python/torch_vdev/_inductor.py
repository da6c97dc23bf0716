"""Inductor on vdev: C++ kernels generated for vdev memory.

vdev's memory is host RAM, so Inductor's C++ code generator (``CppScheduling``, the
one the CPU uses) produces vdev's kernels: they take the data pointers of vdev
tensors. The wrappers that call them allocate graph buffers with ``empty_strided`` on
the vdev device, i.e. from vdev's caching allocator, and run the ops Inductor does not
generate code for (matmuls, convolutions, attention, custom ops) as extern kernels,
which dispatch to vdev's own kernels.

Every generated kernel launch goes through one place per wrapper,
``launch_kernel_in_stream_order``: vdev runs work when it is submitted, so a kernel is
called at once, after the work submitted before it. When vdev streams run work
asynchronously, that method is where launches must be put in the current stream's
order.
"""

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

# The device C++ kernels are generated for: they read and write host memory directly.
_KERNEL_DEVICE = torch.device("cpu")


class VdevDeviceOpOverrides(DeviceOpOverrides):
    """The device calls Inductor writes into generated wrappers."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_vdev._inductor import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.vdev.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.vdev.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.vdev.device({device_idx})"

    def cpp_kernel_type(self) -> str:
        return "void*"


def get_raw_stream(device_index: int) -> int:
    """The current stream of a vdev device as an integer, what generated code passes around."""
    return torch.vdev.current_stream(device_index).stream_id


def _is_vdev(device: Optional[torch.device]) -> bool:
    device = device or V.graph.get_current_device_or_throw()
    return device.type == BACKEND_NAME


class VdevPythonWrapperCodegen(PythonWrapperCodegen):
    """The Python wrapper of a compiled graph with vdev tensors."""

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

    def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None, **kwargs) -> None:
        if _is_vdev(device):
            self.launch_kernel_in_stream_order(kernel_name, call_args)
        else:
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    def launch_kernel_in_stream_order(self, kernel_name: str, call_args) -> None:
        # Work runs when submitted: the C++ kernel is called directly.
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))


class VdevCppWrapperCodegen(CppWrapperCpu):
    """The C++ wrapper (``cpp_wrapper=True`` and AOTInductor) of a graph with vdev tensors."""

    def __init__(self) -> None:
        self.device = BACKEND_NAME
        super().__init__()

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Any = None,
    ) -> "VdevCppWrapperCodegen":
        return VdevCppWrapperCodegen()

    def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None, **kwargs) -> None:
        if _is_vdev(device):
            self.launch_kernel_in_stream_order(kernel_name, call_args, **kwargs)
        else:
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    def launch_kernel_in_stream_order(self, kernel_name: str, call_args, **kwargs) -> None:
        # Work runs when submitted: the C++ kernel is called directly, as on the CPU.
        super()._generate_kernel_call_helper(kernel_name, call_args, device=_KERNEL_DEVICE, **kwargs)


def _treat_vdev_as_cpp_device() -> None:
    """Some of Inductor's steps test ``device.type == "cpu"`` where they mean "C++
    kernels"; vdev's kernels are C++ kernels, so these answer for vdev as for the CPU:

    - ``get_current_backend``, which names the kernel language of a device ("triton"
      for every device it does not know): the C++ code generator tracks the dtypes of
      its variables only when it is "cpp";
    - ``is_cpu`` of scheduler nodes: the scheduler skips the loop reordering and
      reindexing the C++ code generator does not support;
    - ``ir.is_cpu``: the thresholds for realizing large pointwise expressions.
    """
    from torch._inductor import config, ir, scheduler, utils
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


def register() -> None:
    _treat_vdev_as_cpp_device()
    register_device_op_overrides(BACKEND_NAME, VdevDeviceOpOverrides())
    register_backend_for_device(
        BACKEND_NAME, CppScheduling, VdevPythonWrapperCodegen, VdevCppWrapperCodegen
    )
