"""torch.save / torch.load of vdev tensors, views, modules and optimizer state, with
map_location, the BackendMeta round trip, and clear errors for missing devices."""

import io

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl


def _round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.bfloat16])
def test_tensor_round_trip_keeps_device_dtype_and_values(dtype):
    source = torch.randn(4, 6).to(dtype)
    tensor = source.to("vdev:1")
    loaded = _round_trip(tensor)
    assert loaded.device == torch.device("vdev", 1) and is_vdev_impl(loaded)
    assert loaded.dtype == dtype
    assert_close(loaded.cpu(), source, rtol=0, atol=0)


def test_requires_grad_and_non_contiguous_layout_survive():
    tensor = torch.randn(5, 3, device="vdev").t().requires_grad_()
    loaded = _round_trip(tensor)
    assert loaded.requires_grad and loaded.stride() == tensor.stride()
    assert_close(loaded.detach().cpu(), tensor.detach().cpu(), rtol=0, atol=0)


def test_views_keep_sharing_storage():
    base = torch.arange(12.0, device="vdev:1")
    view = base[2:8].view(2, 3)
    loaded_base, loaded_view = _round_trip([base, view])
    assert loaded_view.untyped_storage().data_ptr() == loaded_base.untyped_storage().data_ptr()
    assert loaded_view.storage_offset() == 2
    loaded_view.fill_(-1.0)
    expected = torch.arange(12.0)
    expected[2:8] = -1.0
    assert_close(loaded_base.cpu(), expected)


def test_module_state_dict_and_whole_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("vdev")
    inputs = torch.randn(3, 4, device="vdev")
    copy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("vdev")
    copy.load_state_dict(_round_trip(model.state_dict()))
    assert_close(copy(inputs).cpu(), model(inputs).cpu(), rtol=0, atol=0)
    whole = _round_trip(model, weights_only=False)
    assert all(p.device.type == "vdev" for p in whole.parameters())
    assert_close(whole(inputs).cpu(), model(inputs).cpu(), rtol=0, atol=0)


def _train_step(model, optimizer, inputs):
    optimizer.zero_grad()
    model(inputs).pow(2).mean().backward()
    optimizer.step()


