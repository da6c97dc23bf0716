import os
import subprocess
import sys

import pytest
import torch

# Installed with pip, importing torch has already loaded the backend (autoload);
# importing it again is a no-op that also covers a source checkout on PYTHONPATH.
import torch_vdev  # noqa: F401


def run_python(code: str, env: dict = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (for process-wide settings such as
    VDEV_MEMORY_LIMIT or autoload) and returns the finished process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session", autouse=True)
def _fresh_inductor_cache(tmp_path_factory):
    """Inductor compiles into a new cache directory each test session, so compiled
    results never come from an earlier run's artefacts."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor_cache"))
    yield
    if previous is None:
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


@pytest.fixture
def run_in_subprocess():
    return run_python


@pytest.fixture(autouse=True)
def _restore_current_device_and_streams():
    previous = torch.vdev.current_device()
    yield
    # set_stream makes the stream's device current, so the device is restored last.
    for index in range(torch.vdev.device_count()):
        torch.vdev.set_stream(torch.vdev.default_stream(index))
    torch.vdev.set_device(previous)


DEVICE_GENERIC_SUITES = ("test_opinfo.py", "test_module_info.py", "test_optim_info.py")


def pytest_terminal_summary(terminalreporter):
    """The issue's measure for the device-generic suites: of the cells (entry, dtype,
    test) that pass on the CPU reference, the share that passes on vdev."""
    counts = {}
    for outcome in ("passed", "xfailed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            if report.when == "call" and report.nodeid.split("::")[0].endswith(DEVICE_GENERIC_SUITES):
                counts[outcome] = counts.get(outcome, 0) + 1
    total = sum(counts.values())
    if total:
        passed = counts.get("passed", 0)
        terminalreporter.write_line(
            f"device-generic suites: {passed} of {total} cells pass on vdev ({100 * passed / total:.2f}%), "
            f"{counts.get('xfailed', 0)} expected failures, {counts.get('failed', 0)} failures"
        )
