"""Writes whose input and output overlap in memory are refused as on CPU and CUDA.

ATen's kernels check overlap by comparing storages, and each vdev argument reaches a
CPU kernel as a CPU alias: aliases of tensors that share device memory must share one
storage, or the checks pass and the kernel corrupts its input. Every case runs on a CPU
tensor and on a vdev tensor from the same data; vdev must raise the CPU's error and
leave the data as the CPU's run left it (untouched where the CPU refused).
"""

import pytest
import torch

# Each case takes a 1-d float tensor of 10 elements (arange) and writes through
# overlapping views of it. Index and mask arguments are made on the tensor's device.
CASES = {
    # copies
    "copy_shifted": lambda x: x[1:].copy_(x[:-1]),
    "copy_same_view": lambda x: x[:5].copy_(x[:5]),
    "copy_expanded_destination": lambda x: x[:1].expand(5).copy_(x[5:]),
    "copy_strided_interleaved": lambda x: x[::2].copy_(x[1::2]),
    "copy_from_other_dtype": lambda x: x[1:].copy_(x[:-1].to(torch.float64)),
    "foreach_copy": lambda x: torch._foreach_copy_([x[1:]], [x[:-1]]),
    # binary, unary and ternary in-place and out= ops
    "add_": lambda x: x[:3].add_(x[1:4]),
    "mul_": lambda x: x[1:4].mul_(x[:3]),
    "add_out": lambda x: torch.add(x[:3], x[5:8], out=x[1:4]),
    "neg_out": lambda x: torch.neg(x[:-1], out=x[1:]),
    "exp_out": lambda x: torch.exp(x[1:], out=x[:-1]),
    "addcmul_": lambda x: x[:3].addcmul_(x[1:4], x[5:8]),
    "lerp_": lambda x: x[:3].lerp_(x[1:4], 0.5),
    "where_out": lambda x: torch.where(x[:3] > 1, x[1:4], x[5:8], out=x[2:5]),
    "internal_overlap_add_": lambda x: x[:1].expand(5).add_(1),
    "internal_overlap_neg_out": lambda x: torch.neg(x[:5], out=x[:1].expand(5)),
    "clamp_out": lambda x: torch.clamp(x[1:], 0, 5, out=x[:-1]),
    "bitwise_shift_": lambda x: x.to(torch.int64)[:3].__ilshift__(x.to(torch.int64)[:3]),
    "shift_overlap": lambda x: x[:3].__ilshift__(x[1:4]),
    # indexing ops
    "index_add_": lambda x: x[:4].index_add_(0, torch.tensor([0, 1], device=x.device), x[1:3]),
    "index_copy_": lambda x: x[:4].index_copy_(0, torch.tensor([0, 1], device=x.device), x[1:3]),
    "index_fill_index_overlap": lambda x: (
        lambda i: i.index_fill_(0, i[:2], 0)
    )(torch.arange(10, device=x.device)),
    "index_put_": lambda x: x[:4].index_put_((torch.tensor([0, 1], device=x.device),), x[1:3]),
    "index_put_accumulate": lambda x: x[:4].index_put_(
        (torch.tensor([0, 1], device=x.device),), x[1:3], accumulate=True
    ),
    "masked_fill_mask_overlap": lambda x: (
        lambda m: m[:3].masked_fill_(m[1:4], True)
    )(torch.ones(10, dtype=torch.bool, device=x.device)),
    "masked_scatter_": lambda x: x[:4].masked_scatter_(
        torch.ones(4, dtype=torch.bool, device=x.device), x[1:5]
    ),
    "put_": lambda x: x[:4].put_(torch.tensor([0, 1], device=x.device), x[1:3]),
    "put_index_overlap": lambda x: (
        lambda i: i[:3].put_(i[1:4], i[5:8])
    )(torch.arange(10, device=x.device)),
    "scatter_": lambda x: x[:4].scatter_(0, torch.tensor([0, 1], device=x.device), x[1:3]),
    "scatter_add_": lambda x: x[:4].scatter_add_(0, torch.tensor([0, 1], device=x.device), x[1:3]),
    "gather_out": lambda x: torch.gather(x[1:5], 0, torch.tensor([0, 1, 2], device=x.device), out=x[:3]),
    "index_select_out": lambda x: torch.index_select(
        x[1:5], 0, torch.tensor([0, 1, 2], device=x.device), out=x[:3]
    ),
    "take_out": lambda x: torch.take(x[1:5], torch.tensor([0, 1, 2], device=x.device), out=x[:3]),
    "masked_select_out": lambda x: torch.masked_select(
        x[1:5], torch.ones(4, dtype=torch.bool, device=x.device), out=x[:4]
    ),
    "bernoulli_out": lambda x: torch.bernoulli(x[1:5].clamp(0, 1), out=x[:4]),
    "cat_out": lambda x: torch.cat([x[:2], x[2:4]], out=x[1:5]),
    # writes that do not overlap must keep working
    "copy_disjoint": lambda x: x[5:].copy_(x[:5]),
    "add_disjoint": lambda x: x[:3].add_(x[5:8]),
    "add_self": lambda x: x.add_(x),
    "add_out_exactly_self": lambda x: torch.add(x, x, out=x),
    "copy_self": lambda x: x.copy_(x),
    "index_add_disjoint": lambda x: x[:4].index_add_(0, torch.tensor([0, 1], device=x.device), x[6:8]),
}


def outcome(case, device):
    data = torch.arange(10.0, device=device)
    try:
        CASES[case](data)
    except RuntimeError as error:
        return data.cpu(), str(error).split("\n")[0]
    return data.cpu(), None


@pytest.mark.parametrize("case", sorted(CASES))
def test_overlapping_write_behaves_as_on_cpu(case):
    cpu_data, cpu_error = outcome(case, "cpu")
    vdev_data, vdev_error = outcome(case, "vdev")
    assert vdev_error == cpu_error
    torch.testing.assert_close(vdev_data, cpu_data, equal_nan=True)


def test_cases_cover_refused_and_accepted_writes():
    """The table must exercise both outcomes on the reference device."""
    errors = {case: outcome(case, "cpu")[1] for case in CASES}
    refused = [case for case, error in errors.items() if error is not None]
    assert len(refused) >= 25
    assert all("memory location" in errors[case] for case in refused)
    assert {"copy_disjoint", "add_self", "copy_self"}.isdisjoint(refused)


def test_shifted_copy_from_the_issue():
    x = torch.arange(10.0, device="vdev")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        x[1:].copy_(x[:-1])
    assert x.tolist() == list(map(float, range(10)))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        x[:3].add_(x[1:4])
    assert x.tolist() == list(map(float, range(10)))


def test_overlap_detected_across_distinct_views_and_base():
    """Different TensorImpls (base, views, detached copies) over one storage."""
    base = torch.arange(10.0, device="vdev")
    with pytest.raises(RuntimeError, match="memory location"):
        base.detach()[1:].copy_(base[:-1])
    with pytest.raises(RuntimeError, match="memory location"):
        torch.neg(base[:-1], out=base.view(2, 5).flatten()[1:])
    torch.testing.assert_close(base.cpu(), torch.arange(10.0))


def test_cross_device_copies_between_overlapping_memory_still_copy():
    """A copy between vdev and CPU never overlaps; the same view copied to itself is a no-op."""
    x = torch.arange(10.0, device="vdev")
    host = torch.zeros(10)
    host.copy_(x)
    x[:5].copy_(x[:5])
    torch.testing.assert_close(host, torch.arange(10.0))
    torch.testing.assert_close(x.cpu(), torch.arange(10.0))
