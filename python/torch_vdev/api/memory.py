"""Memory statistics and cache control of vdev's caching allocator (``torch.cuda`` names)."""

import pickle
import sys
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


def memory_summary(device: Optional[Any] = None, abbreviated: bool = False) -> str:
    """The allocator's statistics as the table ``torch.cuda.memory_summary`` prints."""
    index = _get_device_index(device, optional=True)
    stats = memory_stats(index)
    width = 75

    def scaled(value: int, reference: float, units: list, step: int, limit: float) -> tuple:
        # Scales value by the unit that suits `reference` (the row's first value).
        unit = 0
        while unit + 1 < len(units) and reference >= limit:
            value //= step
            reference /= step
            unit += 1
        return value, units[unit]

    def size(value: int, reference: float) -> str:
        value, unit = scaled(value, reference, ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024, 768 * 1024)
        return f"{value:6d} {unit}"

    def count(value: int, reference: float) -> str:
        value, unit = scaled(value, reference, [" ", "K", "M"], 1000, 750 * 1000)
        return f"{value:7d} {unit} "

    rule, double_rule = "-" * width, "=" * width
    lines = [
        double_rule,
        f" {'':16} PyTorch {torch._C._get_privateuse1_backend_name().upper()} memory summary, device ID {index:<17d} ",
        rule,
        f"  {'':9} {_C.backend_name} OOMs: {stats.get('num_ooms', 0):<12d} | {'':6} alloc retries: {stats.get('num_alloc_retries', 0):<8d}  ",
        double_rule,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    pooled = [
        ("allocated_bytes", "Allocated memory", size),
        ("active_bytes", "Active memory", size),
        ("requested_bytes", "Requested memory", size),
        ("reserved_bytes", "Reserved memory", size),
        ("inactive_split_bytes", "Non-releasable memory", size),
        ("allocation", "Allocations", count),
        ("active", "Active allocs", count),
        ("segment", "Reserved segments", count),
        ("inactive_split", "Non-releasable allocs", count),
    ]
    fields = ("current", "peak", "allocated", "freed")
    for key, title, formatter in pooled:
        lines.append(rule)
        pools = [("all", title)] + ([] if abbreviated else [("large_pool", "      from large pool"), ("small_pool", "      from small pool")])
        references = [stats.get(f"{key}.all.{field}", 0) for field in fields]
        for pool, name in pools:
            cells = " | ".join(formatter(stats.get(f"{key}.{pool}.{field}", 0), ref) for field, ref in zip(fields, references))
            lines.append(f" {name:<21} | {cells} ")
    for key, title in (
        ("oversize_allocations", "Oversize allocations"),
        ("oversize_segments", "Oversize segments"),
    ):
        lines.append(rule)
        values = [stats.get(f"{key}.{field}", 0) for field in fields]
        cells = " | ".join(count(value, value) for value in values)
        lines.append(f" {title:<21} | {cells} ")
    lines.append(double_rule)
    return "|" + "|\n|".join(line.ljust(width) for line in lines) + "|\n"


def _record_memory_history(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Optional[Any] = None,
) -> None:
    """Record the allocator's history, as ``torch.cuda.memory._record_memory_history``.

    ``enabled``: ``None`` stops recording and forgets what was recorded, ``"state"``
    keeps the stack that allocated each live block, ``"all"`` also keeps the last
    ``max_entries`` events of each device (alloc, free_requested, free_completed,
    segment_alloc, segment_free, oom). ``context``: which events keep their stack
    (``None``, ``"state"``/``"alloc"``: allocations, ``"all"``: also frees).
    ``stacks``: ``"python"`` frames, or ``"all"`` with C++ frames too. History is kept
    for every vdev device (``device`` is accepted for ``torch.cuda``'s signature).
    """
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if max_entries < 0:
        raise ValueError(f"max_entries must be non-negative, got {max_entries}")
    _C.record_memory_history(enabled, context, stacks, max_entries)


def _snapshot(device: Optional[Any] = None) -> dict:
    """The allocator's state in ``torch.cuda.memory._snapshot()``'s format: ``segments``
    (each vdev block is its own segment), ``device_traces`` and ``allocator_settings``,
    which ``torch.cuda._memory_viz`` renders."""
    return _C.memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle ``_snapshot()`` to ``filename`` (for https://pytorch.org/memory_viz or
    ``python -m torch.cuda._memory_viz trace_plot filename -o out.html``)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _set_allocator_settings(settings: str) -> None:
    """Apply ``"key:value,..."`` allocator options (``PYTORCH_VDEV_ALLOC_CONF``'s form):
    ``max_split_size_mb``, ``garbage_collection_threshold``, ``roundup_power2_divisions``,
    ``expandable_segments``."""
    _C.set_allocator_settings(settings)


def get_allocator_settings() -> str:
    """The allocator's current options, in ``PYTORCH_VDEV_ALLOC_CONF``'s form."""
    return _C.allocator_settings()
