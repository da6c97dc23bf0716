"""tests/upstream/run_pytorch_tests.py without a PyTorch checkout: a device-generic test
file written here, whose outcome on each device is known by construction, stands in
for PyTorch's test files."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

RUNNER = os.path.join(os.path.dirname(__file__), "upstream", "run_pytorch_tests.py")

# Per device: passes everywhere; fails on vdev; excluded by name; two excluded by a
# pattern; two dtypes passing everywhere; two parametrized variants, one excluded by
# its variant name; @onlyCPU (skipped on vdev); two @onlyCUDA
# (skipped on both; with the restrictions bypassed one passes on vdev, one fails);
# kills its process on vdev (last, as unittest orders tests by name). TestOther is
# not selected.
TINY_TEST_FILE = textwrap.dedent(
    """
    import os

    import torch
    from torch.testing._internal.common_device_type import (
        dtypes, instantiate_device_type_tests, onlyCPU, onlyCUDA)
    from torch.testing._internal.common_utils import TestCase, parametrize


    class TestTiny(TestCase):
        def test_add(self, device):
            x = torch.ones(2, device=device)
            self.assertEqual((x + x).cpu(), torch.full((2,), 2.0))

        def test_device_is_cpu(self, device):
            self.assertEqual(torch.empty(1, device=device).device.type, "cpu")

        def test_excluded_by_name(self, device):
            pass

        def test_pattern_one(self, device):
            pass

        def test_pattern_two(self, device):
            pass

        @dtypes(torch.float32, torch.int64)
        def test_zeros(self, device, dtype):
            self.assertEqual(torch.zeros(3, device=device, dtype=dtype).sum().item(), 0)

        @parametrize("n", [1, 2])
        def test_param(self, device, n):
            pass

        @onlyCPU
        def test_cpu_only(self, device):
            pass

        @onlyCUDA
        def test_cuda_only_passes(self, device):
            pass

        @onlyCUDA
        def test_cuda_only_needs_cuda(self, device):
            self.assertEqual(torch.device(device).type, "cuda")

        def test_zz_process_dies(self, device):
            if torch.device(device).type != "cpu":
                os._exit(3)


    class TestOther(TestCase):
        def test_other(self, device):
            pass


    instantiate_device_type_tests(TestTiny, globals())
    instantiate_device_type_tests(TestOther, globals())
    """
)

EXCLUSIONS = """
TEST_EXCLUSIONS = {
    "TestTiny": {
        "test_excluded_by_name": "excluded by its name",
        "test_pattern_*": "excluded by a pattern",
        "test_param_n_2": "one variant excluded by its name",
    },
}
"""


# An OpInfo claiming float16 on CUDA only: each device instantiates the CPU's dtypes,
# and a test asking for vdev's claims gets the CPU's and CUDA's together.
CLAIMS_TEST_FILE = textwrap.dedent(
    """
    import torch
    from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
    from torch.testing._internal.common_dtype import floating_types, floating_types_and
    from torch.testing._internal.common_utils import TestCase
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput

    tiny_abs = OpInfo(
        "tiny_abs", op=torch.abs, dtypes=floating_types(), dtypesIfCUDA=floating_types_and(torch.half),
        backward_dtypesIfCUDA=floating_types_and(torch.half),
        sample_inputs_func=lambda op, device, dtype, requires_grad, **kw: [
            SampleInput(torch.ones(2, device=device, dtype=dtype))])


    class TestClaims(TestCase):
        @ops([tiny_abs], dtypes=OpDTypes.supported)
        def test_instantiated(self, device, dtype, op):
            pass

        @ops([tiny_abs], dtypes=OpDTypes.none)
        def test_claims(self, device, op):
            device_type = torch.device(device).type
            cuda = {torch.half} if device_type != "cpu" else set()
            self.assertEqual(set(op.supported_dtypes(device_type)), {torch.float32, torch.float64} | cuda)
            self.assertEqual(set(op.supported_backward_dtypes(device_type)), {torch.float32, torch.float64} | cuda)
            self.assertEqual(set(op.supported_dtypes("cpu")), {torch.float32, torch.float64})


    instantiate_device_type_tests(TestClaims, globals())
    """
)


def run_runner(tmp_path, exclusions, *extra):
    pytorch_src = tmp_path / "pytorch"
    (pytorch_src / "test").mkdir(parents=True, exist_ok=True)
    (pytorch_src / "test" / "test_tiny.py").write_text(TINY_TEST_FILE)
    (pytorch_src / "test" / "test_claims.py").write_text(CLAIMS_TEST_FILE)
    exclusion_file = tmp_path / "exclusions.py"
    exclusion_file.write_text(exclusions)
    command = [sys.executable, RUNNER, "--pytorch-src", str(pytorch_src), "--exclusions", str(exclusion_file),
               "--log-dir", str(tmp_path / "logs"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_counts_and_table_match_the_construction(tmp_path):
    summary_file = tmp_path / "summary.json"
    process = run_runner(tmp_path, EXCLUSIONS, "--files", "test_tiny.py::TestTiny", "--jobs", "2",
                         "--bypass-device-restrictions", "--json", str(summary_file))
    assert process.returncode == 0, process.stderr

    (summary,) = json.loads(summary_file.read_text())
    assert summary["file"] == "test_tiny.py::TestTiny"
    assert summary["source"] is None  # not one of sources.py's files
    counts = {run: {k: summary[run][k] for k in ("passed", "failed", "skipped", "status")}
              for run in ("cpu", "vdev", "bypass")}
    assert counts == {
        "cpu": {"passed": 11, "failed": 0, "skipped": 2, "status": "ok"},
        "vdev": {"passed": 4, "failed": 2, "skipped": 3, "status": "died in test_zz_process_dies_vdev"},
        # Only the two CUDA-only tests run in the bypass process.
        "bypass": {"passed": 1, "failed": 1, "skipped": 0, "status": "ok"},
    }
    assert summary["cpu_only"] == 5  # the four excluded tests and the @onlyCPU one
    assert summary["cuda_only"] == 2
    # The measure leaves the CPU-only tests out: of add, device_is_cpu, zeros x2,
    # param_n_1 and process_dies, all but device_is_cpu and process_dies pass on vdev.
    assert summary["cpu_passed_compared"] == 6
    assert summary["cpu_passed_also_passing_on_vdev"] == 4
    regressions = {r["test"]: (r["outcome"], r["message"]) for r in summary["regressions"]}
    assert regressions == {
        "test_tiny.py::TestTinyVDEV::test_device_is_cpu_vdev": (
            "failed", "AssertionError: String comparison failed: 'vdev' != 'cpu'"),
        "test_tiny.py::TestTinyVDEV::test_zz_process_dies_vdev": ("failed", "the test process died (exit 3)"),
    }
    assert [r["test"] for r in summary["bypass_failures"]] == [
        "test_tiny.py::TestTinyVDEV::test_cuda_only_needs_cuda_vdev"]

    row = next(line for line in process.stdout.splitlines() if line.startswith("test_tiny.py"))
    cells = [cell.strip() for cell in row.split("|")]
    assert cells == ["test_tiny.py::TestTiny", "11/0/2", "4/2/3", "5", "2", "4/6 (66.7%)", "1/1/0",
                     "vdev: died in test_zz_process_dies_vdev"]
    assert "test_tiny.py::TestTinyVDEV::test_device_is_cpu_vdev: failed: AssertionError" in process.stdout


def test_vdev_claims_the_cpus_and_cudas_dtypes_when_asked_and_instantiates_the_cpus(tmp_path):
    summary_file = tmp_path / "summary.json"
    process = run_runner(tmp_path, "TEST_EXCLUSIONS = {}\n", "--files", "test_claims.py", "--jobs", "2",
                         "--json", str(summary_file))
    assert process.returncode == 0, process.stderr
    (summary,) = json.loads(summary_file.read_text())
    for run in ("cpu", "vdev"):
        assert (summary[run]["passed"], summary[run]["failed"], summary[run]["skipped"]) == (3, 0, 0), run
    # The same three tests on both (float32 and float64 instantiated, no float16 one).
    assert summary["cpu_passed_compared"] == summary["cpu_passed_also_passing_on_vdev"] == 3


@pytest.mark.parametrize(
    "entries, complaint",
    [
        ('{"TestTiny": {"test_add": ""}}', "TEST_EXCLUSIONS['TestTiny']['test_add'] has no reason"),
        ('{"TestTiny": ["test_add"]}', "TEST_EXCLUSIONS['TestTiny'] must map test names to reasons"),
    ],
)
def test_exclusion_without_reason_is_rejected_before_running(tmp_path, entries, complaint):
    process = run_runner(tmp_path, f"TEST_EXCLUSIONS = {entries}\n", "--files", "test_tiny.py")
    assert process.returncode == 2
    assert complaint in process.stderr
    assert not (tmp_path / "logs").exists()


def test_sources_name_a_commit_and_shims_are_one_line_with_a_reason(tmp_path):
    sys.path.insert(0, os.path.dirname(RUNNER))
    try:
        from sources import SHIMS, SOURCES, source_problems
    finally:
        sys.path.remove(os.path.dirname(RUNNER))
    for source in SOURCES.values():
        assert len(source.commit) == 40 and "/" in source.repo and source.chars > 0
    for file_name, shims in SHIMS.items():
        assert file_name in SOURCES
        for shim in shims:
            assert "\n" not in shim.code and shim.reason.strip()
            compile(shim.code, file_name, "exec")
    name, source = next(iter(SOURCES.items()))
    (tmp_path / name).write_text("x" * source.chars)
    assert source_problems(str(tmp_path), [name]) == {}
    (tmp_path / name).write_text("x" * (source.chars - 1))
    assert "a different or damaged copy" in source_problems(str(tmp_path), [name])[name]
    (tmp_path / name).unlink()
    assert source_problems(str(tmp_path), [name])[name].startswith("missing")


THREADS_TEST_FILE = textwrap.dedent(
    """
    import torch
    from torch.testing._internal.common_device_type import instantiate_device_type_tests
    from torch.testing._internal.common_utils import TestCase


    class TestThreads(TestCase):
        def test_one_intra_op_thread(self, device):
            self.assertEqual(torch.get_num_threads(), 1)


    instantiate_device_type_tests(TestThreads, globals())
    """
)


@pytest.mark.parametrize("threads, passes", [([], 0), (["--threads", "1"], 1)])
def test_threads_sets_each_processes_intra_op_threads(tmp_path, monkeypatch, threads, passes):
    # Two threads by default whatever the machine, so only --threads can make the test pass.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    (tmp_path / "pytorch" / "test").mkdir(parents=True)
    (tmp_path / "pytorch" / "test" / "test_threads.py").write_text(THREADS_TEST_FILE)
    summary_file = tmp_path / "summary.json"
    process = run_runner(tmp_path, "TEST_EXCLUSIONS = {}\n", "--files", "test_threads.py", "--jobs", "2",
                         *threads, "--json", str(summary_file))
    assert process.returncode == 0, process.stderr
    (summary,) = json.loads(summary_file.read_text())
    assert [summary[device]["passed"] for device in ("cpu", "vdev")] == [passes, passes]
    assert [summary[device]["failed"] for device in ("cpu", "vdev")] == [1 - passes, 1 - passes]
