from typing import Any

import torch

from .. import _C


def _get_device_index(device: Any, optional: bool = False) -> int:
    """Index of a vdev ``device`` given as int, str or torch.device; None (when
    ``optional``) or an index-less device means the current device."""
    if device is None:
        if not optional:
            raise ValueError("Expected a vdev device, got None")
        return _C.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _C.backend_name:
            raise ValueError(f"Expected a {_C.backend_name} device, got {device}")
        if device.index is None:
            return _C.current_device()
        device = device.index
    if not isinstance(device, int):
        raise TypeError(f"Expected a device index, str or torch.device, got {type(device).__name__}")
    _C.check_device_index(device)
    return device
