"""Builds the C++ core (libtorch_vdev) and the Python extension (torch_vdev._C) with
CMake and Ninja, installing both into the torch_vdev package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import pybind11

        # An installed torch_vdev (an editable one: this very tree) must not load with
        # torch while it is being rebuilt: its extension module may be older than its Python.
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        import torch

        extension_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        editable = self.inplace or getattr(self, "editable_mode", False)
        if editable:
            # Editable installs import the package from the source tree, which needs the
            # core library and headers too, not only the extension module. The build
            # directory is kept for incremental rebuilds (README: Set up).
            package_dir = ROOT / "python" / "torch_vdev"
            build_dir = ROOT / "build" / "cmake"
        else:
            package_dir = extension_path.parent
            build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        build_type = os.environ.get("VDEV_BUILD_TYPE", "Release")
        prefix_path = ";".join([torch.utils.cmake_prefix_path, pybind11.get_cmake_dir()])
        subprocess.check_call(
            [
                "cmake",
                "-S", str(ROOT),
                "-B", str(build_dir),
                "-G", "Ninja",
                f"-DCMAKE_BUILD_TYPE={build_type}",
                f"-DCMAKE_PREFIX_PATH={prefix_path}",
                f"-DCMAKE_INSTALL_PREFIX={package_dir}",
                f"-DPython_EXECUTABLE={sys.executable}",
                "-DVDEV_BUILD_PYTHON=ON",
            ]
        )
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "install"])
        if editable:
            # setuptools takes the extension module from where it asked for it.
            extension_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(package_dir / extension_path.name, extension_path)


setup(
    ext_modules=[CMakeExtension("torch_vdev._C")],
    cmdclass={"build_ext": CMakeBuild},
)
