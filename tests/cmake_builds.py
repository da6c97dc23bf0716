"""Configuring and building CMake projects from tests, with the cmake and ninja of this
Python environment (the test extra installs them), else PATH."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Compiling against libtorch takes a minute or more per source file.
BUILD_TIMEOUT = 1800


def tool(name: str) -> str:
    search_path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which(name, path=search_path)
    if found is None:
        pytest.fail(f"{name} is not installed; install the test extra: pip install '.[test]'")
    return found


def cmake_build(source: Path, build_dir: Path, *flags: str) -> Path:
    """Configures `source` into `build_dir` with Ninja and `flags`, builds it, and
    returns `build_dir`; fails the test with the tools' output if either step fails."""
    configure = [
        tool("cmake"), "-S", str(source), "-B", str(build_dir), "-G", "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", *flags,
    ]
    for command in (configure, [tool("cmake"), "--build", str(build_dir)]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return build_dir
