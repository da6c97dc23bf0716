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
# pattern; two dtypes passing everywhere; @onlyCPU (skipped on vdev); kills its
# process on vdev (last, as unittest orders tests by name). TestOther is not selected.
TINY_TEST_FILE = textwrap.dedent(
    """
    import os

    import torch
    from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, onlyCPU
    from torch.testing._internal.common_utils import TestCase


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

        @onlyCPU
        def test_cpu_only(self, device):
            pass

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
    },
}
"""


def run_runner(tmp_path, exclusions, *extra):
    pytorch_src = tmp_path / "pytorch"
    (pytorch_src / "test").mkdir(parents=True, exist_ok=True)
    (pytorch_src / "test" / "test_tiny.py").write_text(TINY_TEST_FILE)
    exclusion_file = tmp_path / "exclusions.py"
    exclusion_file.write_text(exclusions)
    command = [sys.executable, RUNNER, "--pytorch-src", str(pytorch_src), "--exclusions", str(exclusion_file),
               "--log-dir", str(tmp_path / "logs"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_counts_and_table_match_the_construction(tmp_path):
    summary_file = tmp_path / "summary.json"
    process = run_runner(tmp_path, EXCLUSIONS, "--files", "test_tiny.py::TestTiny", "--jobs", "2",
                         "--json", str(summary_file))
    assert process.returncode == 0, process.stderr

    (summary,) = json.loads(summary_file.read_text())
    assert summary["file"] == "test_tiny.py::TestTiny"
    assert {k: summary["cpu"][k] for k in ("passed", "failed", "skipped", "status")} == {
        "passed": 9, "failed": 0, "skipped": 0, "status": "ok"}
    assert {k: summary["vdev"][k] for k in ("passed", "failed", "skipped", "status")} == {
        "passed": 3, "failed": 2, "skipped": 1, "status": "died in test_zz_process_dies_vdev"}
    assert summary["cpu_only"] == 3  # the three excluded tests
    assert summary["cpu_passed_compared"] == 6
    assert summary["cpu_passed_also_passing_on_vdev"] == 3
    regressions = {r["test"]: (r["outcome"], r["message"]) for r in summary["regressions"]}
    assert regressions == {
        "test_tiny.py::TestTinyVDEV::test_cpu_only_vdev": ("skipped", "Only runs on cpu"),
        "test_tiny.py::TestTinyVDEV::test_device_is_cpu_vdev": (
            "failed", "AssertionError: String comparison failed: 'vdev' != 'cpu'"),
        "test_tiny.py::TestTinyVDEV::test_zz_process_dies_vdev": ("failed", "the test process died (exit 3)"),
    }

    row = next(line for line in process.stdout.splitlines() if line.startswith("test_tiny.py"))
    cells = [cell.strip() for cell in row.split("|")]
    assert cells == ["test_tiny.py::TestTiny", "9/0/0", "3/2/1", "3", "3/6 (50.0%)",
                     "vdev: died in test_zz_process_dies_vdev"]
    assert "test_tiny.py::TestTinyVDEV::test_device_is_cpu_vdev: AssertionError" in process.stdout


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
