"""CUDA's asynchronous semantics on vdev: work queued on a stream runs on the stream's
worker while the host goes on, and the host sees its results only after synchronizing.
`torch.vdev._sleep(ms)` (torch.cuda._sleep's counterpart) keeps a stream busy, so the
states "still queued" and "complete" are deterministic: work queued behind a 300 ms
kernel has not run when the host checks at once."""

import threading

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

BUSY_MS = 300
N = 1 << 12


def _pinned_zeros():
    return torch.zeros(N, pin_memory=True)


def _device_ones(device="vdev"):
    return torch.ones(N, device=device)


def test_query_is_false_while_work_is_queued():
    stream = torch.vdev.current_stream()
    torch.vdev._sleep(BUSY_MS)
    assert not stream.query()
    assert not torch.vdev.default_stream().query()
    stream.synchronize()
    assert stream.query()


@pytest.mark.parametrize(
    "synchronize",
    [
        lambda: torch.vdev.current_stream().synchronize(),
        lambda: torch.vdev.synchronize(),
        lambda: torch.accelerator.synchronize(),
        lambda: torch.vdev.current_stream().record_event().synchronize(),
    ],
    ids=["stream", "device", "accelerator", "event"],
)
def test_device_to_pinned_copy_is_visible_after_synchronizing(synchronize):
    source = _device_ones()
    destination = _pinned_zeros()
    torch.vdev._sleep(BUSY_MS)
    destination.copy_(source, non_blocking=True)
    # Reading pinned host memory does not synchronize: the copy has not run yet.
    assert destination.sum().item() == 0
    synchronize()
    assert destination.sum().item() == N


def test_pinned_to_device_copy_reads_its_source_when_the_stream_reaches_it():
    source = torch.ones(N).pin_memory()
    destination = torch.zeros(N, device="vdev")
    torch.vdev._sleep(BUSY_MS)
    destination.copy_(source, non_blocking=True)
    source.fill_(2)  # before the copy runs: CUDA's rule is to wait before reusing the source
    assert_close(destination.cpu(), torch.full((N,), 2.0))


def test_copies_from_pageable_memory_are_complete_when_they_return():
    source = torch.ones(N)
    destination = torch.zeros(N, device="vdev")
    torch.vdev._sleep(BUSY_MS)
    destination.copy_(source, non_blocking=True)  # pageable: staged now, as on CUDA
    source.fill_(2)
    assert_close(destination.cpu(), torch.ones(N))


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t[0].item(),
        lambda t: t.cpu()[0].item(),
        lambda t: t.tolist()[0],
        lambda t: t.sum().item() / N,
        lambda t: float(t[-1]),
    ],
    ids=["item", "cpu", "tolist", "op_then_item", "float"],
)
def test_reading_values_waits_for_queued_work(read):
    target = torch.zeros(N, device="vdev")
    ones = _device_ones()
    torch.vdev._sleep(BUSY_MS)
    target.copy_(ones)  # a copy between vdev tensors is queued
    assert read(target) == 1


def test_ops_on_the_calling_thread_wait_for_their_stream():
    target = torch.zeros(N, device="vdev")
    ones = _device_ones()
    torch.vdev._sleep(BUSY_MS)
    target.copy_(ones)
    doubled = target * 2  # runs on the calling thread after the queued copy
    assert doubled.sum().item() == 2 * N


def test_elapsed_time_measures_execution_on_the_stream():
    start = torch.vdev.Event(enable_timing=True)
    end = torch.vdev.Event(enable_timing=True)
    start.record()
    torch.vdev._sleep(BUSY_MS)
    end.record()
    with pytest.raises(RuntimeError, match="must be complete"):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) >= BUSY_MS * 0.95


def test_event_query_follows_the_stream():
    event = torch.vdev.Event()
    torch.vdev._sleep(BUSY_MS)
    event.record()
    assert not event.query()
    event.synchronize()
    assert event.query()


