"""Extending torch on vdev: __torch_function__ (the docs' ScalarTensor duck type, Tensor
subclasses, a logging subclass, the device context manager) and __torch_dispatch__
wrapper subclasses and modes around vdev tensors, against CPU."""

import functools
import logging

import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing import assert_close
from torch.testing._internal.logging_tensor import LoggingTensor, capture_logs
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import TorchDispatchMode

DEVICES = ("cpu", "vdev")

# The docs' ScalarTensor, with a device for the tensor it stands for.
HANDLED_FUNCTIONS = {}


class ScalarTensor:
    """Returns NotImplemented for functions it does not handle, as in the docs."""

    def __init__(self, N, value, device="cpu"):
        self._N = N
        self._value = value
        self._device = device

    def __repr__(self):
        return "ScalarTensor(N={}, value={})".format(self._N, self._value)

    def tensor(self):
        return self._value * torch.eye(self._N, device=self._device)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func not in HANDLED_FUNCTIONS or not all(
            issubclass(t, (torch.Tensor, ScalarTensor)) for t in types
        ):
            return NotImplemented
        return HANDLED_FUNCTIONS[func](*args, **kwargs)


class PermissiveScalarTensor(ScalarTensor):
    """The docs' variant that runs unhandled functions on the equivalent tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func not in HANDLED_FUNCTIONS or not all(
            issubclass(t, (torch.Tensor, ScalarTensor)) for t in types
        ):
            args = [a.tensor() if hasattr(a, "tensor") else a for a in args]
            return func(*args, **kwargs)
        return HANDLED_FUNCTIONS[func](*args, **kwargs)


def implements(torch_function):
    @functools.wraps(torch_function)
    def decorator(func):
        HANDLED_FUNCTIONS[torch_function] = func
        return func

    return decorator


@implements(torch.mean)
def mean(input):
    return float(input._value) / input._N


def ensure_tensor(data):
    if isinstance(data, ScalarTensor):
        return data.tensor()
    return torch.as_tensor(data)


@implements(torch.add)
def add(input, other):
    try:
        if input._N == other._N:
            return type(input)(input._N, input._value + other._value, input._device)
        else:
            raise ValueError("Shape mismatch!")
    except AttributeError:
        return torch.add(ensure_tensor(input), ensure_tensor(other))


def test_scalar_tensor_duck_type_dispatches_like_on_cpu():
    results = {}
    for device in DEVICES:
        s = ScalarTensor(2, 2, device)
        assert torch.mean(ScalarTensor(5, 2, device)) == pytest.approx(0.4)
        total = torch.add(s, s)
        assert isinstance(total, ScalarTensor) and total._value == 4
        t = torch.tensor([[1.0, 1.0], [1.0, 1.0]], device=device)
        results[device] = (torch.add(s, t), torch.add(t, s), total.tensor())
        with pytest.raises(TypeError, match="torch.mul.*handlers returned NotImplemented"):
            torch.mul(s, 3)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert device_result.device.type == "vdev"
        assert_close(device_result.cpu(), cpu_result)
    assert_close(results["cpu"][0], torch.tensor([[3.0, 1.0], [1.0, 3.0]]))


def test_permissive_scalar_tensor_runs_unhandled_functions_on_its_tensor():
    products = {device: torch.mul(PermissiveScalarTensor(3, 2, device), 3) for device in DEVICES}
    assert products["vdev"].device.type == "vdev"
    assert_close(products["vdev"].cpu(), products["cpu"])


def test_scalar_tensor_mixed_with_another_device_is_rejected():
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(ScalarTensor(2, 2, "vdev"), torch.ones(2, 2))


class SubTensor(torch.Tensor):
    pass


class SubTensor2(SubTensor):
    pass


class OtherSubTensor(torch.Tensor):
    pass


def test_subclasses_propagate_through_vdev_operations():
    base = torch.randn(3)
    sub, sub2 = base.to("vdev").as_subclass(SubTensor), base.to("vdev").as_subclass(SubTensor2)
    plain = base.to("vdev")
    for result, expected_type in (
        (torch.add(sub, sub), SubTensor),
        (torch.add(sub, plain), SubTensor),
        (sub.sin()[1:], SubTensor),
        (torch.add(sub2, sub), SubTensor2),
        (torch.add(sub2, plain), SubTensor2),
    ):
        assert type(result) is expected_type and result.device.type == "vdev"
    assert_close(torch.add(sub, plain).as_subclass(torch.Tensor).cpu(), base + base)
    with pytest.raises(TypeError, match="torch.add.*handlers returned NotImplemented"):
        torch.add(sub, plain.as_subclass(OtherSubTensor))


class FunctionLoggingTensor(torch.Tensor):
    """The docs' logging subclass (__torch_function__ for every function and method)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is not torch.Tensor.__repr__:
            logging.info(f"func: {func.__name__}")
        if kwargs is None:
            kwargs = {}
        return super().__torch_function__(func, types, args, kwargs)


