"""Ops without a vdev kernel run through the zero-copy CPU fallback."""

import warnings

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl


def test_fallback_result_is_a_device_tensor_counted_in_stats():
    source_cpu = torch.randn(100)
    source = source_cpu.to("vdev:1")
    before = torch.vdev.memory_allocated(1)
    result = torch.special.i0e(source)
    assert result.device == torch.device("vdev:1") and is_vdev_impl(result)
    assert torch.vdev.memory_allocated(1) >= before + result.nbytes
    assert_close(result.cpu(), torch.special.i0e(source_cpu))


def test_in_place_returns_the_same_tensor_and_bumps_version():
    tensor = torch.randn(5, device="vdev")
    expected = tensor.cpu().cumsum(0)
    version = tensor._version
    result = tensor.cumsum_(0)
    assert result is tensor
    assert tensor._version > version
    assert_close(tensor.cpu(), expected)


def test_structured_ops_run_their_own_cpu_kernel_through_the_fallback():
    # Not PyTorch's composite (meta function, empty, then the out= variant).
    first, second = torch.randn(6), torch.randn(6)
    device_first = first.to("vdev")
    torch_vdev.reset_fallback_stats()
    result = torch.logaddexp(device_first, second.to("vdev"))
    in_place = device_first.clone()
    assert in_place.heaviside_(second.to("vdev")) is in_place
    assert torch_vdev.fallback_stats() == {"aten::logaddexp": 1, "aten::heaviside_": 1}
    assert is_vdev_impl(result)
    assert_close(result.cpu(), torch.logaddexp(first, second))
    assert_close(in_place.cpu(), torch.heaviside(first, second))


def test_out_argument_is_written_and_resized():
    source_cpu = torch.randn(3, 4)
    out = torch.empty(0, device="vdev")
    result = torch.logaddexp(source_cpu.to("vdev"), source_cpu.to("vdev"), out=out)
    assert result is out
    assert out.shape == (3, 4) and is_vdev_impl(out)
    assert_close(out.cpu(), torch.logaddexp(source_cpu, source_cpu))
    assert torch.vdev.memory_allocated() >= out.nbytes


def test_view_ops_through_fallback_alias_input():
    base = torch.arange(12.0, device="vdev")
    # unfold_copy is not a view; unfold through the fallback returns a real view
    view = torch.ops.aten.unfold(base, 0, 3, 3)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    view.mul_(-1)
    assert base[0].item() == -0.0 and base[11].item() == -11.0


def test_multiple_outputs_and_lists():
    source_cpu = torch.randn(4, 5)
    values, indices = torch.cummax(source_cpu.to("vdev"), dim=1)
    expected = torch.cummax(source_cpu, dim=1)
    assert_close(values.cpu(), expected.values)
    assert_close(indices.cpu(), expected.indices)
    pieces = torch.tensor_split(source_cpu.to("vdev"), 3, dim=1)
    for piece, expected_piece in zip(pieces, torch.tensor_split(source_cpu, 3, dim=1)):
        assert piece.device.type == "vdev"
        assert_close(piece.cpu(), expected_piece)


def test_device_argument_becomes_cpu_for_the_kernel():
    tensor = torch.randint(0, 10, (5,), device="vdev:1")
    assert tensor.device == torch.device("vdev:1")
    assert 0 <= tensor.min().item() and tensor.max().item() < 10


def test_seeded_random_matches_cpu():
    torch.manual_seed(123)
    cpu_draws = [torch.randn(50), torch.rand(7), torch.randint(0, 100, (9,))]
    torch.manual_seed(123)
    device_draws = [torch.randn(50, device="vdev"), torch.rand(7, device="vdev"), torch.randint(0, 100, (9,), device="vdev")]
    for device_draw, cpu_draw in zip(device_draws, cpu_draws):
        assert_close(device_draw.cpu(), cpu_draw, rtol=0, atol=0)


def test_vdev_generator_argument():
    generator = torch.Generator("vdev")
    generator.manual_seed(7)
    first = torch.randn(4, device="vdev", generator=generator)
    generator.manual_seed(7)
    second = torch.randn(4, device="vdev", generator=generator)
    assert_close(first, second, rtol=0, atol=0)
    cpu_generator = torch.Generator().manual_seed(7)
    assert_close(first.cpu(), torch.randn(4, generator=cpu_generator), rtol=0, atol=0)