def test_wait_stream_orders_work_between_streams():
    produced = torch.zeros(N, device="vdev")
    ones = _device_ones()  # made first: ops on the calling thread wait for their stream
    side = torch.vdev.Stream()
    with torch.vdev.stream(side):
        torch.vdev._sleep(BUSY_MS)
        produced.copy_(ones)
    unordered = _pinned_zeros()
    unordered.copy_(produced, non_blocking=True)  # the current stream does not wait
    ordered = _pinned_zeros()
    torch.vdev.current_stream().wait_stream(side)
    ordered.copy_(produced, non_blocking=True)
    torch.vdev.synchronize()
    assert unordered.sum().item() == 0  # the missing wait_stream shows up
    assert ordered.sum().item() == N


def test_wait_event_orders_work_between_streams():
    produced = torch.zeros(N, device="vdev")
    ones = _device_ones()
    side = torch.vdev.Stream()
    with torch.vdev.stream(side):
        torch.vdev._sleep(BUSY_MS)
        produced.copy_(ones)
        done = side.record_event()
    consumer = torch.vdev.Stream()
    consumer.wait_event(done)
    seen = _pinned_zeros()
    with torch.vdev.stream(consumer):
        seen.copy_(produced, non_blocking=True)
    assert not consumer.query()
    consumer.synchronize()
    assert seen.sum().item() == N


def test_a_failing_kernel_surfaces_at_the_next_synchronization():
    torch_vdev._C._fail_in_kernel("index 7 is out of bounds for dimension 0 with size 4")
    with pytest.raises(RuntimeError, match=r"vdev::_fail_in_kernel: index 7 is out of bounds"):
        torch.vdev.synchronize()
    # Reported once; the device stays usable.
    torch.vdev.synchronize()
    assert torch.ones(3, device="vdev").sum().item() == 3


@pytest.mark.parametrize(
    "synchronize",
    [
        lambda: torch.zeros(1, device="vdev").item(),
        lambda: torch.zeros(1, device="vdev").cpu(),
        lambda: torch.vdev.current_stream().synchronize(),
        lambda: torch.vdev.current_stream().record_event().synchronize(),
        lambda: torch.zeros(1, device="vdev") + 1,  # an op run on the calling thread
    ],
    ids=["item", "cpu", "stream", "event", "op"],
)
def test_every_synchronizing_call_reports_the_failure(synchronize):
    torch_vdev._C._fail_in_kernel("bad index")
    with pytest.raises(RuntimeError, match="vdev::_fail_in_kernel: bad index"):
        synchronize()
    torch.vdev.synchronize()


def test_launch_blocking_makes_every_launch_synchronous(run_in_subprocess):
    script = """
import torch, torch_vdev
stream = torch.vdev.current_stream()
torch.vdev._sleep(100)
assert stream.query()
destination = torch.zeros(8, pin_memory=True)
destination.copy_(torch.ones(8, device='vdev'), non_blocking=True)
assert destination.sum().item() == 8
try:
    torch_vdev._C._fail_in_kernel('index 3 is out of bounds')
except RuntimeError as error:
    print('raised at launch:', error)
torch.vdev.synchronize()
print('usable', torch.ones(2, device='vdev').sum().item())
"""
    result = run_in_subprocess(script, env={"VDEV_LAUNCH_BLOCKING": "1"})
    assert result.returncode == 0, result.stderr
    assert "raised at launch: vdev::_fail_in_kernel: index 3 is out of bounds" in result.stdout
    assert "usable 2.0" in result.stdout


def test_host_threads_queue_work_on_their_own_streams():
    errors = []

    def work(index):
        try:
            stream = torch.vdev.Stream()
            with torch.vdev.stream(stream):
                for step in range(20):
                    target = torch.zeros(256, device="vdev")
                    target.copy_(torch.full((256,), float(index * 100 + step), device="vdev"))
                    out = torch.empty(256, pin_memory=True)
                    out.copy_(target, non_blocking=True)
                    stream.synchronize()
                    assert out.eq(index * 100 + step).all()
        except Exception as error:  # reported to the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_memory_freed_while_work_is_queued_is_safe_on_the_same_stream():
    source = _device_ones()
    fives = torch.full((N,), 5.0, device="vdev")
    destination = _pinned_zeros()
    torch.vdev._sleep(BUSY_MS)
    destination.copy_(source, non_blocking=True)
    del source  # freed on the host while the copy that reads it is queued
    reused = torch.empty(N, device="vdev")  # may take its block: its work comes later
    reused.copy_(fives)
    torch.vdev.synchronize()
    assert destination.sum().item() == N
    assert reused.sum().item() == 5 * N


