"""Extending torch.autograd on vdev: custom autograd.Functions (the "Extending PyTorch"
docs' examples and every ctx feature) and forward-mode AD, against CPU and gradcheck."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.autograd import Function, gradcheck, gradgradcheck
from torch.autograd.function import once_differentiable
from torch.testing import assert_close

DEVICES = ("cpu", "vdev")


def double_randn(*sizes):
    return torch.randn(*sizes, dtype=torch.float64)


def leaves(device, *sources):
    return [source.detach().to(device, copy=True).requires_grad_() for source in sources]


def assert_vdev_equals_cpu(device_tensor, cpu_tensor):
    assert device_tensor.device.type == "vdev"
    assert_close(device_tensor.cpu(), cpu_tensor)


# The docs' examples, as written there.
class LinearFunction(Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias


class MulConstant(Function):
    @staticmethod
    def forward(ctx, tensor, constant):
        ctx.constant = constant
        return tensor * constant

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.constant, None


class MulConstantUnmaterialized(Function):
    """The docs' set_materialize_grads(False) variant; records what backward received."""

    received = []

    @staticmethod
    def forward(ctx, tensor, constant):
        ctx.set_materialize_grads(False)
        ctx.constant = constant
        return tensor * constant

    @staticmethod
    def backward(ctx, grad_output):
        MulConstantUnmaterialized.received.append(grad_output)
        if grad_output is None:
            return None, None
        return grad_output * ctx.constant, None


def test_docs_linear_function_matches_cpu_and_passes_gradcheck():
    sources = (double_randn(20, 20), double_randn(30, 20), double_randn(30))
    grads = {}
    for device in DEVICES:
        inputs = leaves(device, *sources)
        LinearFunction.apply(*inputs).pow(2).sum().backward()
        grads[device] = [tensor.grad for tensor in inputs]
    for device_grad, cpu_grad in zip(grads["vdev"], grads["cpu"]):
        assert_vdev_equals_cpu(device_grad, cpu_grad)
    # The docs' check, then smaller inputs with the optional bias, through backward twice.
    assert gradcheck(LinearFunction.apply, tuple(leaves("vdev", *sources[:2])), eps=1e-6, atol=1e-4)
    small = tuple(leaves("vdev", double_randn(4, 5), double_randn(3, 5), double_randn(3)))
    assert gradcheck(LinearFunction.apply, small)
    assert gradgradcheck(LinearFunction.apply, small)


def test_docs_mul_constant_variants_pass_gradcheck():
    (tensor,) = leaves("vdev", double_randn(4, 5))
    assert gradcheck(lambda t: MulConstant.apply(t, 2.5), (tensor,))
    assert gradgradcheck(lambda t: MulConstant.apply(t, 2.5), (tensor,))
    assert gradcheck(lambda t: MulConstantUnmaterialized.apply(t, -1.5), (tensor,))


def test_needs_input_grad_leaves_unneeded_gradients_undefined():
    input = double_randn(3, 4).to("vdev").requires_grad_()
    weight = double_randn(2, 4).to("vdev")
    LinearFunction.apply(input, weight).sum().backward()
    assert weight.grad is None
    assert_vdev_equals_cpu(input.grad, weight.cpu().sum(0).expand(3, 4))


