"""Where ATen's CPU kernels and CUDA's disagree on what they accept or compute, vdev (which
runs the CPU kernels) behaves as CUDA does. Each test checks the refusal CUDA's kernel
makes, and that what both accept gives the CPU result."""

import pytest
import torch
from torch.testing import assert_close

DEVICE = "vdev"


def test_addcmul_refuses_a_cpu_scalar_as_self_or_tensor1_as_cuda_does():
    self, tensor1, tensor2 = (torch.rand(2, 2) for _ in range(3))
    scalar = torch.rand([])
    on_device = [t.to(DEVICE) for t in (self, tensor1, tensor2)]
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        torch.addcmul(on_device[0], scalar, on_device[2], value=0.5)
    with pytest.raises(RuntimeError, match="CPU Scalar support for self argument"):
        torch.addcmul(scalar, on_device[1], on_device[2], value=0.5)
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        on_device[0].clone().addcmul_(scalar, on_device[2])
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        torch.addcmul(on_device[0], scalar, on_device[2], out=torch.empty(2, 2, device=DEVICE))
    # CUDA reads a CPU scalar as tensor2.
    assert_close(torch.addcmul(on_device[0], on_device[1], scalar, value=0.5).cpu(),
                 torch.addcmul(self, tensor1, scalar, value=0.5))


@pytest.mark.parametrize("call", [
    lambda x, i, s: x.scatter_(0, i, s, reduce="multiply"),
    lambda x, i, s: x.scatter_(0, i, 2.0, reduce="multiply"),
    lambda x, i, s: x.scatter(0, i, s, reduce="multiply"),
    lambda x, i, s: torch.scatter(x, 0, i, s, reduce="multiply", out=torch.empty_like(x)),
    lambda x, i, s: x.scatter_reduce(0, i, s, "prod"),
    lambda x, i, s: x.scatter_reduce_(0, i, s, "mean"),
    lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "prod", out=torch.empty_like(x)),
], ids=["scatter_multiply_", "scatter_value_multiply_", "scatter_multiply", "scatter_multiply_out",
        "scatter_reduce_prod", "scatter_reduce_mean_", "scatter_reduce_prod_out"])
def test_complex_scatter_reductions_other_than_sum_raise_as_on_cuda(call):
    index = torch.tensor([[0, 1], [0, 0]], device=DEVICE)
    source = torch.randn(2, 2, dtype=torch.complex64, device=DEVICE)
    target = torch.randn(2, 2, dtype=torch.complex64, device=DEVICE)
    before = target.clone()
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexFloat'"):
        call(target, index, source)
    assert torch.equal(target.cpu(), before.cpu())
    # The same reduction of real tensors is CPU's.
    real_target, real_source = target.real.contiguous(), source.real.contiguous()
    expected = call(real_target.cpu().clone(), index.cpu(), real_source.cpu())
    assert_close(call(real_target.clone(), index, real_source).cpu(), expected)


@pytest.mark.parametrize("call", [
    lambda x, i, s: x.scatter_(0, i, s, reduce="add"),
    lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
    lambda x, i, s: x.scatter_add(0, i, s),
], ids=["scatter_add_", "scatter_reduce_sum", "scatter_add"])
def test_complex_scatter_sums_match_cpu(call):
    index = torch.tensor([[0, 1], [0, 0]])
    source = torch.randn(2, 2, dtype=torch.complex64)
    target = torch.randn(2, 2, dtype=torch.complex64)
    result = call(target.to(DEVICE), index.to(DEVICE), source.to(DEVICE))
    assert_close(result.cpu(), call(target.clone(), index, source))
