"""Extending torch.nn on vdev: the docs' Linear module (built on a custom Function),
parameters and buffers moving with .to()/.vdev(), state_dict round trips, hooks."""

import io

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from test_extending_autograd import LinearFunction


class Linear(nn.Module):
    """The docs' Linear module, plus a buffer updated in forward like running statistics."""

    def __init__(self, input_features, output_features, bias=True):
        super().__init__()
        self.input_features = input_features
        self.output_features = output_features
        self.weight = nn.Parameter(torch.empty(output_features, input_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_features))
        else:
            self.register_parameter("bias", None)
        nn.init.uniform_(self.weight, -0.1, 0.1)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.1, 0.1)
        self.register_buffer("input_mean", torch.zeros(input_features))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("scratch", torch.ones(2), persistent=False)

    def forward(self, input):
        with torch.no_grad():
            self.input_mean.mul_(0.9).add_(input.mean(0), alpha=0.1)
            self.calls += 1
        return LinearFunction.apply(input, self.weight, self.bias)

    def extra_repr(self):
        return "input_features={}, output_features={}, bias={}".format(
            self.input_features, self.output_features, self.bias is not None
        )


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(Linear(4, 6), nn.Tanh(), Linear(6, 3, bias=False))


def tensors_of(model):
    return dict(model.named_parameters()) | dict(model.named_buffers())


def assert_same_state(device_model, cpu_model, device="vdev:0"):
    device_tensors, cpu_tensors = tensors_of(device_model), tensors_of(cpu_model)
    assert device_tensors.keys() == cpu_tensors.keys()
    for name, tensor in device_tensors.items():
        assert tensor.device == torch.device(device), name
        assert_close(tensor.cpu(), cpu_tensors[name].cpu(), msg=name)


@pytest.mark.parametrize("move", [lambda m: m.to("vdev"), lambda m: m.vdev(),
                                  lambda m: m.to(torch.device("vdev", 0))],
                         ids=["to", "vdev", "to_device"])
def test_parameters_and_buffers_move_and_keep_their_kind(move):
    cpu_model = make_model()
    model = move(make_model())
    assert_same_state(model, cpu_model)
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in model.parameters())
    assert "scratch" not in model.state_dict() and model[0].scratch.device.type == "vdev"
    assert "input_features=4, output_features=6, bias=True" in repr(model)


def test_training_steps_match_cpu():
    models = {"cpu": make_model(), "vdev": make_model().to("vdev")}
    inputs = torch.randn(3, 5, 4)
    for device, model in models.items():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for batch in inputs:
            optimizer.zero_grad()
            model(batch.to(device)).pow(2).sum().backward()
            optimizer.step()
    assert_same_state(models["vdev"], models["cpu"])
    assert models["vdev"][0].calls.item() == 3


def test_move_to_another_device_dtype_and_back():
    cpu_model = make_model()
    model = make_model().to("vdev")
    x = torch.randn(2, 4)
    cpu_model(x)
    model(x.to("vdev")).sum().backward()
    weight = model[0].weight
    # As on CPU, a dtype change on the same device keeps the Parameter objects
    # (set through .data), grads included.
    model.double()
    assert model[0].weight is weight and weight.dtype == torch.float64
    assert weight.grad.device.type == "vdev" and weight.grad.dtype == torch.float64
    model.to("vdev:1")
    assert_same_state(model, cpu_model.double(), device="vdev:1")
    assert model[0].weight.grad.device == torch.device("vdev:1")
    model.cpu()
    assert_same_state(model, cpu_model, device="cpu")


def test_state_dict_round_trips_between_cpu_and_vdev():
    trained = make_model(1).to("vdev")
    trained(torch.randn(2, 4, device="vdev"))
    state = trained.state_dict()
    assert all(tensor.device.type == "vdev" for tensor in state.values())

    cpu_model = make_model(2)
    cpu_model.load_state_dict(state)
    assert_same_state(trained, cpu_model)

    device_model = make_model(3).to("vdev")
    device_model.load_state_dict(cpu_model.state_dict())
    assert_same_state(device_model, cpu_model)

    buffer = io.BytesIO()
    torch.save(state, buffer)
    for map_location, device in ((None, "vdev"), ("cpu", "cpu")):
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=map_location)
        for name, tensor in loaded.items():
            assert tensor.device.type == device
            assert_close(tensor.cpu(), state[name].cpu())

    # assign=True takes the loaded tensors themselves: a model built on meta ends up on vdev.
    assigned = make_model(4).to("meta")
    assigned.load_state_dict(state, assign=True)
    for name, tensor in assigned.state_dict().items():
        assert tensor.device == state[name].device and tensor.data_ptr() == state[name].data_ptr()


def run_with_hooks(device, source):
    model = make_model().to(device)
    seen = []
    first, second = model[0], model[2]
    first.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    first.register_forward_hook(lambda module, args, output: output + 1)
    second.register_full_backward_pre_hook(lambda module, grad_output: (grad_output[0] * 3,))
    second.register_full_backward_hook(
        lambda module, grad_input, grad_output: seen.append(("backward", grad_input[0].clone())))
    first.weight.register_hook(lambda grad: grad * 0.5)
    first.bias.register_post_accumulate_grad_hook(
        lambda param: seen.append(("bias", param.grad.clone())))
    model.register_state_dict_post_hook(
        lambda module, state_dict, prefix, local_metadata: seen.append(("state", len(state_dict))))
    x = source.to(device, copy=True).requires_grad_()
    output = model(x)
    output.sum().backward()
    model.state_dict()
    return seen, [output.detach(), x.grad] + [p.grad for p in model.parameters()]


def test_module_and_tensor_hooks_match_cpu():
    source = torch.randn(3, 4)
    cpu_seen, cpu_results = run_with_hooks("cpu", source)
    device_seen, device_results = run_with_hooks("vdev", source)
    assert [kind for kind, _ in device_seen] == ["backward", "bias", "state"]
    assert [kind for kind, _ in cpu_seen] == ["backward", "bias", "state"]
    for (_, device_value), (_, cpu_value) in zip(device_seen[:2], cpu_seen[:2]):
        assert device_value.device.type == "vdev"
        assert_close(device_value.cpu(), cpu_value)
    assert device_seen[2] == cpu_seen[2]
    for device_result, cpu_result in zip(device_results, cpu_results):
        assert device_result.device.type == "vdev"
        assert_close(device_result.cpu(), cpu_result)
