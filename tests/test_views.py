"""Views share device memory, keep the vdev TensorImpl, and show in-place writes."""

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl

VIEWS = {
    "view": lambda t: t.view(24),
    "view_dtype": lambda t: t.view(torch.int32),
    "reshape": lambda t: t.reshape(3, 8),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.permute(1, 0),
    "squeeze": lambda t: t[None].squeeze(0),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "expand": lambda t: t[:1].expand(5, 6),
    "select": lambda t: t[2],
    "slice": lambda t: t[1:3, ::2],
    "narrow": lambda t: t.narrow(1, 2, 3),
    "diagonal": lambda t: t.diagonal(),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "split": lambda t: t.split(2)[1],
    "chunk": lambda t: t.chunk(3, dim=1)[2],
    "unbind": lambda t: t.unbind(1)[3],
    "alias": lambda t: torch.ops.aten.alias(t),
    "detach": lambda t: t.detach(),
    "as_strided": lambda t: t.as_strided((2, 2), (1, 6), 1),
    "movedim": lambda t: t.movedim(0, 1),
    "unflatten": lambda t: t.unflatten(1, (2, 3)),
    "flatten": lambda t: t.flatten(),
    "neg_view": lambda t: torch._neg_view(t),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_matches_cpu_and_shares_memory(name):
    base_cpu = torch.randn(4, 6)
    base = base_cpu.to("vdev")
    view = VIEWS[name](base)
    cpu_view = VIEWS[name](base_cpu)
    assert is_vdev_impl(view), f"{name} lost the vdev TensorImpl"
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert (view._base is base) == (cpu_view._base is base_cpu)
    assert_close(view.cpu(), cpu_view, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["real", "imag", "view_as_real", "conj"])
def test_complex_views(name):
    base_cpu = torch.randn(3, 4, dtype=torch.complex64)
    base = base_cpu.to("vdev")
    view_fn = {
        "real": lambda t: t.real,
        "imag": lambda t: t.imag,
        "view_as_real": torch.view_as_real,
        "conj": torch.conj,
    }[name]
    view = view_fn(base)
    assert is_vdev_impl(view)
    assert_close(view.cpu(), view_fn(base_cpu).resolve_conj())


def test_in_place_write_through_view_shows_in_base():
    base = torch.zeros(4, 4, device="vdev")
    base[1:3, 1:3].fill_(5.0)
    base.t()[0].add_(1.0)
    base.diagonal().mul_(2.0)
    expected = torch.zeros(4, 4)
    expected[1:3, 1:3] = 5.0
    expected.t()[0] += 1.0
    expected.diagonal().mul_(2.0)
    assert_close(base.cpu(), expected)


def test_version_counter_is_shared_with_views():
    base = torch.zeros(3, device="vdev")
    view = base[1:]
    before = base._version
    view.add_(1)
    assert base._version == view._version == before + 1


def versions_of_op_results(device, inference_mode):
    """Results of native, fallback and view ops, in-place writes through some of them,
    then every tensor's version (None for inference tensors) and values."""
    with torch.inference_mode(inference_mode):
        base = torch.arange(12.0).reshape(3, 4).to(device)
        fresh = base + 1  # native kernel
        other = torch.logaddexp(base, fresh)  # fallback
        values, indices = torch.cummax(base, 1)  # fallback, two results
        windows = fresh.unfold(1, 2, 2)  # fallback view
        left, right = other.split(2, 1)
        fresh.add_(1)
        windows.mul_(2)
        values.add_(1)
        left.zero_()
        torch.logaddexp(base, base, out=other)
        tensors = [base, fresh, other, values, indices, windows, left, right]
        return [None if t.is_inference() else t._version for t in tensors], [t.cpu() for t in tensors]


@pytest.mark.parametrize("inference_mode", [False, True], ids=["normal", "inference_mode"])
def test_op_results_count_versions_as_on_cpu(inference_mode):
    torch_vdev.reset_fallback_stats()
    versions, values = versions_of_op_results("vdev", inference_mode)
    assert {"aten::logaddexp", "aten::_cummax_helper", "aten::unfold"} <= set(torch_vdev.fallback_stats())
    cpu_versions, cpu_values = versions_of_op_results("cpu", inference_mode)
    assert versions == cpu_versions
    assert_close(values, cpu_values)


def test_view_of_incompatible_strides_errors():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.randn(4, 6, device="vdev").t().view(24)


def test_as_strided_out_of_bounds_errors():
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.randn(4, device="vdev").as_strided((10,), (1,))


def test_resize_keeps_data_and_grows():
    tensor = torch.arange(4.0, device="vdev")
    tensor.resize_(2, 4)
    assert tensor.shape == (2, 4)
    assert_close(tensor.flatten()[:4].cpu(), torch.arange(4.0))
    tensor.resize_(1)
    assert_close(tensor.cpu(), torch.tensor([0.0]))


def test_set_storage_and_tensor():
    source = torch.arange(6.0, device="vdev")
    target = torch.empty(0, device="vdev")
    target.set_(source.untyped_storage(), 2, (2, 2), (2, 1))
    assert_close(target.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
    other = torch.empty(0, device="vdev")
    other.set_(source)
    assert other.data_ptr() == source.data_ptr()
    other.set_()
    assert other.numel() == 0
    with pytest.raises(RuntimeError):
        torch.empty(0, device="vdev:1").set_(source.untyped_storage())


def test_detach_shallow_copy_keeps_type():
    parameter = torch.nn.Parameter(torch.randn(3, device="vdev"))
    assert is_vdev_impl(parameter) and is_vdev_impl(parameter.detach())
    parameter.data = torch.ones(3, device="vdev")
    assert is_vdev_impl(parameter)
    assert_close(parameter.detach().cpu(), torch.ones(3))
