"""The torch.backends entry point loads vdev when torch is imported."""

AUTOLOAD = "import torch; x = torch.randn(3, device='privateuseone'); print(x.device, (x * 2).sum().item() != 0)"


def test_autoload_without_importing_the_package(run_in_subprocess):
    result = run_in_subprocess(AUTOLOAD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["vdev:0", "True"]


def test_autoload_can_be_disabled(run_in_subprocess):
    result = run_in_subprocess(
        "import sys, torch; print('torch_vdev' in sys.modules)",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert result.stdout.strip() == "False", result.stderr
    result = run_in_subprocess(
        "import torch, torch_vdev; print(torch.ones(2, device='vdev').sum().item())",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert result.stdout.strip() == "2.0", result.stderr