def test_zero_dim_cpu_tensor_mixes_with_device_tensor():
    tensor = torch.ones(3, device="vdev")
    result = tensor * torch.tensor(2.5)
    assert result.device.type == "vdev"
    assert_close(result.cpu(), torch.full((3,), 2.5))


@pytest.mark.parametrize(
    "mix",
    [
        lambda a, b: torch.logaddexp(a, b),
        lambda a, b: torch.atan2(a, b),
    ],
)
def test_mixing_devices_is_rejected(mix):
    on_zero = torch.ones(3, device="vdev:0")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        mix(on_zero, torch.ones(3, device="vdev:1"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        mix(on_zero, torch.ones(3))


@pytest.mark.parametrize(
    "write_into",
    [
        lambda x, cpu: torch.nonzero(x, out=cpu.long()),  # native kernel
        lambda x, cpu: torch.logaddexp(x, x, out=cpu),  # boxed fallback
        # A 0-dim device operand: with another shape TensorIterator raises its shape error first, as on CUDA.
        lambda x, cpu: cpu.add_(x[0]),
    ],
)
def test_zero_dim_cpu_tensors_are_not_written(write_into):
    # A 0-dim CPU tensor passes for a scalar argument, but an op writes device tensors only.
    cpu = torch.tensor(0.0)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*vdev:0 and cpu"):
        write_into(torch.ones(3, device="vdev"), cpu)
    assert cpu.shape == () and cpu.item() == 0.0


def test_in_place_kernels_see_self_and_out_as_one_tensor():
    # addr_ is addr(self, ..., out=self); the CPU kernel tells it by identity and then
    # refuses a self it would have to broadcast.
    for device in ("cpu", "vdev"):
        with pytest.raises(RuntimeError, match="2D tensor expected, got 0D tensor"):
            torch.tensor(1.0, device=device).addr_(torch.ones(5, device=device), torch.ones(10, device=device))


def test_results_left_lazily_conjugated_stay_so():
    torch.manual_seed(0)
    lu, pivots = torch.linalg.lu_factor(torch.randn(3, 3, dtype=torch.complex64))
    rhs = torch.randn(4, 3, dtype=torch.complex64)
    expected = torch.linalg.lu_solve(lu, pivots, rhs, left=False)
    actual = torch.linalg.lu_solve(lu.to("vdev"), pivots.to("vdev"), rhs.to("vdev"), left=False)
    assert actual.is_conj() == expected.is_conj()
    assert_close(actual.cpu(), expected)


def test_cpu_kernels_are_preferred_to_generic_composites():
    # native_group_norm's generic (composite) version rejects channels-last input.
    group_norm = torch.nn.GroupNorm(2, 4)
    x = torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)
    on_vdev = torch.nn.GroupNorm(2, 4).vdev()
    on_vdev.load_state_dict(group_norm.state_dict())
    torch_vdev.reset_fallback_stats()
    assert_close(on_vdev(x.vdev()).cpu(), group_norm(x))
    assert torch_vdev.fallback_stats() == {"aten::native_group_norm": 1}


def test_cpu_kernel_errors_pass_through_and_process_stays_usable():
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.logaddexp(torch.ones(3, device="vdev"), torch.ones(4, device="vdev"))
    with pytest.raises(IndexError):
        torch.ones(3, device="vdev")[5]
    assert torch.ones(3, device="vdev").sum().item() == 3.0


def test_index_with_cpu_indices_is_allowed():
    tensor = torch.arange(10.0, device="vdev")
    assert_close(tensor[torch.tensor([1, 3])].cpu(), torch.tensor([1.0, 3.0]))


@pytest.mark.parametrize("loss", [torch.nn.functional.mse_loss, torch.nn.functional.smooth_l1_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_cpu_without_warnings(loss, reduction):
    # Through their composite path these ops would warn about resizing a reduced output.
    inputs, targets = torch.randn(16, 3, requires_grad=True), torch.randn(16, 3)
    device_inputs = inputs.detach().vdev().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = loss(device_inputs, targets.vdev(), reduction=reduction)
        result.sum().backward()
    expected = loss(inputs, targets, reduction=reduction)
    expected.sum().backward()
    assert result.device.type == "vdev"
    assert_close(result.cpu(), expected)
    assert_close(device_inputs.grad.cpu(), inputs.grad)
