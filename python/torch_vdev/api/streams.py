"""Streams and events of vdev, with ``torch.cuda``'s API and semantics.

Each stream is a stream of vdev's device runtime: an in-order queue of work run by its
own worker thread while the host goes on. Events complete when the stream reaches them.
The host's view of stream progress drives ``Tensor.record_stream`` as CUDA's caching
allocator does (see README, "Streams and events").
"""

from typing import Any, Optional

import torch

from .. import _C
from ._device import _get_device_index

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]


def _check_stream(stream: Any) -> None:
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"Expected a torch.Stream, got {type(stream).__name__}")
    if stream.device.type != _C.backend_name:
        raise ValueError(f"Expected a {_C.backend_name} stream, got a stream of {stream.device}")


class Stream(torch.Stream):
    """A vdev stream: an ordered queue of work on one device.

    Args:
        device: the stream's device (torch.device, str or int); the current device if None.
        priority: lower numbers are higher priorities, from 0 (default, lowest) to -3
            (highest) as with CUDA; values outside that range are clamped into it.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # wraps an existing stream
            return super().__new__(cls, priority=priority, **kwargs)
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, torch.device(_C.backend_name, index), priority=priority)

    @classmethod
    def _wrap(cls, stream: torch.Stream) -> "Stream":
        return cls(
            stream_id=stream.stream_id,
            device_index=stream.device_index,
            device_type=stream.device_type,
        )

    @property
    def priority(self) -> int:
        return _C.stream_priority(self)

    @staticmethod
    def priority_range() -> tuple:
        """(lowest, highest) priority, as ``torch.cuda.Stream.priority_range()``."""
        return _C.stream_priority_range

    def wait_event(self, event: torch.Event) -> None:
        """Make future work of this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make future work of this stream wait for the work submitted to ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional[torch.Event] = None) -> "Event":
        """Record ``event`` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, torch.Stream) and super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()

    def __repr__(self) -> str:
        return f"torch.vdev.Stream(device={self.device}, stream_id={self.stream_id}, priority={self.priority})"


class Event(torch.Event):
    """A vdev event: a marker in a stream's work, to wait for, query or time.

    Args:
        enable_timing: whether ``elapsed_time`` can measure time between events.
        blocking: accepted for CUDA compatibility (``synchronize`` always waits by blocking
            the calling thread).
        interprocess: not supported (vdev events are local to a process).
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> "Event":
        if interprocess:
            raise ValueError("vdev events cannot be shared between processes (interprocess=True)")
        return super().__new__(
            cls, torch.device(_C.backend_name), enable_timing=enable_timing, blocking=blocking
        )

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        """Record the event on ``stream`` (the current stream if None)."""
        if stream is not None:
            _check_stream(stream)
        super().record(stream)  # None: torch.Event uses the current stream

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        """Make future work of ``stream`` (the current stream if None) wait for this event."""
        if stream is not None:
            _check_stream(stream)
        super().wait(stream)  # None: torch.Event uses the current stream

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event's and ``end_event``'s records (both need
        ``enable_timing=True``)."""
        return _C.elapsed_time(self, end_event)

    def __repr__(self) -> str:
        return f"torch.vdev.Event(device={self.device}, event_id={self.event_id:#x})"


def current_stream(device: Optional[Any] = None) -> Stream:
    """This thread's current stream of ``device`` (the current device if None)."""
    return Stream._wrap(_C.current_stream(_get_device_index(device, optional=True)))


def default_stream(device: Optional[Any] = None) -> Stream:
    """The default stream of ``device`` (the current device if None)."""
    return Stream._wrap(_C.default_stream(_get_device_index(device, optional=True)))


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Make ``stream`` current on its device, and its device current, on this thread.
    None does nothing, as with ``torch.cuda.set_stream``."""
    if stream is None:
        return
    _check_stream(stream)
    _C.set_stream(stream)


class StreamContext:
    """Context manager that makes ``stream`` current (and its device current) and
    restores the previous streams and device on exit. None makes it a no-op."""

    def __init__(self, stream: Optional[torch.Stream]):
        if stream is not None:
            _check_stream(stream)
        self.stream = stream
        self.previous_streams: list = []

    def __enter__(self) -> Optional[torch.Stream]:
        if self.stream is not None:
            # The stream of the device to come back to, then that of the stream's device.
            self.previous_streams.append(
                (current_stream(), current_stream(self.stream.device_index))
            )
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc_info: Any) -> bool:
        if self.stream is not None:
            source, destination = self.previous_streams.pop()
            set_stream(destination)
            set_stream(source)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """``with torch.vdev.stream(s):`` runs the block with ``s`` as the current stream."""
    return StreamContext(stream)
