"""vdev's own autograd kernels (torch::autograd::Function per native op family):
gradcheck, gradgradcheck and forward-mode AD on vdev, equal to CPU autograd, and
equal to PyTorch's generated autograd (VDEV_AUTOGRAD_OVERRIDES=0)."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close


def _double(*shape):
    return torch.randn(*shape, dtype=torch.float64)


# name -> (function of tensors, inputs made on the CPU)
CASES = {
    "mm": (lambda a, b: a @ b, lambda: (_double(3, 4), _double(4, 2))),
    "gelu": (lambda x: F.gelu(x), lambda: (_double(5),)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda: (_double(5),)),
    "sum": (lambda x: x.sum(dim=(0, 2)), lambda: (_double(2, 3, 4),)),
    "sum_keepdim": (lambda x: x.sum(dim=1, keepdim=True), lambda: (_double(2, 3),)),
    "index_select": (lambda x: x.index_select(1, torch.tensor([2, 0, 2], device=x.device)), lambda: (_double(3, 4),)),
    "softmax": (lambda x: x.softmax(dim=1), lambda: (_double(3, 5),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: (_double(3, 4), _double(4), _double(4))),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda: (_double(1, 2, 5, 5), _double(3, 2, 3, 3), _double(3))),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda: (_double(1, 2, 4, 4),)),
}


def _inputs(case, device):
    torch.manual_seed(0)
    return tuple(t.to(device).requires_grad_() for t in CASES[case][1]())


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck_gradgradcheck_and_forward_ad_on_vdev(case):
    function = CASES[case][0]
    inputs = _inputs(case, "vdev")
    assert torch.autograd.gradcheck(function, inputs, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(function, inputs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_equal_cpu_autograd(case):
    function = CASES[case][0]
    results = {}
    for device in ("cpu", "vdev"):
        inputs = _inputs(case, device)
        output = function(*inputs)
        output.backward(torch.ones_like(output))
        results[device] = (output.detach().cpu(), [t.grad.cpu() for t in inputs])
    assert_close(results["vdev"][0], results["cpu"][0])
    for device_grad, cpu_grad in zip(results["vdev"][1], results["cpu"][1]):
        assert_close(device_grad, cpu_grad)


def test_overrides_are_in_the_graph():
    a, b = _inputs("mm", "vdev")
    assert "MmFunction" in (a @ b).grad_fn.name()


@pytest.mark.parametrize("case", sorted(CASES))
def test_ops_that_record_nothing_equal_cpu_without_a_node(case):
    """Under no_grad, or on inputs that require no grad, an overridden op runs below
    autograd: no node, and the CPU's result."""
    function = CASES[case][0]
    torch.manual_seed(0)
    cpu_inputs = CASES[case][1]()
    expected = function(*cpu_inputs)
    plain = tuple(t.to("vdev") for t in cpu_inputs)
    with torch.no_grad():
        under_no_grad = function(*(t.clone().requires_grad_() for t in plain))
    for result in (function(*plain), under_no_grad):
        assert result.grad_fn is None and not result.requires_grad
        assert_close(result.cpu(), expected)


def test_mm_gradients_have_cpus_layout():
    # A weight used transposed gets a gradient laid out as the weight, as on CPU, which
    # AccumulateGrad then takes without a copy.
    inputs, weight = torch.randn(6, 4), torch.randn(5, 4)
    gradients = {}
    for device in ("cpu", "vdev"):
        device_inputs = inputs.to(device).t().requires_grad_()
        device_weight = weight.to(device).requires_grad_()
        product = device_inputs.t().mm(device_weight.t())
        gradients[device] = torch.autograd.grad(product.square().sum(), (device_inputs, device_weight))
    for vdev_gradient, cpu_gradient in zip(gradients["vdev"], gradients["cpu"]):
        assert vdev_gradient.stride() == cpu_gradient.stride()
        assert_close(vdev_gradient.cpu(), cpu_gradient, rtol=0, atol=0)


def test_dropout_backward_uses_the_same_mask():
    x = torch.ones(1000, device="vdev", requires_grad=True)
    output = F.dropout(x, 0.3, training=True)
    output.sum().backward()
    kept = output.detach() != 0
    assert_close(x.grad.cpu(), (kept.float() / 0.7).cpu())


COMPARE = """
import torch, torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(2, 3, 6, 6, dtype=torch.float64, device='vdev', requires_grad=True)
w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device='vdev', requires_grad=True)
y = F.max_pool2d(F.conv2d(x, w), 2).flatten(1)
z = F.layer_norm(F.gelu(y @ y.t()), (2,)).softmax(1).sum(dim=(1,))
(gx, gw) = torch.autograd.grad(z.sum(), (x, w))
print(type(z.grad_fn).__name__)
torch.save([z.detach().cpu(), gx.cpu(), gw.cpu()], OUT)
"""


def test_switching_overrides_off_gives_the_same_results(run_in_subprocess, tmp_path):
    outputs = {}
    for setting in ("1", "0"):
        path = tmp_path / f"overrides_{setting}.pt"
        result = run_in_subprocess(
            f"OUT = {str(path)!r}\n" + COMPARE, env={"VDEV_AUTOGRAD_OVERRIDES": setting}
        )
        assert result.returncode == 0, result.stderr
        outputs[setting] = (result.stdout.strip(), torch.load(path))
    assert outputs["1"][0] == "CppFunction"  # vdev's own Function
    assert outputs["0"][0] == "SumBackward1"  # PyTorch's generated autograd
    for with_overrides, without in zip(outputs["1"][1], outputs["0"][1]):
        assert_close(with_overrides, without)
