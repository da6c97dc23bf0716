"""README's demo runs and its vdev and CPU training losses agree (the script checks)."""

import pathlib
import subprocess
import sys

QUICKSTART = pathlib.Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"


def test_quickstart_runs():
    result = subprocess.run([sys.executable, str(QUICKSTART)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Expected all tensors to be on the same device" in result.stdout
    assert "after del:" in result.stdout
