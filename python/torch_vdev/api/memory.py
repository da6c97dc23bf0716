"""Memory statistics and cache control of vdev's caching allocator (``torch.cuda`` names)."""

from collections import OrderedDict
from typing import Any, Optional

import torch

from .. import _C
from ._device import _get_device_index


def memory_stats(device: Optional[Any] = None) -> "OrderedDict[str, Any]":
    """The allocator's statistics, with the keys of ``torch.cuda.memory_stats``."""
    return torch.accelerator.memory_stats(_get_device_index(device, optional=True))


def memory_allocated(device: Optional[Any] = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Optional[Any] = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Optional[Any] = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Optional[Any] = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Optional[Any] = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_get_device_index(device, optional=True))


def reset_accumulated_memory_stats(device: Optional[Any] = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_get_device_index(device, optional=True))


def empty_cache() -> None:
    """Return every cached, unused block to the system."""
    torch.accelerator.empty_cache()


def mem_get_info(device: Optional[Any] = None) -> tuple:
    """(free bytes, capacity in bytes) of ``device``."""
    return torch.accelerator.get_memory_info(_get_device_index(device, optional=True))


def host_memory_stats() -> "OrderedDict[str, Any]":
    """Statistics of the pinned host memory allocator (keys of ``torch.cuda.host_memory_stats``:
    ``allocations``, ``allocated_bytes``, ``active_requests``, ``active_bytes`` with
    ``.current/.peak/.allocated/.freed``, ``num_host_alloc``, ``num_host_free``)."""
    return OrderedDict(sorted(_C.host_memory_stats().items()))