@pytest.mark.parametrize("kind", ["foreach", "fused"])
def test_optimizer_steps_match_cpu(kind):
    torch.manual_seed(0)
    model_cpu = torch.nn.Linear(16, 4)
    model = torch.nn.Linear(16, 4).vdev()
    model.load_state_dict(model_cpu.state_dict())
    options = {"foreach": True} if kind == "foreach" else {"fused": True}
    optimizers = [torch.optim.AdamW(m.parameters(), lr=0.1, **options) for m in (model_cpu, model)]
    inputs = torch.randn(8, 16)
    for step in range(3):
        for m, optimizer, x in zip((model_cpu, model), optimizers, (inputs, inputs.vdev())):
            optimizer.zero_grad()
            m(x).square().sum().backward()
            optimizer.step()
    torch.vdev.synchronize()
    for vdev_param, cpu_param in zip(model.parameters(), model_cpu.parameters()):
        assert_close(vdev_param.detach().cpu(), cpu_param.detach(), rtol=0, atol=0)


def test_a_fused_optimizer_step_is_queued():
    model = torch.nn.Linear(16, 4).vdev()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    model(torch.randn(8, 16, device="vdev")).sum().backward()
    optimizer.step()  # creates the state on the calling thread
    expected = model.weight.detach().clone()
    optimizer.step()
    torch.vdev.synchronize()
    weight = _pinned_zeros()[: model.weight.numel()].view_as(model.weight)
    torch.vdev._sleep(BUSY_MS)
    optimizer.step()  # queued behind the sleep: the host returns at once
    weight.copy_(model.weight.detach(), non_blocking=True)
    assert not torch.vdev.current_stream().query()
    assert weight.abs().sum().item() == 0
    torch.vdev.synchronize()
    assert not torch.equal(weight, expected.cpu())  # the queued step ran


def test_in_place_foreach_with_a_cpu_scalar_runs_on_the_calling_thread():
    tensors = [torch.ones(3, device="vdev"), torch.ones(2, device="vdev")]
    scale = torch.tensor(2.0)
    torch.vdev._sleep(BUSY_MS)
    torch._foreach_mul_(tensors, scale)  # reads the host's scalar now, after the stream
    assert torch.vdev.current_stream().query()
    scale.fill_(5.0)
    assert_close([t.cpu() for t in tensors], [torch.full((3,), 2.0), torch.full((2,), 2.0)])


def test_a_failing_queued_foreach_names_its_op():
    tensors = [torch.ones(3, device="vdev")]
    others = [torch.ones(4, device="vdev")]  # a size mismatch the CPU kernel refuses
    torch._foreach_add_(tensors, others)
    with pytest.raises(RuntimeError, match="aten::_foreach_add_"):
        torch.vdev.synchronize()
    torch.vdev.synchronize()


@pytest.mark.parametrize(
    "source_shape", [(3, 2), (3,)], ids=["larger", "mismatched"]
)
def test_a_queued_copy_refuses_a_source_that_does_not_broadcast_at_the_call(source_shape):
    # CUDA checks shapes on the host before it launches; the queued copy does too, so
    # the error is raised by copy_ itself rather than by a later synchronization.
    destination = torch.zeros(2, device="vdev")
    source = torch.randn(source_shape, device="vdev")
    with pytest.raises(RuntimeError) as on_vdev:
        destination.copy_(source)
    with pytest.raises(RuntimeError) as on_cpu:
        destination.cpu().copy_(source.cpu())
    assert str(on_vdev.value) == str(on_cpu.value)
    torch.vdev.synchronize()  # nothing deferred
    assert destination.sum().item() == 0
    destination.copy_(torch.ones(1, device="vdev"))  # broadcasting still works
    assert destination.sum().item() == 2
