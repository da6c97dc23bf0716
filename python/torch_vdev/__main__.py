"""``python -m torch_vdev``: a short diagnostic report of the installed backend;
``--cmake-prefix-path`` prints the CMake prefix of its C++ package instead."""

import argparse

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
    lines.append(f"CMake prefix path (C++ apps): {torch_vdev.cmake_prefix_path}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m torch_vdev", description=__doc__)
    parser.add_argument(
        "--cmake-prefix-path",
        action="store_true",
        help="print the CMAKE_PREFIX_PATH entry for find_package(TorchVdev) and exit",
    )
    args = parser.parse_args()
    print(torch_vdev.cmake_prefix_path if args.cmake_prefix_path else report())


if __name__ == "__main__":
    main()