def test_function_logging_subclass_logs_and_computes_like_cpu(caplog):
    source = torch.randn(4, dtype=torch.float64)
    results, logged = {}, {}
    for device in DEVICES:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            x = source.to(device).as_subclass(FunctionLoggingTensor).requires_grad_()
            y = torch.nn.functional.softplus(x * 2).sum()
            y.backward()
        logged[device] = [record.getMessage() for record in caplog.records]
        results[device] = (y.detach(), x.grad)
        assert type(y) is FunctionLoggingTensor
    functions = ["requires_grad_", "mul", "softplus", "sum", "backward"]
    assert logged["cpu"] == [f"func: {name}" for name in functions]
    assert logged["vdev"] == logged["cpu"]
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert device_result.device.type == "vdev"
        plain = device_result.as_subclass(torch.Tensor).cpu()
        assert_close(plain, cpu_result.as_subclass(torch.Tensor))


def test_device_context_manager_and_default_device():
    torch.manual_seed(3)
    cpu_layer = torch.nn.Linear(3, 2)
    torch.manual_seed(3)
    with torch.device("vdev"):
        layer = torch.nn.Linear(3, 2)
        ones = torch.ones(2)
    assert ones.device.type == "vdev" and layer.weight.device.type == "vdev"
    assert_close(layer.weight.cpu(), cpu_layer.weight.detach())
    torch.set_default_device("vdev")
    try:
        assert torch.arange(3).device.type == "vdev"
    finally:
        torch.set_default_device(None)
    assert torch.arange(3).device.type == "cpu"


def test_two_tensor_wrapper_subclass_around_vdev_tensors():
    sources = (torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64))
    results = {}
    for device in DEVICES:
        pair = TwoTensor(*(s.to(device) for s in sources)).requires_grad_()
        output = (pair.sin() * 2 + pair).t().reshape(-1)[2:]
        output.sum().backward()
        assert type(output) is TwoTensor and output.device.type == device
        assert type(pair.grad) is TwoTensor
        results[device] = (output.a, output.b, pair.grad.a, pair.grad.b)
    for device_result, cpu_result in zip(results["vdev"], results["cpu"]):
        assert device_result.device.type == "vdev"
        assert_close(device_result.detach().cpu(), cpu_result.detach())
    # Components computed separately are the reference for each half.
    assert_close(results["cpu"][1].detach(), (sources[1].sin() * 2 + sources[1]).t().reshape(-1)[2:])


def test_two_tensor_moves_between_devices_through_dispatch():
    pair = TwoTensor(torch.randn(2), torch.randn(2))
    moved = pair.to("vdev")
    assert type(moved) is TwoTensor and moved.device.type == "vdev"
    assert moved.a.device.type == "vdev" and moved.b.device.type == "vdev"
    back = moved.cpu()
    assert_close(back.a, pair.a)
    assert_close(back.b, pair.b)
    with pytest.raises(AssertionError, match="same device"):
        TwoTensor(torch.randn(2, device="vdev"), torch.randn(2))


def test_dispatch_logging_tensor_sees_the_same_aten_calls_as_on_cpu():
    source = torch.randn(5)
    logs, grads = {}, {}
    for device in DEVICES:
        x = LoggingTensor(source.to(device), requires_grad=True)
        with capture_logs() as device_logs:
            y = (x * x + 1).softmax(0).sum()
            y.backward()
        logs[device] = [line.replace(f"'{device}'", "DEVICE") for line in device_logs]
        assert type(x.grad) is LoggingTensor
        grads[device] = x.grad.elem
    assert any("aten._softmax_backward_data" in line for line in logs["cpu"])
    assert logs["vdev"] == logs["cpu"]
    assert grads["vdev"].device.type == "vdev"
    assert_close(grads["vdev"].cpu(), grads["cpu"])


class RecordingMode(TorchDispatchMode):
    """Records each aten call and the devices of its tensor arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        devices = {tensor.device.type for tensor in tensors}
        self.calls.append((str(func), devices))
        return func(*args, **kwargs)


def test_dispatch_modes_see_vdev_tensors():
    calls, results = {}, {}
    for device in DEVICES:
        with RecordingMode() as mode:
            a = torch.arange(6.0, device=device).view(2, 3)
            results[device] = a.t().contiguous().view(-1).cumsum(0)
        calls[device] = mode.calls
    assert [name for name, _ in calls["vdev"]] == [name for name, _ in calls["cpu"]]
    assert [name for name, _ in calls["cpu"]][:2] == ["aten.arange.default", "aten.view.default"]
    assert all(devices <= {"vdev"} for _, devices in calls["vdev"])
    assert results["vdev"].device.type == "vdev"
    assert_close(results["vdev"].cpu(), results["cpu"])
