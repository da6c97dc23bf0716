"""The expected-failure data of the device-generic suites stays honest: every entry
names a real entry, test and dtype with a reason, and an entry whose test passes
fails the run (so the list only shrinks)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db
from torch.testing._internal.common_optimizers import optim_db

from expected_failures import EXPECTED_FAILURES

TESTS_DIR = os.path.dirname(__file__)

ENTRIES = {
    "TestOpInfo": (
        {op.full_name for op in op_db},
        {
            "test_forward",
            "test_noncontiguous",
            "test_out",
            "test_inplace",
            "test_grad",
            "test_accelerator_dtypes",
            "test_nested_forward",
        },
    ),
    "TestModuleInfo": ({info.name for info in module_db}, {"test_forward_backward"}),
    "TestOptimInfo": ({info.name for info in optim_db}, {"test_steps_match_cpu"}),
}


@pytest.mark.parametrize("key", sorted(EXPECTED_FAILURES, key=str), ids=str)
def test_entry_names_a_real_cell_and_gives_a_reason(key):
    suite, test, entry, dtype = key
    entries, tests = ENTRIES[suite]
    assert entry in entries and test in tests
    assert dtype is None or isinstance(getattr(torch, dtype), torch.dtype)
    reason = EXPECTED_FAILURES[key]
    assert reason.strip() and "\n" not in reason


# The hash seed orders abs's dtypes: under "0" its float32 cell is the first test
# PyTorch's generator makes, the one it names the device "privateuse1" for (see
# device_suites.with_expected_failures); under "1" it is not.
@pytest.mark.parametrize("hash_seed", ["0", "1"])
def test_an_entry_that_passes_fails_the_run(tmp_path, hash_seed):
    # test_opinfo.py's tests with one more entry, for a cell that passes (abs in float32).
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            from expected_failures import EXPECTED_FAILURES
            EXPECTED_FAILURES[("TestOpInfo", "test_forward", "abs", "float32")] = "probe"
            from test_opinfo import *
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_forward_abs_", str(probe)],
        env=dict(os.environ, PYTHONPATH=TESTS_DIR, PYTHONHASHSEED=hash_seed), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 2 passed" in result.stdout and "Unexpected success" in result.stdout, result.stdout
