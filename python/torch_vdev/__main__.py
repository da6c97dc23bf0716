"""``python -m torch_vdev``: a short diagnostic report of the installed backend."""

import torch

import torch_vdev
from torch_vdev import _C


def report() -> str:
    lines = [
        f"torch_vdev {torch_vdev.__version__} ({_C.__file__})",
        f"torch {torch.__version__}",
        f"backend name: {torch_vdev.BACKEND_NAME} (alias privateuseone)",
        f"devices: {torch.vdev.device_count()} (VDEV_DEVICE_COUNT)",
    ]
    for index in range(torch.vdev.device_count()):
        capacity = _C.memory_capacity(index)
        lines.append(
            f"  vdev:{index}: memory limit {capacity} bytes ({capacity / (1 << 30):.2f} GiB), "
            f"allocated {torch.vdev.memory_allocated(index)} bytes"
        )
    lines.append(f"build type: {_C.build_type}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