def test_optimizer_state_round_trip_resumes_training_exactly():
    inputs = torch.randn(6, 5, device="vdev")
    torch.manual_seed(1)
    reference = torch.nn.Linear(5, 3).to("vdev")
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=0.1)
    for _ in range(2):
        _train_step(reference, reference_optimizer, inputs)

    torch.manual_seed(1)
    model = torch.nn.Linear(5, 3).to("vdev")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    _train_step(model, optimizer, inputs)
    saved = _round_trip({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    resumed = torch.nn.Linear(5, 3).to("vdev")
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.1)
    resumed.load_state_dict(saved["model"])
    resumed_optimizer.load_state_dict(saved["optimizer"])
    assert resumed_optimizer.state_dict()["state"][0]["exp_avg"].device.type == "vdev"
    _train_step(resumed, resumed_optimizer, inputs)
    for got, expected in zip(resumed.parameters(), reference.parameters()):
        assert_close(got.detach().cpu(), expected.detach().cpu(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "map_location, expected",
    [
        ("cpu", torch.device("cpu")),
        ("vdev:1", torch.device("vdev", 1)),
        (torch.device("vdev", 0), torch.device("vdev", 0)),
        ({"vdev:1": "vdev:0"}, torch.device("vdev", 0)),
        ({"vdev:1": "cpu"}, torch.device("cpu")),
        (lambda storage, location: storage, torch.device("cpu")),
        (lambda storage, location: storage.vdev(0), torch.device("vdev", 0)),
    ],
    ids=["cpu", "vdev1", "device", "dict", "dict_cpu", "callable_cpu", "callable_vdev"],
)
def test_map_location(map_location, expected):
    source = torch.randn(3, 4)
    loaded = _round_trip(source.to("vdev:1"), map_location=map_location)
    assert loaded.device == expected
    assert_close(loaded.cpu(), source, rtol=0, atol=0)


def test_cpu_checkpoint_loads_onto_vdev():
    source = {"weight": torch.randn(2, 2), "step": 3}
    loaded = _round_trip(source, map_location="vdev:1")
    assert loaded["weight"].device == torch.device("vdev", 1) and loaded["step"] == 3
    assert_close(loaded["weight"].cpu(), source["weight"], rtol=0, atol=0)


def test_loading_onto_a_missing_device_is_a_clear_error():
    buffer = io.BytesIO()
    torch.save(torch.ones(2, device="vdev"), buffer)
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="deserialize object on VDEV device 5 but torch.vdev.device_count\\(\\) is 2"):
        torch.load(buffer, map_location="vdev:5")


def test_checkpoint_from_a_device_this_process_lacks(run_in_subprocess, tmp_path):
    path = tmp_path / "on_device_1.pt"
    torch.save(torch.arange(3.0, device="vdev:1"), path)
    script = f"""
import torch, torch_vdev
try:
    torch.load({str(path)!r})
except RuntimeError as error:
    print(error)
print(torch.load({str(path)!r}, map_location='vdev:0').tolist())
"""
    result = run_in_subprocess(script, env={"VDEV_DEVICE_COUNT": "1"})
    assert result.returncode == 0, result.stderr
    assert "deserialize object on VDEV device 1 but torch.vdev.device_count() is 1" in result.stdout
    assert "map_location" in result.stdout
    assert result.stdout.strip().endswith("[0.0, 1.0, 2.0]")


# --- BackendMeta -------------------------------------------------------------


def test_backend_meta_survives_a_round_trip():
    tensor = torch.randn(4, device="vdev:1")
    assert torch.vdev.backend_meta(tensor) == {}
    torch.vdev.set_backend_meta(tensor, {"channels_packed": True, "calibrated": False})
    loaded = _round_trip(tensor)
    assert torch.vdev.backend_meta(loaded) == {"channels_packed": True, "calibrated": False}
    assert_close(loaded.cpu(), tensor.cpu(), rtol=0, atol=0)
    moved = _round_trip(tensor, map_location="vdev:0")
    assert moved.device.index == 0
    assert torch.vdev.backend_meta(moved) == {"channels_packed": True, "calibrated": False}
    assert torch.vdev.backend_meta(_round_trip(torch.ones(2, device="vdev"))) == {}


def test_backend_meta_of_module_parameters_survives_state_dict():
    model = torch.nn.Linear(3, 3).to("vdev")
    torch.vdev.set_backend_meta(model.weight, {"packed": True})
    state = _round_trip(model.state_dict())
    assert torch.vdev.backend_meta(state["weight"]) == {"packed": True}
    assert torch.vdev.backend_meta(state["bias"]) == {}


def test_backend_meta_follows_detach_and_is_replaced_not_shared():
    tensor = torch.randn(3, device="vdev")
    torch.vdev.set_backend_meta(tensor, {"a": True})
    detached = tensor.detach()
    assert torch.vdev.backend_meta(detached) == {"a": True}
    torch.vdev.set_backend_meta(detached, {"b": True})
    assert torch.vdev.backend_meta(tensor) == {"a": True}
    torch.vdev.set_backend_meta(tensor, {})
    assert torch.vdev.backend_meta(tensor) == {}


def test_backend_meta_is_kept_apart_from_torch_metadata():
    tensor = torch.randn(3, dtype=torch.complex64, device="vdev").conj()
    torch.vdev.set_backend_meta(tensor, {"neg": True})  # same name as a torch metadata key
    loaded = _round_trip(tensor)
    assert loaded.is_conj() and not loaded.is_neg()
    assert torch.vdev.backend_meta(loaded) == {"neg": True}
    assert_close(loaded.resolve_conj().cpu(), tensor.resolve_conj().cpu(), rtol=0, atol=0)


def test_backend_meta_bad_input():
    with pytest.raises(RuntimeError, match="Backend metadata belongs to vdev tensors, got a tensor on cpu"):
        torch.vdev.set_backend_meta(torch.ones(2), {"a": True})
    with pytest.raises(TypeError, match="dict of str to bool"):
        torch.vdev.set_backend_meta(torch.ones(2, device="vdev"), {"a": 1})
    with pytest.raises(RuntimeError, match="got a tensor on cpu"):
        torch.vdev.backend_meta(torch.ones(2))
