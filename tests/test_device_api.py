"""torch.vdev mirrors torch.cuda's device API."""

import threading

import pytest
import torch

import torch_vdev


def test_module_is_registered():
    assert torch.vdev is torch_vdev.api
    assert torch._C._get_privateuse1_backend_name() == "vdev"
    assert torch.vdev.is_available()
    assert torch.vdev.device_count() == 2
    assert torch.accelerator.current_accelerator() == torch.device("vdev")


def test_set_device_and_current_device():
    torch.vdev.set_device(1)
    assert torch.vdev.current_device() == 1
    assert torch.randn(2, device="vdev").device == torch.device("vdev:1")
    torch.vdev.set_device("vdev:0")
    assert torch.vdev.current_device() == 0
    torch.vdev.set_device(torch.device("vdev", 1))
    assert torch.accelerator.current_device_index() == 1


def test_device_context_manager_restores():
    with torch.vdev.device(1):
        assert torch.vdev.current_device() == 1
        assert torch.empty(1, device="vdev").device.index == 1
        with torch.vdev.device("vdev:0"):
            assert torch.vdev.current_device() == 0
        assert torch.vdev.current_device() == 1
    assert torch.vdev.current_device() == 0
    tensor = torch.zeros(1, device="vdev:1")
    with torch.vdev.device_of(tensor):
        assert torch.vdev.current_device() == 1


def test_current_device_is_per_thread():
    torch.vdev.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.vdev.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert torch.vdev.current_device() == 1


@pytest.mark.parametrize("bad", [7, -3, 2])
def test_invalid_index_is_rejected_and_changes_nothing(bad):
    torch.vdev.set_device(1)
    with pytest.raises(RuntimeError, match=f"Invalid device index {bad} for vdev"):
        torch.vdev.set_device(bad)
    assert torch.vdev.current_device() == 1


def test_invalid_device_in_tensor_creation_is_rejected():
    with pytest.raises(RuntimeError, match="Invalid device index 7 for vdev: there are 2"):
        torch.empty(3, device="vdev:7")
    with pytest.raises(RuntimeError, match="Invalid device index 7"):
        torch.randn(3).to("vdev:7")
    with pytest.raises(RuntimeError, match="Invalid device index 5"):
        with torch.vdev.device(5):
            pass
    # The process stays usable.
    assert torch.ones(2, device="vdev").sum().item() == 2.0


def test_wrong_device_type_is_rejected():
    with pytest.raises(ValueError, match="Expected a vdev device"):
        torch.vdev.set_device("cpu")


def test_synchronize_and_initialization():
    torch.vdev.synchronize()
    torch.vdev.synchronize(1)
    torch.accelerator.synchronize()
    torch.vdev.init()
    assert torch.vdev.is_initialized()
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.vdev.synchronize(9)


def test_device_properties():
    properties = torch.vdev.get_device_properties(1)
    assert properties.total_memory > 0
    assert "vdev" in torch.vdev.get_device_name()
    assert torch.vdev.is_bf16_supported()


def test_device_count_from_environment(run_in_subprocess):
    result = run_in_subprocess(
        "import torch, torch_vdev; print(torch.vdev.device_count()); torch.zeros(1, device='vdev:3')",
        env={"VDEV_DEVICE_COUNT": "4"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4"
    result = run_in_subprocess(
        "import torch, torch_vdev; print(torch.vdev.is_available(), torch.vdev.device_count())",
        env={"VDEV_DEVICE_COUNT": "0"},
    )
    assert result.stdout.strip() == "False 0", result.stderr


def test_diagnostic_report(run_in_subprocess):
    result = run_in_subprocess("import runpy; runpy.run_module('torch_vdev', run_name='__main__')")
    assert result.returncode == 0, result.stderr
    for expected in ("torch_vdev", "torch 2.13", "devices: 2", "memory limit", "build type"):
        assert expected in result.stdout
