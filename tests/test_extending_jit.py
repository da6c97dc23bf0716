"""TorchScript on vdev: torch.jit.trace and torch.jit.script run on vdev tensors (the
interpreter calls kernels boxed, eager Python calls them unboxed: both must agree with
CPU), freezing, and torch.jit.save/load with vdev tensors."""

import io
from typing import List, Tuple

import pytest
import torch
from torch.testing import assert_close

# TorchScript is deprecated in torch 2.13 but still supported, and still used.
# Tracing Net warns that its data-dependent branch is fixed by the example input; after
# the ReLU the branch is taken for any input, so the traces stay valid.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.register_buffer("scale", torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(self.fc1(x)).relu() * self.scale
        # Data-dependent control flow: the scripted version reads a device scalar.
        if bool(hidden.sum() > 0):
            hidden = hidden + hidden.flip(0)
        for _ in range(2):
            hidden = hidden.tanh()
        return self.fc2(hidden).log_softmax(-1)


def make_net(seed=0) -> Net:
    torch.manual_seed(seed)
    return Net().eval()


def assert_vdev_equals_cpu(device_tensor, cpu_tensor):
    assert device_tensor.device.type == "vdev"
    assert_close(device_tensor.cpu(), cpu_tensor)


def test_script_and_trace_of_a_model_on_vdev_equal_cpu():
    cpu_net = make_net()
    net = make_net().to("vdev")
    x = torch.randn(4, 5)
    reference = cpu_net(x)
    scripted = torch.jit.script(net)
    traced = torch.jit.trace(net, x.to("vdev"))
    for compiled in (scripted, traced):
        assert_vdev_equals_cpu(compiled(x.to("vdev")), reference)
    # A trace made on CPU, moved to vdev.
    moved = torch.jit.trace(make_net(), x).to("vdev")
    assert_vdev_equals_cpu(moved(x.to("vdev")), reference)
    # Training mode: batch statistics and running-statistics updates on vdev.
    scripted.train()
    cpu_net.train()
    assert_vdev_equals_cpu(scripted(x.to("vdev")), cpu_net(x))
    assert_vdev_equals_cpu(scripted.norm.running_mean, cpu_net.norm.running_mean)


def test_scripted_model_backward_matches_cpu():
    cpu_net, net = make_net().train(), torch.jit.script(make_net().to("vdev").train())
    x = torch.randn(4, 5)
    cpu_net(x).sum().backward()
    net(x.to("vdev")).sum().backward()
    for (name, param), cpu_param in zip(net.named_parameters(), cpu_net.parameters()):
        assert_vdev_equals_cpu(param.grad, cpu_param.grad)


def vdev_native_kernels(x: torch.Tensor, device: torch.device) -> Tuple[List[torch.Tensor], float]:
    """Uses the ops vdev implements itself that TorchScript can call (the rest go
    through the boxed fallback)."""
    filled = torch.empty([2, 3], device=device).fill_(1.5)  # empty.memory_format, fill_
    strided = torch.empty_strided([2, 3], [1, 2], device=device).fill_(2.0)  # empty_strided
    view = x.view([3, 4])  # view
    window = x.as_strided([2, 2], [1, 4], 1)  # as_strided
    view[0].fill_(-1.0)  # writes through the view into x
    on_cpu = x.to("cpu")  # _copy_from, to the host
    back = on_cpu.to(device) * 2  # _copy_from, to the device
    grown = x.clone()
    grown.resize_([20])  # resize_
    grown[12:].zero_()
    total = x.sum().item()  # _local_scalar_dense
    return [filled, strided, view, window, x, back, grown], float(total)


def test_boxed_interpreter_calls_and_unboxed_eager_calls_agree_with_cpu():
    scripted = torch.jit.script(vdev_native_kernels)
    source = torch.randn(12)
    runs = {}
    for name, function, device in (
        ("cpu", vdev_native_kernels, "cpu"),
        ("eager", vdev_native_kernels, "vdev"),
        ("scripted", scripted, "vdev"),
    ):
        x = source.to(device, copy=True)
        tensors, total = function(x, torch.device(device))
        runs[name] = (tensors, total)
    cpu_tensors, cpu_total = runs["cpu"]
    for name in ("eager", "scripted"):
        tensors, total = runs[name]
        assert total == pytest.approx(cpu_total)
        for index, (tensor, cpu_tensor) in enumerate(zip(tensors, cpu_tensors)):
            assert tensor.stride() == cpu_tensor.stride(), (name, index)
            assert_vdev_equals_cpu(tensor, cpu_tensor)
        view, window, x = tensors[2:5]
        assert view.data_ptr() == x.data_ptr()
        assert window.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_scripted_code_creates_tensors_on_a_named_device():
    @torch.jit.script
    def make(x: torch.Tensor, name: str) -> torch.Tensor:
        device = torch.device(name)
        return torch.arange(4, device=device) + x.to(device)

    result = make(torch.ones(4), "vdev:1")
    assert result.device == torch.device("vdev:1")
    assert_close(result.cpu(), torch.arange(4) + torch.ones(4))
    with pytest.raises(RuntimeError, match="vdev"):
        make(torch.ones(4), "vdev:99")


def test_frozen_script_module_folds_on_vdev():
    cpu_net, net = make_net(), make_net().to("vdev")
    frozen = torch.jit.freeze(torch.jit.script(net))
    constants = [node for node in frozen.graph.nodes() if node.kind() == "prim::Constant"
                 and node.output().type().kind() == "TensorType"]
    assert constants and all(node.output().toIValue().device.type == "vdev" for node in constants)
    x = torch.randn(4, 5)
    assert_vdev_equals_cpu(frozen(x.to("vdev")), cpu_net(x))


def save_and_load(module, map_location=None):
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer, map_location=map_location)


@pytest.mark.parametrize(
    "compile",
    [torch.jit.script, lambda module: torch.jit.trace(module, torch.randn(4, 5, device="vdev"))],
    ids=["script", "trace"],
)
def test_save_and_load_keep_vdev_tensors(compile):
    x = torch.randn(4, 5)
    reference = make_net()(x)
    saved = compile(make_net().to("vdev"))
    for map_location, device in ((None, "vdev:0"), ("cpu", "cpu"), ("vdev:1", "vdev:1")):
        loaded = save_and_load(saved, map_location)
        assert {tensor.device for tensor in loaded.state_dict().values()} == {torch.device(device)}
        result = loaded(x.to(device))
        assert result.device == torch.device(device)
        assert_close(result.cpu(), reference)


def test_cpu_saved_module_loads_onto_vdev():
    saved = torch.jit.script(make_net())
    loaded = save_and_load(saved, map_location="vdev")
    assert all(tensor.device.type == "vdev" for tensor in loaded.state_dict().values())
    x = torch.randn(4, 5)
    assert_vdev_equals_cpu(loaded(x.to("vdev")), saved(x))
