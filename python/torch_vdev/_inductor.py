"""Inductor on vdev: C++ kernels generated for vdev memory.

vdev's memory is host RAM, so Inductor's C++ code generator (``CppScheduling``, the
one the CPU uses) produces vdev's kernels: they take the data pointers of vdev
tensors. The wrappers that call them allocate graph buffers on vdev devices, from
vdev's caching allocator, and run the ops Inductor does not
generate code for (matmuls, convolutions, attention, custom ops) as extern kernels,
which dispatch to vdev's own kernels.

Every generated kernel launch goes through one place per wrapper,
``launch_kernel_in_stream_order``. In Python wrappers each kernel is compiled with a
binding of vdev's (``VdevKernelBindings``) that launches it on the device's current
stream, as vdev's eager kernels are, so it runs in the stream's order, the host goes
on meanwhile and graph captures record it (``torch.compile(mode="reduce-overhead")``,
``_compiled_graphs.py``). C++ wrappers launch theirs the same way, through vdev's C
shim (``c_shim_vdev.h``).
"""

import functools
import os
import re
from typing import Any, Optional

import torch
from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppPythonBindingsCodeCache, LambdaFuture
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.utils import clear_on_fresh_cache
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


# What generated Python wrappers call vdev's buffer allocation (torch_vdev._C.empty_strided)
# and the compilation of vdev's kernels (VdevKernelBindings).
_ALLOCATE = f"empty_strided_{BACKEND_NAME}"
_COMPILE_KERNEL = f"compile_{BACKEND_NAME}_kernel"
_CPU_KERNEL_DEFINITION = "async_compile.cpp_pybinding("


@clear_on_fresh_cache
class VdevKernelBindings(CppPythonBindingsCodeCache):
    """A generated C++ kernel compiled with a Python binding that launches it on a vdev
    stream: ``kernel(name, device, *args)`` reads the arguments as the CPU's binding
    does (data pointers of tensors, ints, floats), keeps them, and queues the kernel's
    call on ``device``'s current stream through torch_vdev's launch
    (``torch_vdev_launch_generated_kernel``, csrc/inductor/GeneratedKernel.h), looked up
    in the loaded libtorch_vdev, so the kernel links with no library."""

    cache: dict = {}

    @staticmethod
    def cache_clear() -> None:
        VdevKernelBindings.cache.clear()

    suffix_template = """
// vdev's launch of {entry_func}() (torch_vdev/_inductor.py, VdevKernelBindings)
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

static void* (*tensor_data_ptr)(PyObject* tensor);
static const char* (*kernel_name)(const char* name);
static const char* (*launch_kernel)(const char* name, int device, void (*run)(void*), void* arguments,
                                    void (*destroy)(void*));

// One argument of a launch: a tensor's data pointer or a number.
union ArgumentSlot {{
    void* pointer;
    double real;
    long long integer;
}};

template <typename T> static ArgumentSlot parse_arg(PyObject* arg) {{
    ArgumentSlot slot;
    if constexpr (std::is_pointer_v<T>) {{
        slot.pointer = tensor_data_ptr(arg);
    }} else if constexpr (std::is_floating_point_v<T>) {{
        slot.real = PyFloat_AsDouble(arg);
        if (slot.real == -1.0 && PyErr_Occurred()) throw std::runtime_error("expected a float argument");
    }} else {{
        slot.integer = PyLong_AsLongLong(arg);
        if (slot.integer == -1 && PyErr_Occurred()) throw std::runtime_error("expected an int argument");
    }}
    return slot;
}}

template <typename T> static T slot_value(const ArgumentSlot& slot) {{
    if constexpr (std::is_pointer_v<T>) {{
        return static_cast<T>(slot.pointer);
    }} else if constexpr (std::is_floating_point_v<T>) {{
        return static_cast<T>(slot.real);
    }} else {{
        return static_cast<T>(slot.integer);
    }}
}}

// The arguments of a launch, kept until the launch (or the graph recording it) is done.
// A flat array, not a std::tuple: g++ takes minutes to instantiate a tuple of the
// hundreds of arguments a foreach optimizer kernel has.
template <typename... Params, size_t... I>
static void* keep_arguments(PyObject* args, std::index_sequence<I...>) {{
    std::unique_ptr<ArgumentSlot[]> slots(new ArgumentSlot[sizeof...(Params)]);
    ((slots[I] = parse_arg<std::decay_t<Params>>(PyTuple_GET_ITEM(args, I + 2))), ...);
    return slots.release();
}}

template <typename... Params, size_t... I>
static void run_kept(void* kept, std::index_sequence<I...>) {{
    const ArgumentSlot* slots = static_cast<const ArgumentSlot*>(kept);
    {entry_func}(slot_value<std::decay_t<Params>>(slots[I])...);
}}

template <typename... Params>
static PyObject* launch(void (*)(Params...), PyObject* args) {{
    if (PyTuple_GET_SIZE(args) != sizeof...(Params) + 2) throw std::runtime_error("requires {arg_len} arguments after the name and device");
    static const char* name = kernel_name(PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0)));
    const long device = PyLong_AsLong(PyTuple_GET_ITEM(args, 1));
    void* arguments = keep_arguments<Params...>(args, std::index_sequence_for<Params...>{{}});
    const char* error = launch_kernel(
        name, static_cast<int>(device),
        [](void* kept) {{ run_kept<Params...>(kept, std::index_sequence_for<Params...>{{}}); }},
        arguments,
        [](void* kept) {{ delete[] static_cast<ArgumentSlot*>(kept); }});
    if (error != nullptr) throw std::runtime_error(error);
    Py_RETURN_NONE;
}}

static PyObject* {entry_func}_py(PyObject* self, PyObject* args) {{
    try {{
        return launch(&{entry_func}, args);
    }} catch (const std::exception& e) {{
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }}
}}

static PyMethodDef py_methods[] = {{
    {{"{entry_func}", {entry_func}_py, METH_VARARGS, ""}},
    {{NULL, NULL, 0, NULL}}}};

static struct PyModuleDef py_module = {{PyModuleDef_HEAD_INIT, "{entry_func}", NULL, -1, py_methods}};

PyMODINIT_FUNC PyInit_{entry_func}(void) {{
    const char* data_ptr_address = std::getenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR");
    void* library = dlopen("libtorch_vdev.so", RTLD_LAZY | RTLD_NOLOAD);
    if (data_ptr_address == nullptr || library == nullptr) {{
        PyErr_SetString(PyExc_RuntimeError, "a vdev kernel is loaded by torch_vdev's Inductor backend");
        return nullptr;
    }}
    tensor_data_ptr = reinterpret_cast<decltype(tensor_data_ptr)>(std::strtoull(data_ptr_address, nullptr, 10));
    kernel_name = reinterpret_cast<decltype(kernel_name)>(dlsym(library, "torch_vdev_generated_kernel_name"));
    launch_kernel = reinterpret_cast<decltype(launch_kernel)>(dlsym(library, "torch_vdev_launch_generated_kernel"));
    dlclose(library);  // it stays loaded: the process holds it
    if (tensor_data_ptr == nullptr || kernel_name == nullptr || launch_kernel == nullptr) {{
        PyErr_SetString(PyExc_RuntimeError, "libtorch_vdev lacks the launch of generated kernels");
        return nullptr;
    }}
    return PyModule_Create(&py_module);
}}
"""


