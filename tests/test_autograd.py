"""Autograd on vdev tensors gives CPU's gradients."""

import torch
from torch.testing import assert_close


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.LogSoftmax(dim=1)
    )


def test_mlp_backward_matches_cpu():
    cpu_model = _mlp(0)
    device_model = _mlp(0).to("vdev")
    inputs = torch.randn(5, 8)
    targets = torch.tensor([0, 3, 1, 2, 0])
    cpu_loss = torch.nn.functional.nll_loss(cpu_model(inputs), targets)
    device_loss = torch.nn.functional.nll_loss(device_model(inputs.to("vdev")), targets.to("vdev"))
    cpu_loss.backward()
    device_loss.backward()
    assert device_loss.device.type == "vdev"
    assert_close(device_loss.cpu(), cpu_loss)
    for cpu_param, device_param in zip(cpu_model.parameters(), device_model.parameters()):
        assert device_param.grad.device.type == "vdev"
        assert_close(device_param.grad.cpu(), cpu_param.grad)


def test_elementwise_and_reduction_gradients():
    source = torch.randn(4, 5, dtype=torch.float64)
    cpu_input = source.clone().requires_grad_()
    device_input = source.to("vdev").requires_grad_()
    for tensor in (cpu_input, device_input):
        (tensor.sin() * tensor.exp() + tensor.t().mm(tensor).sum()).mean().backward()
    assert_close(device_input.grad.cpu(), cpu_input.grad)


def test_gradient_through_views_and_in_place():
    source = torch.randn(6, dtype=torch.float64)
    results = []
    for device in ("cpu", "vdev"):
        leaf = source.to(device).detach().requires_grad_()
        work = leaf * 1.0
        work[2:4].mul_(3.0)
        work.view(2, 3).t()[1].pow_(2)
        work.sum().backward()
        results.append(leaf.grad.cpu())
    assert_close(results[1], results[0])


def test_gradcheck_on_device():
    inputs = torch.randn(3, 3, dtype=torch.float64, device="vdev", requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: (x @ x).tanh(), (inputs,))
    assert torch.autograd.gradgradcheck(lambda x: (x @ x).tanh(), (inputs,))


BACKWARD_THEN_EXIT = """
import torch
x = torch.randn(2, 3, 6, 6, dtype=torch.float64, device='vdev', requires_grad=True)
w = torch.randn(4, 3, 3, 3, dtype=torch.float64, device='vdev', requires_grad=True)
(gx, gw) = torch.autograd.grad(torch.nn.functional.conv2d(x, w).softmax(1).sum(), (x, w))
print(gx.sum().item() == gx.sum().item())
"""


def test_process_exits_cleanly_right_after_backward(run_in_subprocess):
    # The autograd device thread may still be releasing the finished graph task (and
    # with it the Python-owned gradients) when the interpreter starts to exit; that
    # used to abort the process ("terminate called without an active exception")
    # in some of the runs.
    for _ in range(5):
        result = run_in_subprocess(BACKWARD_THEN_EXIT)
        assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr
