"""Quick start: vdev as a real non-CPU device for device-agnostic PyTorch code.

Run with:  python examples/quickstart.py
"""

import torch

# No import of torch_vdev is needed once it is installed: torch loads it (autoload).
device = torch.device("vdev")
print(f"devices: {torch.vdev.device_count()}, current: {torch.vdev.current_device()}")

x = torch.randn(3, device="privateuseone")  # PyTorch's generic name for the same device
print("x =", x)

# Train a small model on vdev and on CPU from the same seed: the losses agree.
def train(device: torch.device) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # Data is drawn on the CPU so both runs see the same numbers (vdev has its own generator).
    inputs = torch.randn(64, 16).to(device)
    targets = inputs.sum(dim=1, keepdim=True)
    for _ in range(50):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.item()

vdev_loss, cpu_loss = train(device), train(torch.device("cpu"))
print(f"final loss on vdev {vdev_loss:.6f}, on cpu {cpu_loss:.6f}")
assert abs(vdev_loss - cpu_loss) < 1e-4, "vdev and CPU disagree"

# Device mixing is caught as it would be on CUDA.
try:
    torch.ones(2, device="vdev:0") + torch.ones(2, device="vdev:1")
except RuntimeError as error:
    print("mixing devices:", str(error).splitlines()[0])

# Memory is tracked like torch.cuda's caching allocator.
big = torch.empty(1 << 20, device="vdev")
print(f"allocated: {torch.vdev.memory_allocated()} bytes, reserved: {torch.vdev.memory_reserved()} bytes")
del big
print(f"after del: {torch.vdev.memory_allocated()} bytes allocated")
