"""vdev's runtime interface for TorchDynamo and Inductor.

Dynamo looks devices up by name (``torch._dynamo.device_interface``) to trace or
graph-break on stream, event and device calls, and Inductor asks the same interface for
device properties (reduction heuristics), the current device and synchronization
(benchmarking). Everything here forwards to ``torch.vdev``, which mirrors ``torch.cuda``.
"""

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
    register_interface_for_device,
)

from . import BACKEND_NAME, _C


class VdevInterface(DeviceInterface):
    device = torch.vdev.device  # type: ignore[assignment]
    Event = torch.vdev.Event  # type: ignore[assignment]
    Stream = torch.vdev.Stream  # type: ignore[assignment]

    class Worker:
        """Device queries for Inductor's compile workers, which must not initialise vdev
        (a process forked after vdev started cannot use it): answers recorded here first."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[BACKEND_NAME] = device

        @staticmethod
        def current_device() -> int:
            if BACKEND_NAME in caching_worker_current_devices:
                return caching_worker_current_devices[BACKEND_NAME]
            return torch.vdev.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if device is None:
                device = VdevInterface.Worker.current_device()
            index = torch.vdev._get_device_index(device, optional=True)
            if BACKEND_NAME not in caching_worker_device_properties:
                caching_worker_device_properties[BACKEND_NAME] = [
                    torch.vdev.get_device_properties(i) for i in range(torch.vdev.device_count())
                ]
            return caching_worker_device_properties[BACKEND_NAME][index]

    current_device = staticmethod(torch.vdev.current_device)
    set_device = staticmethod(torch.vdev.set_device)
    device_count = staticmethod(torch.vdev.device_count)
    is_available = staticmethod(torch.vdev.is_available)
    stream = staticmethod(torch.vdev.stream)  # type: ignore[assignment]
    current_stream = staticmethod(torch.vdev.current_stream)
    set_stream = staticmethod(torch.vdev.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(torch.vdev.synchronize)
    get_device_properties = staticmethod(torch.vdev.get_device_properties)  # type: ignore[assignment]
    memory_allocated = staticmethod(torch.vdev.memory_allocated)
    is_bf16_supported = staticmethod(torch.vdev.is_bf16_supported)

    @staticmethod
    def exchange_device(device: int) -> int:
        return _C.exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return _C.exchange_device(device) if device >= 0 else -1

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.vdev.set_stream(
            torch.vdev.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_index: int) -> int:
        """The current stream of a vdev device as an integer, as generated code passes it."""
        return torch.vdev.current_stream(device_index).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        major, minor = torch.vdev.get_device_capability(device)
        return f"{major}.{minor}"


def register() -> None:
    register_interface_for_device(BACKEND_NAME, VdevInterface)
    for index in range(torch.vdev.device_count()):
        register_interface_for_device(f"{BACKEND_NAME}:{index}", VdevInterface)
