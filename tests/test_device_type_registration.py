"""PyTorch's device-generic test machinery sees vdev with nothing imported but torch:
autoload registers the backend before torch.testing._internal.common_device_type
builds its device list, so PrivateUse1TestBase is instantiated and can be selected
with only_for="vdev" or PYTORCH_TESTING_DEVICE_ONLY_FOR=vdev."""

import os
import subprocess
import sys
import textwrap

import pytest

# Records the device of each instantiated test, so the test below can see which
# device classes were made and where their tests ran.
DEVICE_GENERIC_FILE = textwrap.dedent(
    """
    import os
    import sys

    import torch
    from torch.testing._internal.common_device_type import (
        PrivateUse1TestBase,
        device_type_test_bases,
        instantiate_device_type_tests,
    )
    from torch.testing._internal.common_utils import TestCase

    assert "torch_vdev" in sys.modules, "autoload did not load the backend"
    assert PrivateUse1TestBase in device_type_test_bases


    class TestWhere(TestCase):
        def test_device(self, device):
            with open(os.environ["DEVICES_SEEN"], "a") as seen:
                seen.write(f"{type(self).__name__} {device} {torch.ones(1, device=device).device}\\n")


    instantiate_device_type_tests(TestWhere, globals(), only_for=os.environ.get("ONLY_FOR") or None)
    """
)


@pytest.mark.parametrize(
    "selection",
    [{"ONLY_FOR": "vdev"}, {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "vdev"}, {}],
    ids=["only_for", "PYTORCH_TESTING_DEVICE_ONLY_FOR", "every_device"],
)
def test_device_generic_tests_are_instantiated_for_vdev(tmp_path, selection):
    test_file = tmp_path / "test_where.py"
    test_file.write_text(DEVICE_GENERIC_FILE)
    seen = tmp_path / "seen.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("ONLY_FOR", "PYTORCH_TESTING_DEVICE_ONLY_FOR")}
    env.update(selection, DEVICES_SEEN=str(seen))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = sorted(seen.read_text().splitlines())
    vdev_row = "TestWherePRIVATEUSE1 vdev:0 vdev:0"
    assert rows == (sorted(["TestWhereCPU cpu cpu", vdev_row]) if not selection else [vdev_row])