class BlockGradient(Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        return None


class SplitHalves(Function):
    """Two outputs: with grads not materialised, an unused output's grad is None."""

    received = []

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        first, second = x.chunk(2)
        ctx.half_size = first.shape
        return first.clone(), second.clone()

    @staticmethod
    def backward(ctx, grad_first, grad_second):
        SplitHalves.received.append((grad_first, grad_second))
        zeros = lambda: torch.zeros(ctx.half_size, dtype=torch.float64, device=grad_first.device)
        return torch.cat([grad_first if grad_first is not None else zeros(),
                          grad_second if grad_second is not None else zeros()])


@pytest.mark.parametrize("device", DEVICES)
def test_set_materialize_grads_false_passes_none_for_missing_gradients(device):
    MulConstantUnmaterialized.received.clear()
    (x,) = leaves(device, double_randn(4))
    BlockGradient.apply(MulConstantUnmaterialized.apply(x, 3.0)).sum().backward()
    assert MulConstantUnmaterialized.received == [None]
    assert x.grad is None

    SplitHalves.received.clear()
    first, _ = SplitHalves.apply(x)
    (x_grad,) = torch.autograd.grad(first.sum() * 2, x)
    ((grad_first, grad_second),) = SplitHalves.received
    assert grad_second is None and grad_first.device.type == device
    assert x_grad.device.type == device
    assert_close(x_grad.cpu(), torch.tensor([2.0, 2.0, 0.0, 0.0], dtype=torch.float64))


class ScaleInPlace(Function):
    """mark_dirty: the forward modifies its input in place and returns it."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.mark_dirty(x)
        ctx.factor = factor
        return x.mul_(factor)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor, None

    @staticmethod
    def jvp(ctx, x_tangent, _):
        # The tangent of an input modified in place is updated in place too.
        return x_tangent.mul_(ctx.factor)


def test_mark_dirty_in_place_forward_matches_cpu():
    source = double_randn(5)
    results = {}
    for device in DEVICES:
        (leaf,) = leaves(device, source)
        work = leaf * 1.0
        version = work._version
        output = ScaleInPlace.apply(work, 3.0)
        assert output is work and work._version > version
        assert type(work.grad_fn).__name__ == "ScaleInPlaceBackward"
        (output * leaf).sum().backward()
        results[device] = (output.detach(), leaf.grad)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert_vdev_equals_cpu(device_result, cpu_result)
    (leaf,) = leaves("vdev", source)
    assert gradcheck(lambda x: ScaleInPlace.apply(x.clone(), -2.0), (leaf,), check_forward_ad=True)


def test_mark_dirty_on_a_leaf_that_requires_grad_is_rejected():
    source = double_randn(3)
    after_error = {}
    for device in DEVICES:
        (leaf,) = leaves(device, source)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            ScaleInPlace.apply(leaf, 2.0)
        # The error comes after the forward ran; the leaf stays usable.
        after_error[device] = (leaf * 1.0).detach()
    assert_vdev_equals_cpu(after_error["vdev"], after_error["cpu"])


class SortWithIndices(Function):
    """mark_non_differentiable: the integer indices and a float mask get no gradient."""

    @staticmethod
    def forward(ctx, x):
        values, indices = x.sort()
        positive = (values > 0).to(x.dtype)
        ctx.mark_non_differentiable(indices, positive)
        ctx.save_for_backward(indices)
        return values, indices, positive

    @staticmethod
    def backward(ctx, grad_values, grad_indices, grad_positive):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(grad_values).index_add_(0, indices, grad_values)


def test_mark_non_differentiable_matches_cpu():
    source = double_randn(6)
    results = {}
    for device in DEVICES:
        (x,) = leaves(device, source)
        values, indices, positive = SortWithIndices.apply(x)
        assert values.requires_grad
        assert not indices.requires_grad and not positive.requires_grad
        (values * torch.arange(6.0, dtype=torch.float64, device=device)).sum().backward()
        results[device] = (values.detach(), indices, positive, x.grad)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert_vdev_equals_cpu(device_result, cpu_result)
    (x,) = leaves("vdev", source)
    assert gradcheck(lambda t: SortWithIndices.apply(t)[0], (x,))


class CubeOnce(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad_output


@pytest.mark.parametrize("device", DEVICES)
def test_once_differentiable_allows_backward_and_rejects_double_backward(device):
    (x,) = leaves(device, double_randn(4))
    assert gradcheck(CubeOnce.apply, (x,))
    (grad,) = torch.autograd.grad(CubeOnce.apply(x).pow(2).sum(), x, create_graph=True)
    assert_close(grad.detach().cpu(), (6 * x.detach() ** 5).cpu())
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        grad.sum().backward()


class Cube(Function):
    """A differentiable backward (double backward works) and a jvp (forward AD)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad_output

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        return 3 * x * x * x_tangent


def test_double_backward_through_a_differentiable_backward_matches_cpu():
    source = double_randn(5)
    results = {}
    for device in DEVICES:
        (x,) = leaves(device, source)
        (first,) = torch.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(first.sum(), x)
        results[device] = (first.detach(), second)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert_vdev_equals_cpu(device_result, cpu_result)
    assert_close(results["cpu"][1], 6 * source)
    (x,) = leaves("vdev", source)
    assert gradgradcheck(Cube.apply, (x,))


def test_custom_jvp_gives_forward_mode_tangents_matching_cpu():
    primal, tangent = double_randn(5), double_randn(5)
    tangents = {}
    for device in DEVICES:
        with fwAD.dual_level():
            dual = fwAD.make_dual(primal.to(device), tangent.to(device))
            tangents[device] = fwAD.unpack_dual(Cube.apply(dual).sin()).tangent
    assert_vdev_equals_cpu(tangents["vdev"], tangents["cpu"])
    (x,) = leaves("vdev", primal)
    assert gradcheck(Cube.apply, (x,), check_forward_ad=True, check_backward_ad=True)


def composite(x, w):
    """aten ops with their own forward-AD formulas, views and in-place ops included."""
    y = (x @ w).softmax(dim=1)
    y = y * x[:, :3].exp()
    y[:, 1].mul_(2.0)
    return y.t().reshape(-1).cumsum(0).log1p()


def test_forward_mode_ad_dual_tensors_match_cpu():
    sources = (double_randn(4, 5).abs(), double_randn(5, 3))
    tangent_sources = (double_randn(4, 5), double_randn(5, 3))
    results = {}
    for device in DEVICES:
        with fwAD.dual_level():
            duals = [fwAD.make_dual(primal.to(device), tangent.to(device))
                     for primal, tangent in zip(sources, tangent_sources)]
            output = composite(*duals)
            primal, tangent = fwAD.unpack_dual(output)
            results[device] = (primal, tangent)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert_vdev_equals_cpu(device_result, cpu_result)
    inputs = tuple(leaves("vdev", *sources))
    assert gradcheck(composite, inputs, check_forward_ad=True)


def test_saved_tensor_modified_in_place_is_detected():
    for device in DEVICES:
        (x,) = leaves(device, double_randn(4))
        work = x * 1.0
        output = Cube.apply(work)
        work.add_(1.0)  # through vdev's fallback: must bump the version counter
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            output.sum().backward()


def test_save_on_cpu_hooks_move_saved_tensors_off_the_device():
    source = double_randn(6, 6)
    expected = {}
    for device in DEVICES:
        (x,) = leaves(device, source)
        packed_devices = []

        def pack(tensor):
            packed_devices.append(tensor.device.type)
            return tensor.cpu()

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t.to(device)):
            output = LinearFunction.apply(x.tanh(), x)
        output.sum().backward()
        expected[device] = x.grad
        assert set(packed_devices) == {device}
    assert_vdev_equals_cpu(expected["vdev"], expected["cpu"])
    (x,) = leaves("vdev", source)
    with torch.autograd.graph.save_on_cpu():
        LinearFunction.apply(x.tanh(), x).sum().backward()
    assert_vdev_equals_cpu(x.grad, expected["cpu"])
