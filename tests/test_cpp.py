"""C++ apps: the CMake package that torch_vdev installs, the public API (tests/cpp/)
and the training example (examples/cpp/), configured, built and run against the
package as a user would."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

import torch_vdev
from cmake_builds import cmake_build

ROOT = Path(__file__).resolve().parent.parent


def _build(source: Path, build_dir: Path) -> Path:
    """Builds a CMake project of C++ apps against the installed package, passing only
    torch_vdev's prefix: the package finds Torch by itself."""
    return cmake_build(
        source, build_dir, "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_PREFIX_PATH={torch_vdev.cmake_prefix_path}",
    )


def _run(program: Path, device_count: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, VDEV_DEVICE_COUNT=str(device_count))
    return subprocess.run([str(program)], capture_output=True, text=True, timeout=300, env=env)


def _results(output: str) -> dict:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def test_programs(tmp_path_factory) -> Path:
    return _build(ROOT / "tests" / "cpp", tmp_path_factory.mktemp("cpp_tests"))


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    return _build(ROOT / "examples" / "cpp", tmp_path_factory.mktemp("cpp_example")) / "train"


def test_cmake_prefix_path_holds_the_package(run_in_subprocess):
    config = Path(torch_vdev.cmake_prefix_path) / "TorchVdev" / "TorchVdevConfig.cmake"
    assert config.is_file()
    result = run_in_subprocess(
        "import runpy, sys; sys.argv = ['torch_vdev', '--cmake-prefix-path'];"
        "runpy.run_module('torch_vdev', run_name='__main__')"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == torch_vdev.cmake_prefix_path


def test_linking_the_target_registers_the_backend(test_programs):
    # links_backend uses no libtorch_vdev symbol and links with --as-needed.
    result = _run(test_programs / "links_backend", device_count=3)
    assert result.returncode == 0, result.stderr
    assert _results(result.stdout) == {"device": "vdev:1", "device_count": "3"}


@pytest.fixture(scope="module")
def public_api(test_programs) -> dict:
    result = _run(test_programs / "public_api", device_count=3)
    assert result.returncode == 0, result.stdout + result.stderr
    return _results(result.stdout)


def test_device_names_and_current_device(public_api):
    assert public_api["device_count"] == public_api["accelerator_device_count"] == "3"
    assert public_api["current_device.initial"] == "0"
    assert public_api["device.privateuseone:0"] == "vdev:0"
    assert public_api["device.vdev:1"] == "vdev:1"
    assert public_api["device.same_type"] == "1"
    assert public_api["tensor_device.vdev:1"] == "vdev:1"
    assert public_api["current_device.after_set"] == "2"
    assert public_api["accelerator_device_index.after_set"] == "2"
    assert public_api["tensor_device.index_less"] == "vdev:2"
    assert public_api["current_device.other_thread"] == "0"


def _cpu_randn(seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(5, generator=generator).tolist()


def test_manual_seed_matches_cpu(public_api):
    # torch::manual_seed(1) seeded every device, then vdev::manual_seed(7) device 2 only.
    for key, seed in (("randn.vdev:0", 1), ("randn.vdev:2", 7)):
        values = [float(value) for value in public_api[key].split(",")]
        assert values == pytest.approx(_cpu_randn(seed), rel=1e-6), key


def test_memory_statistics(public_api):
    nbytes = int(public_api["tensor_nbytes"])
    assert nbytes == 1024 * 4
    assert int(public_api["memory_allocated.delta"]) == nbytes
    assert public_api["memory_allocated.current_is_device_1"] == "1"
    assert int(public_api["memory_allocated.delta_after_free"]) == 0
    assert int(public_api["max_memory_allocated.delta"]) >= nbytes
    # The freed block stays cached until empty_cache returns it.
    assert int(public_api["reserved.before_empty_cache"]) >= nbytes
    assert int(public_api["reserved.after_empty_cache"]) == 0


@pytest.mark.parametrize(
    "call, index",
    [
        ("set_device(3)", 3),
        ("set_device(-2)", -2),
        ("synchronize(3)", 3),
        ("memory_allocated(5)", 5),
        ("max_memory_allocated(-7)", -7),
        ("empty(vdev:3)", 3),
    ],
)
def test_invalid_device_index_is_a_clear_c10_error(public_api, call, index):
    message = public_api[f"error.{call}"]
    assert message.startswith(f"Invalid device index {index} for vdev"), message
    assert "there are 3 vdev device(s), valid indices are 0..2" in message


def test_process_stays_usable_after_errors(public_api):
    assert public_api["current_device.after_errors"] == "1"
    assert float(public_api["sum.after_errors"]) == 4.0


def test_example_trains_like_cpu(example):
    result = _run(example, device_count=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vdev and CPU losses agree" in result.stdout
    memory = {
        when: (int(allocated), int(peak))
        for when, allocated, peak in re.findall(
            r"vdev:0 memory \((.+)\): memory_allocated=(\d+) max_memory_allocated=(\d+)",
            result.stdout,
        )
    }
    alive, _ = memory["model, gradients, momenta and data alive"]
    freed, peak = memory["after training"]
    assert alive > 0
    assert freed == 0
    assert peak >= alive
