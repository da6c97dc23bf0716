"""vdev: a virtual PyTorch accelerator whose device memory is host RAM.

Importing this package (or importing torch, through the ``torch.backends`` entry
point) registers the ``vdev`` backend: ``torch.device('vdev')`` (alias
``privateuseone``), the ``torch.vdev`` module mirroring ``torch.cuda``, and the
``Tensor.vdev()`` / ``Module.vdev()`` / ``Tensor.is_vdev`` conveniences.

``torch_vdev.kernel``, ``torch_vdev.kernels`` and ``torch_vdev.BackendEnvironment``
implement or override vdev ops in Python (see ``python_kernels``).
"""



def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing this package does the work.

    Defined before ``import torch``: when this package is imported first, importing
    torch runs the entry point while this module is still initialising."""


import atexit  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402

from . import _C  # noqa: E402
from .python_kernels import BackendEnvironment, kernel, kernels  # noqa: E402

BACKEND_NAME: str = _C.backend_name
__version__ = "0.1.0"

# Where find_package(TorchVdev) finds the C++ package: pass it in CMAKE_PREFIX_PATH
# (like torch.utils.cmake_prefix_path).
cmake_prefix_path: str = os.path.join(os.path.dirname(__file__), "share", "cmake")


def fallback_stats() -> dict:
    """``{op name: calls}`` of the ops that ran through the CPU fallback (ops with no
    vdev kernel) since the last ``reset_fallback_stats()``."""
    return dict(_C.fallback_stats())


def reset_fallback_stats() -> None:
    _C.reset_fallback_stats()


def synchronizing_op_stats() -> dict:
    """``{op: calls}``: the ops that ran on the calling thread since the last
    ``reset_synchronizing_op_stats()``, each after waiting for the work queued on its
    device's current stream (``.item()``, copies to pageable memory, ops whose output
    sizes depend on data or that have no C++ meta kernel). Every other vdev op is
    launched on the stream and returns once queued."""
    return dict(_C.host_op_stats())


def reset_synchronizing_op_stats() -> None:
    _C.reset_host_op_stats()


def kernel_temporary_cache_stats() -> dict:
    """The cache of the CPU memory CPU kernels allocate for themselves while they run
    on a stream's worker (their temporaries): ``allocations`` (blocks handed out) and
    ``reuses`` (of which were cached blocks) since the process started, and now
    ``in_use_blocks``, ``cached_blocks`` and ``cached_bytes`` (free blocks kept for
    reuse, which ``torch.vdev.empty_cache()`` frees). Host memory, not counted in
    ``torch.vdev.memory_stats()``."""
    return dict(_C.kernel_temporary_cache_stats())


def _register_backend() -> None:
    # The C++ library registered the name when it loaded; renaming to the same
    # name sets up torch's Python side (device type, profiler names).
    torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    from . import api

    torch._register_device_module(BACKEND_NAME, api)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    from . import distributed

    distributed.register(BACKEND_NAME)
    from . import multiprocessing

    multiprocessing.register()
    from . import parallel_comm

    parallel_comm.install(BACKEND_NAME)
    from . import _compiler_hooks

    _compiler_hooks.install()


def _drain_autograd_device_threads() -> None:
    if _C.is_initialized():
        _C.drain_autograd_device_threads()


def _finish_queued_work() -> None:
    """Lets work still queued on streams run before the interpreter shuts down (its
    kernels may hold Python state). A failure nobody synchronized for is dropped, as
    CUDA's are at exit."""
    if _C.is_initialized():
        for index in range(_C.device_count()):
            try:
                _C.synchronize(index)
            except RuntimeError:
                pass


if not hasattr(torch, BACKEND_NAME):
    _register_backend()
    # atexit runs the last registered first: autograd's threads may queue work.
    atexit.register(_finish_queued_work)
    atexit.register(_drain_autograd_device_threads)
