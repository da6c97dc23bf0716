"""The device runtime library (third_party/vdev_runtime), on its own: its CMake project
is configured and built without PyTorch, and each C++ test of its test program runs
in its own process (some with VDEV_* settings). The thread-related tests run again
in a ThreadSanitizer build, which fails them on any data race."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from cmake_builds import cmake_build

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "third_party" / "vdev_runtime"
TEST_SOURCE = RUNTIME / "tests" / "runtime_tests.cpp"

TEST_NAMES = re.findall(r"^TEST\((\w+)\)", TEST_SOURCE.read_text(), flags=re.M)

# Tests that read the environment the runtime starts from.
ENVIRONMENTS = {
    "malformed_device_count_gives_default_and_reports": {"VDEV_DEVICE_COUNT": "many"},
    "device_count_and_properties": {"VDEV_DEVICE_COUNT": "3"},
    "memory_limit_is_the_capacity": {"VDEV_MEMORY_LIMIT": str(1 << 20)},
    "malformed_memory_limit_is_reported": {"VDEV_MEMORY_LIMIT": "12k"},
    "launch_blocking_from_the_environment": {"VDEV_LAUNCH_BLOCKING": "1"},
}

THREADED_TESTS = [
    "many_host_threads_share_a_stream",
    "sleeping_synchronizations_return_at_their_own_points",
    "concurrent_allocation_and_streams",
    "streams_run_concurrently",
    "stream_wait_event_orders_streams",
    "waits_are_for_their_record_when_another_stream_records_the_event_again",
    "an_earlier_record_completing_last_does_not_move_the_event",
    "event_query_and_synchronize_follow_the_stream",
    "launch_failure_surfaces_at_the_next_synchronization",
    "async_copies_are_queued_in_stream_order",
    "device_synchronize_waits_for_every_stream",
    "only_blocking_waits_run_through_the_host_wait_hook",
    "forked_and_joined_streams_are_captured",
    "capture_modes_decide_what_other_streams_may_do",
    "a_graph_destroyed_while_launched_runs_then_is_destroyed",
    "ending_a_capture_checks_the_stream_and_the_thread",
    "launches_of_one_graph_exec_run_in_launch_order_across_streams",
]


def _build(build_dir: Path, *flags: str) -> Path:
    return cmake_build(RUNTIME, build_dir, "-DVDEV_RUNTIME_BUILD_TESTS=ON", *flags) / "vdev_runtime_tests"


def _run(program: Path, name: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDEV_")}
    env.update(ENVIRONMENTS.get(name, {}))
    return subprocess.run([str(program), name], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("vdev_runtime"), "-DCMAKE_BUILD_TYPE=Release")


@pytest.fixture(scope="module")
def tsan_program(tmp_path_factory) -> Path:
    return _build(
        tmp_path_factory.mktemp("vdev_runtime_tsan"), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DCMAKE_CXX_FLAGS=-fsanitize=thread", "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread",
    )


def test_the_library_does_not_depend_on_pytorch():
    includes = [
        line for path in RUNTIME.rglob("*.[ch]*") for line in path.read_text().splitlines()
        if line.startswith("#include")
    ]
    assert includes and not [line for line in includes if re.search(r"torch|ATen|c10", line)]
    assert "find_package(Torch" not in (RUNTIME / "CMakeLists.txt").read_text()


def test_the_program_lists_every_test(program):
    listed = subprocess.run([str(program), "--list"], capture_output=True, text=True, check=True)
    assert sorted(listed.stdout.split()) == sorted(TEST_NAMES)
    assert len(TEST_NAMES) >= 20


@pytest.mark.parametrize("name", TEST_NAMES)
def test_runtime(program, name):
    result = _run(program, name)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", THREADED_TESTS)
def test_runtime_under_thread_sanitizer(tsan_program, name):
    assert name in TEST_NAMES
    result = _run(tsan_program, name)
    assert result.returncode == 0 and "ThreadSanitizer" not in result.stderr, result.stdout + result.stderr
