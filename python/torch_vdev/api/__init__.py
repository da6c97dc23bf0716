"""``torch.vdev``: the device API of the vdev backend, named like ``torch.cuda``."""

import os
from typing import Any, NamedTuple, Optional, Union

import torch

from .. import _C
from . import amp
from .memory import (
    empty_cache,
    host_memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .graphs import (
    VDEVGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from ._device import _get_device_index
from .storage import (
    BFloat16Storage,
    BoolStorage,
    ByteStorage,
    CharStorage,
    ComplexDoubleStorage,
    ComplexFloatStorage,
    DoubleStorage,
    FloatStorage,
    HalfStorage,
    IntStorage,
    LongStorage,
    ShortStorage,
)

__all__ = [
    "BFloat16Storage",
    "BoolStorage",
    "ByteStorage",
    "CharStorage",
    "ComplexDoubleStorage",
    "ComplexFloatStorage",
    "DoubleStorage",
    "FloatStorage",
    "HalfStorage",
    "IntStorage",
    "LongStorage",
    "ShortStorage",
    "Event",
    "Stream",
    "StreamContext",
    "VDEVGraph",
    "backend_meta",
    "amp",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "graph",
    "graph_pool_handle",
    "host_memory_stats",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_backend_meta",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]

def is_available() -> bool:
    """True if there is at least one vdev device (``VDEV_DEVICE_COUNT`` > 0)."""
    return _C.device_count() > 0


def device_count() -> int:
    """Number of vdev devices: ``VDEV_DEVICE_COUNT`` (default 2)."""
    return _C.device_count()


def is_initialized() -> bool:
    """Whether the backend was initialised (by the first vdev tensor or an explicit ``init()``)."""
    return _C.is_initialized()


def init() -> None:
    """Initialise the backend now rather than on first use. Raises in a process forked
    after the parent initialised vdev, as CUDA does."""
    if not is_available():
        raise RuntimeError("No vdev devices are available (VDEV_DEVICE_COUNT=0)")
    _C.init()


# torch calls this before making the first vdev tensor from Python.
_lazy_init = init


def _is_in_bad_fork() -> bool:
    return _C.is_in_bad_fork()


def current_device() -> int:
    """Index of this thread's current vdev device."""
    return _C.current_device()


def set_device(device: Union[torch.device, str, int]) -> None:
    """Set this thread's current vdev device; an invalid index raises and changes nothing."""
    index = _get_device_index(device)
    if index >= 0:
        _C.set_device(index)


class device:
    """Context manager that makes ``device`` current and restores the previous one on exit."""

    def __init__(self, device: Any):
        self.index = _get_device_index(device, optional=True)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _C.exchange_device(self.index)

    def __exit__(self, *exc_info: Any) -> bool:
        _C.set_device(self.previous)
        return False


class device_of(device):
    """Context manager that makes the device of ``tensor`` current (nothing for CPU tensors)."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__(tensor.get_device() if tensor.device.type == _C.backend_name else -1)

    def __enter__(self) -> None:
        if self.index >= 0:
            super().__enter__()

    def __exit__(self, *exc_info: Any) -> bool:
        if self.index >= 0:
            super().__exit__(*exc_info)
        return False


def synchronize(device: Optional[Any] = None) -> None:
    """Wait for all work queued on every stream of ``device``; an error raised by a
    queued kernel surfaces here."""
    _C.synchronize(_get_device_index(device, optional=True))


def _sleep(milliseconds: float) -> None:
    """Queue a kernel that keeps the current stream busy for ``milliseconds`` (as
    ``torch.cuda._sleep`` does for a number of cycles)."""
    _C._sleep(milliseconds)


class _DeviceProperties(NamedTuple):
    name: str
    total_memory: int
    multi_processor_count: int


def backend_meta(tensor: torch.Tensor) -> dict:
    """The flags of a vdev tensor's BackendMeta, the backend-private part of its
    TensorImpl (empty if none); ``torch.save`` / ``torch.load`` keep them."""
    return _C.backend_meta(tensor)


def set_backend_meta(tensor: torch.Tensor, flags: dict) -> None:
    """Replace the BackendMeta flags (names to bools) of a vdev tensor; ``{}`` removes them."""
    if not isinstance(flags, dict) or not all(
        isinstance(name, str) and isinstance(value, bool) for name, value in flags.items()
    ):
        raise TypeError(f"BackendMeta flags must be a dict of str to bool, got {flags!r}")
    _C.set_backend_meta(tensor, flags)


def get_device_name(device: Optional[Any] = None) -> str:
    return get_device_properties(device).name


def get_device_properties(device: Optional[Any] = None) -> _DeviceProperties:
    index = _get_device_index(device, optional=True)
    _C.check_device_index(index)
    return _DeviceProperties(
        name=f"vdev virtual device {index} (host memory)",
        total_memory=_C.memory_capacity(index),
        multi_processor_count=os.cpu_count() or 1,
    )


def get_device_capability(device: Optional[Any] = None) -> tuple:
    """vdev has no compute capability versions; every dtype is supported."""
    _C.check_device_index(_get_device_index(device, optional=True))
    return (1, 0)


def get_amp_supported_dtype() -> list:
    """The lower-precision dtypes autocast on vdev supports (torch.autocast asks)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