def compile_kernel(async_compile: AsyncCompile, argtypes: list, source_code: str):
    """``async_compile.cpp_pybinding`` for a vdev kernel: compiled with vdev's binding."""
    if get_compile_threads() <= 1:
        return VdevKernelBindings.load_pybinding(argtypes, source_code)
    return LambdaFuture(VdevKernelBindings.load_pybinding_async(argtypes, source_code, submit_fn=async_compile.submit))


@functools.cache
def _c_shim_functions() -> frozenset:
    with open(_C_SHIM_HEADER) as header:
        names = re.findall(r"^TORCH_VDEV_SHIM\(\s*(\w+),", header.read(), re.MULTILINE)
    return frozenset(f"aoti_torch_{BACKEND_NAME}_{name}" for name in names)


def _is_vdev(device: Optional[torch.device]) -> bool:
    device = device or V.graph.get_current_device_or_throw()
    return device.type == BACKEND_NAME


class _VdevPythonCode:
    """What Python wrappers (graphs and their subgraphs) write for vdev: buffer
    allocations on vdev and vdev kernels compiled with, and launched through, vdev's
    binding."""

    def define_kernel(self, kernel_name: str, kernel_body: str, metadata=None, gpu=True, cpp_definition=None):
        # A vdev kernel (the scheduler's current device while it is defined) is compiled
        # with vdev's launching binding instead of the CPU's.
        device = V.graph.current_device
        if device is not None and device.type == BACKEND_NAME and kernel_body.startswith(_CPU_KERNEL_DEFINITION):
            kernel_body = f"{_COMPILE_KERNEL}(async_compile, {kernel_body[len(_CPU_KERNEL_DEFINITION):]}"
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

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
        # The kernel's binding (VdevKernelBindings) launches it on the device's current
        # stream, under a CPU operator named after it.
        self.writeline(self.wrap_kernel_call(kernel_name, [repr(kernel_name), str(device.index or 0), *call_args]))


class VdevSubgraphPythonWrapperCodegen(_VdevPythonCode, SubgraphPythonWrapperCodegen):
    """The Python code of a subgraph (``torch.cond`` branches, loop bodies) of a vdev graph."""


class VdevPythonWrapperCodegen(_VdevPythonCode, PythonWrapperCodegen):
    """The Python wrapper of a compiled graph with vdev tensors."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            return VdevSubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return VdevPythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(f"from torch_vdev._C import empty_strided as {_ALLOCATE}")
        self.imports.writeline(f"from torch_vdev._inductor import compile_kernel as {_COMPILE_KERNEL}")


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

    def launch_kernel_in_stream_order(self, kernel_name: str, call_args, device: torch.device, *, arg_types,
                                      **kwargs) -> None:
        # Launched on the device's current stream with the arguments the CPU's call
        # passes (data pointers cast to the kernel's parameter types, scalars), under a
        # CPU operator named after it (c_shim_vdev.h, launch_generated_kernel).
        self.add_device_include(BACKEND_NAME)
        self.writeline("{")
        self.writeline(
            f'static const char* const kernel_name = torch_vdev::inductor_shim::generated_kernel_name("{kernel_name}");'
        )
        super()._generate_kernel_call_helper(
            "torch_vdev::inductor_shim::launch_generated_kernel",
            ["kernel_name", str(device.index or 0), kernel_name, *call_args],
            device=_KERNEL_DEVICE,
            arg_types=[str, int, str, *arg_types],
            **kwargs,
        )
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
    from . import _compiled_graphs, _inductor_config

    _compiled_graphs.register()

    register_device_op_overrides(BACKEND_NAME, VdevDeviceOpOverrides())
    register_backend_for_device(
        BACKEND_NAME,
        CppScheduling,
        VdevPythonWrapperCodegen,
        VdevCppWrapperCodegen,
        device_custom_config=_inductor_config,
    )
