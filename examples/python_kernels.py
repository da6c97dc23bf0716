"""Python kernels: prototype vdev kernels in numpy, check them, run a model on them.

Run with:  python examples/python_kernels.py
"""

from collections import Counter

import numpy as np
import torch

import torch_vdev

aten = torch.ops.aten
calls = Counter()


# A kernel receives CPU tensors that alias vdev memory: .numpy() is a view of the device
# data, so nothing is copied on the way in.
def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    calls["addmm"] += 1
    result = alpha * (mat1.numpy() @ mat2.numpy()) + beta * bias.numpy()
    return torch.from_numpy(result.astype(mat1.numpy().dtype, copy=False))


def relu(x):
    calls["relu"] += 1
    return torch.from_numpy(np.maximum(x.numpy(), 0))


def relu_(x):
    calls["relu_"] += 1
    np.maximum(x.numpy(), 0, out=x.numpy())  # writes device memory in place
    return x


def gelu(x, approximate="none"):
    if approximate != "tanh":
        return NotImplemented  # numpy has no erf: vdev's CPU kernel handles exact GELU
    calls["gelu"] += 1
    a = x.numpy()
    inner = np.float32(np.sqrt(2 / np.pi)) * (a + np.float32(0.044715) * a**3)
    return torch.from_numpy(0.5 * a * (1 + np.tanh(inner)))


def softmax(x, dim, half_to_float):
    calls["softmax"] += 1
    a = x.numpy()
    shifted = np.exp(a - a.max(axis=dim, keepdims=True))
    # A tensor made with torch inside a kernel already lives in device memory: the
    # result is handed back without a copy.
    out = torch.empty_like(x)
    np.divide(shifted, shifted.sum(axis=dim, keepdims=True), out=out.numpy())
    return out


KERNELS = {
    aten.addmm.default: addmm,
    aten.relu.default: relu,
    aten.relu_.default: relu_,
    aten.gelu.default: gelu,
    aten._softmax.default: softmax,
}

# 1. Each kernel against PyTorch's CPU result.
torch.manual_seed(0)
a, b, bias = torch.randn(8, 5), torch.randn(5, 3), torch.randn(3)
checks = {
    "addmm": lambda device: torch.addmm(bias.to(device), a.to(device), b.to(device), beta=0.5, alpha=2),
    "relu": lambda device: torch.relu(a.to(device)),
    "relu_": lambda device: a.to(device).clone().relu_(),
    "gelu (tanh)": lambda device: torch.nn.functional.gelu(a.to(device), approximate="tanh"),
    "gelu (exact, CPU kernel)": lambda device: torch.nn.functional.gelu(a.to(device)),
    "softmax": lambda device: torch.softmax(a.to(device), dim=1),
}
with torch_vdev.kernels(KERNELS):
    for name, run in checks.items():
        result = run("vdev")
        assert result.device.type == "vdev"
        torch.testing.assert_close(result.cpu(), run("cpu"))
        print(f"{name:<26} matches CPU")
print("kernel calls:", dict(calls))


# 2. A small model trained with the kernels active: the forward pass runs them, autograd
# uses each op's own derivative formula.
def train(device: str) -> float:
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
        torch.nn.GELU(approximate="tanh"), torch.nn.Linear(32, 4),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = torch.randn(64, 16).to(device), torch.randint(0, 4, (64,)).to(device)
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
    return loss.item()


calls.clear()
with torch_vdev.kernels(KERNELS):
    vdev_loss = train("vdev")
cpu_loss = train("cpu")
print(f"model: loss on vdev with numpy kernels {vdev_loss:.6f}, on CPU {cpu_loss:.6f}")
print("kernel calls while training:", dict(calls))
assert abs(vdev_loss - cpu_loss) < 1e-4, "numpy kernels and CPU disagree"
