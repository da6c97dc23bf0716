"""nn.DataParallel and torch.nn.parallel.comm on vdev's two devices, checked against the
same module and tensors on the CPU (PyTorch's CPU build has none of comm's primitives;
vdev provides them with CUDA's contract)."""

import copy

import pytest
import torch
from torch.nn.parallel import comm
from torch.nn.parallel._functions import Broadcast
from torch.testing import assert_close

DEVICE = "vdev"


def test_data_parallel_matches_the_module_on_cpu():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference = copy.deepcopy(module)
    inputs = torch.randn(6, 4)
    parallel = torch.nn.DataParallel(module.to(DEVICE))
    assert parallel.device_ids == [0, 1]

    with pytest.warns(UserWarning, match="NCCL"):  # reduce_add's, as on a CUDA build without NCCL
        output = parallel(inputs.to(DEVICE))
        output.square().sum().backward()
    expected = reference(inputs)
    expected.square().sum().backward()

    assert output.device == torch.device(DEVICE, 0)
    assert_close(output.cpu(), expected)
    for parameter, reference_parameter in zip(module.parameters(), reference.parameters()):
        assert parameter.grad.device == torch.device(DEVICE, 0)
        assert_close(parameter.grad.cpu(), reference_parameter.grad)


def test_broadcast_function_sums_the_gradients_of_every_copy():
    # PyTorch's test_autograd TestAutogradDeviceType.test_unused_output_device.
    source = torch.randn(5, 5, device=DEVICE, requires_grad=True)
    copies = Broadcast.apply([0, 1], source)
    assert [c.device for c in copies] == [torch.device(DEVICE, 0), torch.device(DEVICE, 1)]
    (copies[-1] * 2).sum().backward()
    assert_close(source.grad.cpu(), torch.full((5, 5), 2.0))


def test_broadcast_and_broadcast_coalesced_copy_to_every_device():
    tensors = [torch.randn(3, 2), torch.arange(4)]
    on_device = [t.to(DEVICE) for t in tensors]
    copies = comm.broadcast(on_device[0], devices=[0, 1])
    assert copies[0] is on_device[0]  # the source device's share is the source, as on CUDA
    assert copies[1].device == torch.device(DEVICE, 1)
    assert_close(copies[1].cpu(), tensors[0])

    per_device = comm.broadcast_coalesced(on_device, [0, 1])
    assert per_device[0][1] is on_device[1]
    for tensor, copy_ in zip(tensors, per_device[1]):
        assert copy_.device == torch.device(DEVICE, 1)
        assert_close(copy_.cpu(), tensor)
    with pytest.raises(RuntimeError, match="must appear as the first on devices list"):
        comm.broadcast_coalesced(on_device, [1, 0])

    out = [torch.empty(3, 2, device=f"{DEVICE}:{i}") for i in (0, 1)]
    comm.broadcast(on_device[0], out=out)
    for destination in out:
        assert_close(destination.cpu(), tensors[0])
    with pytest.raises(RuntimeError, match="same shape as the source tensor"):
        comm.broadcast(on_device[0], out=[torch.empty(2, 3, device=DEVICE)])


def test_scatter_and_gather_round_trip_along_a_dimension():
    source = torch.randn(4, 5)
    chunks = comm.scatter(source.to(DEVICE), devices=[0, 1], chunk_sizes=[2, 3], dim=1)
    assert [c.device.index for c in chunks] == [0, 1]
    assert_close(chunks[0].cpu(), source[:, :2])
    assert_close(chunks[1].cpu(), source[:, 2:])
    streams = [torch.Stream(torch.device(DEVICE, i)) for i in (0, 1)]
    from_cpu = comm.scatter(source, devices=[0, 1], dim=0, streams=streams)
    for stream in streams:
        stream.synchronize()
    assert_close(torch.cat([c.cpu() for c in from_cpu]), source)

    assert_close(comm.gather(chunks, dim=1, destination=1).cpu(), source)
    assert comm.gather(chunks, dim=1, destination="cpu").device.type == "cpu"
    out = torch.empty(4, 5, device=DEVICE)
    assert comm.gather(chunks, dim=1, out=out) is out
    assert_close(out.cpu(), source)
    with pytest.raises(RuntimeError, match="has invalid shape"):
        comm.gather([chunks[0], chunks[1].t()], dim=1)
    with pytest.raises(RuntimeError, match="at least one tensor"):
        comm.gather([], dim=0, destination=0)
    outs = [torch.empty(1, 5, device=f"{DEVICE}:0"), torch.empty(3, 5, device=f"{DEVICE}:1")]
    comm.scatter(source.to(DEVICE), out=outs)
    assert_close(torch.cat([o.cpu() for o in outs]), source)
