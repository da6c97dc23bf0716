"""CUDA's asynchronous semantics on vdev: work queued on a stream runs on the stream's
worker while the host goes on, and the host sees its results only after synchronizing.
`torch.vdev._sleep(ms)` (torch.cuda._sleep's counterpart) keeps a stream busy, so the
states "still queued" and "complete" are deterministic: work queued behind a 300 ms
kernel has not run when the host checks at once."""

import sys
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
    nonzero = target.nonzero()  # its output size depends on data: the calling thread
    assert torch.vdev.current_stream().query()
    assert nonzero.shape == (N, 1)


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
        lambda: torch.zeros(1, device="vdev").nonzero(),  # an op run on the calling thread
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


# Ops launched on the stream: the host returns once they are queued.

READS = [
    lambda t: t[0].item(),
    lambda t: t.cpu()[0].item(),
    lambda t: t.tolist()[0],
    lambda t: (torch.vdev.synchronize(), t.cpu()[0].item())[1],
    lambda t: (torch.vdev.current_stream().synchronize(), t.cpu()[0].item())[1],
    lambda t: (torch.vdev.current_stream().record_event().synchronize(), t.cpu()[0].item())[1],
]
READ_IDS = ["item", "cpu", "tolist", "device_synchronize", "stream_synchronize", "event_synchronize"]


@pytest.mark.parametrize("read", READS, ids=READ_IDS)
@pytest.mark.parametrize(
    "op",
    [
        lambda x: x + 1,
        lambda x: torch.mm(x.view(64, 64), x.view(64, 64)).flatten() / 64 + 1,
        lambda x: torch.nn.functional.gelu(x).mul(2).sub_(torch.nn.functional.gelu(x)) - torch.nn.functional.gelu(x) + 2,
        lambda x: torch.logaddexp(x, x).sub(x).add(2 - 0.6931472),  # through the fallback
        lambda x: torch.add(x, 1, out=torch.empty(0, device="vdev")),  # out= resized on the host
        lambda x: x.clone().add_(1),
    ],
    ids=["add", "mm", "in_place_chain", "fallback", "out", "in_place"],
)
def test_launched_ops_return_at_once_and_reads_wait_for_them(op, read):
    x = _device_ones()
    op(x)  # a first launch with new dtypes waits for its kernel (csrc/aten/SupportedDtypes.h)
    torch.vdev.synchronize()
    stream = torch.vdev.current_stream()
    torch.vdev._sleep(BUSY_MS)
    result = op(x)
    assert result.shape == (N,)  # sized on the host
    assert not stream.query()  # the op is queued behind the sleep
    assert read(result) == pytest.approx(2.0, abs=1e-5)


def test_query_is_false_while_a_launched_add_is_pending():
    x = _device_ones()
    x + x  # dtypes seen before, so the launch below does not wait for its kernel
    stream = torch.vdev.current_stream()
    torch.vdev._sleep(BUSY_MS)
    y = x + x
    assert not stream.query()
    stream.synchronize()
    assert stream.query()
    assert y.sum().item() == 2 * N


def test_views_do_not_wait_for_queued_work():
    x = torch.arange(N, dtype=torch.float32, device="vdev")
    stream = torch.vdev.current_stream()
    torch.vdev._sleep(BUSY_MS)
    views = [x[1:], x.view(64, 64).t(), x.unfold(0, 2, 2), x.view(64, 64).diagonal(), torch.view_as_complex(x.view(-1, 2))]
    assert not stream.query()  # none of them waited for the sleep
    assert views[1][3, 2].item() == 2 * 64 + 3


def test_nested_views_made_while_work_is_queued_keep_their_metadata():
    # A view of a nested tensor runs on the calling thread without waiting, and writes
    # new sizes and strides at once. Blocks freed while their kernels are still queued
    # must not hold them: those kernels write the blocks later.
    components = [torch.randn(2, 3), torch.randn(4, 3)]
    nested = torch.nested.nested_tensor([component.to("vdev") for component in components])
    x = torch.arange(64, dtype=torch.float32, device="vdev")
    torch.vdev._sleep(BUSY_MS)
    queued = [x * i for i in range(8)]  # small outputs, freed below while queued
    del queued
    transposed = nested.transpose(1, 2)
    assert not torch.vdev.current_stream().query()  # the view did not wait
    torch.vdev.synchronize()
    assert transposed._nested_tensor_size().tolist() == [[3, 2], [3, 4]]
    assert transposed._nested_tensor_strides().tolist() == [[1, 3], [1, 3]]
    for got, component in zip(transposed.unbind(), components):
        assert_close(got.cpu(), component.t())


def test_a_calling_thread_kernel_takes_a_block_another_thread_freed_once_its_work_ran():
    # The kernel waited for its stream before it started; another thread then queues work
    # on that stream and frees its output while the work is queued. The kernel's output
    # may take that block: it is written only once the queued work wrote it.
    x = torch.arange(N, dtype=torch.float32, device="vdev")
    torch.vdev.synchronize()

    def queue_and_free():
        torch.vdev._sleep(BUSY_MS)  # the default stream, as the kernel's
        queued = x * 2
        del queued

    def sin(cpu_x):
        thread = threading.Thread(target=queue_and_free)
        thread.start()
        thread.join()
        return torch.sin(cpu_x)  # its output comes from the device's memory

    with torch_vdev.kernels({torch.ops.aten.sin.default: sin}):
        result = x.sin()
    assert_close(result.cpu(), torch.arange(N, dtype=torch.float32).sin())


@pytest.mark.parametrize(
    "grow",
    [
        lambda y: y.resize_(2 * N),  # ATen copies the storage into a larger block
        lambda y: y.set_(y.untyped_storage().resize_(8 * N)),  # the same for the storage
        lambda y: torch._lazy_clone(y).add_(0),  # the write materializes the clone's copy
    ],
    ids=["resize_", "storage_resize_", "lazy_clone"],
)
def test_storage_copies_on_the_host_wait_for_queued_work(grow):
    x = _device_ones()
    torch.vdev._sleep(BUSY_MS)
    y = x * 7.25  # queued: not yet written when the copy is made
    copied = grow(y)
    assert_close(copied[:N].cpu(), torch.full((N,), 7.25))


def test_shape_errors_of_launched_ops_raise_at_the_call():
    a, b = torch.ones(3, device="vdev"), torch.ones(4, device="vdev")
    torch.vdev._sleep(BUSY_MS)
    with pytest.raises(RuntimeError, match="must match the size"):
        a + b
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch.mm(torch.ones(2, 3, device="vdev"), torch.ones(2, 3, device="vdev"))
    torch.vdev.synchronize()


def test_an_index_error_in_a_launched_kernel_surfaces_at_the_next_synchronization():
    source = torch.arange(4.0, device="vdev")
    index = torch.tensor([1, 7], device="vdev")
    torch.vdev._sleep(BUSY_MS)
    gathered = torch.gather(source, 0, index)  # the CPU kernel checks the values
    assert gathered.shape == (2,)
    with pytest.raises(RuntimeError, match=r"aten::gather: index 7 is out of bounds for dimension 0 with size 4"):
        torch.vdev.synchronize()
    torch.vdev.synchronize()  # reported once; the device stays usable
    assert torch.gather(source, 0, index.clamp(max=3)).tolist() == [1.0, 3.0]


def _read_on_side_stream_after_free(record):
    """x is read by a kernel on a side stream that is still busy when the host frees
    x and allocates (on the default stream) a tensor of the same size, which fills at
    once: without record_stream the side kernel then reads the new tensor's values."""
    x = torch.full((N,), 1.0, device="vdev")
    side = torch.vdev.Stream()
    side.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(side):
        torch.vdev._sleep(BUSY_MS)
        doubled = x * 2
    if record:
        x.record_stream(side)
    del x
    reused = torch.full((N,), 7.0, device="vdev")
    side.synchronize()
    torch.vdev.synchronize()
    return doubled, reused


def test_memory_reused_on_another_stream_without_record_stream_is_a_hazard():
    doubled, reused = _read_on_side_stream_after_free(record=False)
    assert doubled.sum().item() == 14 * N  # read the reallocated memory, as on CUDA
    assert reused.sum().item() == 7 * N


def test_record_stream_keeps_memory_until_the_recorded_stream_used_it():
    doubled, reused = _read_on_side_stream_after_free(record=True)
    assert doubled.sum().item() == 2 * N
    assert reused.sum().item() == 7 * N


def test_empty_cache_waits_for_queued_work():
    x = _device_ones()
    torch.vdev._sleep(BUSY_MS)
    y = x + 1
    del x
    torch.vdev.empty_cache()
    assert torch.vdev.current_stream().query()
    assert y.sum().item() == 2 * N


def test_synchronizing_op_stats_name_the_ops_run_on_the_calling_thread():
    x = torch.ones(8, device="vdev")
    torch.vdev.synchronize()
    torch_vdev.reset_synchronizing_op_stats()
    y = (x + 1) * 2
    y.nonzero()
    y.nonzero()
    y[0].item()
    stats = torch_vdev.synchronizing_op_stats()
    assert stats.get("aten::nonzero") == 2
    assert stats.get("aten::_local_scalar_dense") == 1
    assert "aten::add" not in stats and "aten::mul" not in stats  # launched
    torch_vdev.reset_synchronizing_op_stats()
    assert torch_vdev.synchronizing_op_stats() == {}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw_foreach"])
def test_training_steps_of_launched_ops_match_cpu(optimizer):
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)
    )
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)
    ).vdev()
    model.load_state_dict(model_cpu.state_dict())
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
        "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    }[optimizer]
    optimizers = [make(m.parameters()) for m in (model_cpu, model)]
    inputs, targets = torch.randn(16, 32), torch.randint(0, 10, (16,))
    losses = {}
    for device, m, opt in (("cpu", model_cpu, optimizers[0]), ("vdev", model, optimizers[1])):
        losses[device] = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(inputs.to(device)), targets.to(device))
            loss.backward()
            opt.step()
            losses[device].append(loss.detach())
    assert_close([l.cpu() for l in losses["vdev"]], losses["cpu"], rtol=0, atol=0)
    for vdev_param, cpu_param in zip(model.parameters(), model_cpu.parameters()):
        assert_close(vdev_param.detach().cpu(), cpu_param.detach(), rtol=0, atol=0)


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


@pytest.mark.parametrize(
    "size, stride, new_size",
    [((10,), (1,), (20,)), ((2, 3, 4), (1, 4, 12), (4, 3, 4)), ((2, 3), None, (3, 5))],
    ids=["1-d", "strided", "2-d"],
)
@pytest.mark.parametrize("deterministic", [False, True], ids=["plain", "deterministic fill"])
def test_resize_keeps_values_queued_kernels_wrote(size, stride, new_size, deterministic):
    # A growing storage's bytes are copied after the kernels queued to write them (on
    # the stream, as CUDA's resize), never read on the host before those ran.
    def resized(device):
        values = torch.arange(1, 1 + torch.Size(size).numel(), dtype=torch.float32).reshape(size)
        if device == "vdev":
            torch.vdev._sleep(BUSY_MS)
        tensor = torch.empty_strided(size, stride or values.stride(), device=device)
        old_numel = tensor.untyped_storage().nbytes() // 4
        tensor.as_strided((old_numel,), (1,)).zero_()  # the gaps between strided elements too
        tensor.copy_(values)
        torch.use_deterministic_algorithms(deterministic)
        try:
            tensor.resize_(new_size)
        finally:
            torch.use_deterministic_algorithms(False)
        storage = torch.tensor(tensor.untyped_storage(), dtype=torch.float32).cpu()
        return storage[:old_numel], storage[old_numel:]

    vdev_old, vdev_new = resized("vdev")
    cpu_old, cpu_new = resized("cpu")
    assert_close(vdev_old, cpu_old)
    assert vdev_old.count_nonzero() == torch.Size(size).numel()
    if deterministic:
        assert vdev_new.isnan().all() and cpu_new.isnan().all()


def test_untyped_storage_resize_keeps_values_queued_kernels_wrote():
    torch.vdev._sleep(BUSY_MS)
    tensor = torch.arange(6.0, device="vdev")
    tensor.untyped_storage().resize_(12 * 4)
    assert_close(torch.tensor(tensor.untyped_storage(), dtype=torch.float32)[:6].cpu(), torch.arange(6.0))


@pytest.mark.parametrize("op", ["_foreach_add_", "_foreach_zero_", "_fused_sgd_"])
def test_queued_list_ops_bump_versions_on_the_host_as_cpu(op):
    # Autograd checks saved tensors' versions on the host: a version bumped on the
    # stream would change under it at some later point (the optimizer step's bump
    # landing after the next forward saved the parameters).
    def versions(device):
        params = [torch.ones(8, device=device) for _ in range(2)]
        grads = [torch.ones(8, device=device) for _ in range(2)]
        if device == "vdev":
            torch.vdev._sleep(BUSY_MS)
        with torch.no_grad():
            if op == "_foreach_add_":
                torch._foreach_add_(params, grads, alpha=-0.1)
            elif op == "_foreach_zero_":
                torch._foreach_zero_(params)
            else:
                torch._fused_sgd_(
                    params, grads, [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                    nesterov=False, maximize=False, is_first_step=True,
                )
        at_the_call = [p._version for p in params + grads]
        torch.vdev.synchronize()
        return at_the_call, [p._version for p in params + grads]

    cpu_versions, _ = versions("cpu")
    at_the_call, after_sync = versions("vdev")
    assert at_the_call == cpu_versions
    assert after_sync == cpu_versions


def test_optimizer_step_leaves_the_next_backward_its_saved_versions():
    # The failure test_torch's test_grad_scaling_* met: SGD's foreach step bumped the
    # parameters' versions on the stream, after the next forward saved them.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).to("vdev")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    data = torch.randn(8, 8, device="vdev")
    for _ in range(3):
        optimizer.zero_grad()
        model(data).square().mean().backward()
        torch.vdev._sleep(BUSY_MS)
        optimizer.step()
        loss = model(data).square().mean()
        loss.backward()  # raised "modified by an inplace operation" before the fix


@pytest.mark.parametrize(
    "write",
    [
        lambda out: torch.linspace(1, 10, 10, out=out),
        lambda out: torch.logspace(1, 10, 10, out=out),
        lambda out: out.add_(1),
        lambda out: torch.mul(torch.ones(10, device=out.device), 2, out=out),
    ],
    ids=["linspace", "logspace", "in-place", "out="],
)
def test_writing_overlapping_elements_raises_at_the_call(write):
    # CUDA checks a written tensor's internal overlap on the host; linspace's meta
    # kernel does not, so the launched kernel raised at the next synchronization.
    def error(device):
        expanded = torch.rand(1, device=device).expand(10)
        if device == "vdev":
            torch.vdev._sleep(BUSY_MS)
        with pytest.raises(RuntimeError) as raised:
            write(expanded)
        return str(raised.value)

    assert error("vdev") == error("cpu")
    torch.vdev.synchronize()  # nothing deferred


@pytest.mark.parametrize(
    "update",
    [
        lambda w: w.add_(1),
        lambda w: torch._foreach_add_([w], 1),
        lambda w: torch.add(w, 1, out=w),
    ],
    ids=["in_place", "foreach", "out"],
)
def test_a_launched_write_bumps_the_version_once_at_the_launch(update):
    # The host bumps a written tensor's version when it launches the op; the kernel
    # running later must not bump it again, or autograd would find a tensor it saved
    # after the launch changed (a training step without a sync between steps).
    weight = torch.ones(4, 4, device="vdev", requires_grad=True)
    torch.vdev._sleep(BUSY_MS)
    with torch.no_grad():
        update(weight)  # queued behind the sleep
    version = weight._version
    loss = (torch.ones(2, 4, device="vdev") @ weight.t()).sum()  # saves weight
    torch.vdev.synchronize()  # the update runs
    assert weight._version == version
    loss.backward()
    assert torch.equal(weight.grad.cpu(), torch.full((4, 4), 2.0))


def test_launched_kernels_leave_version_counters_to_the_host():
    # index_add's out= kernel copies `self` into the output with a nested copy_: run
    # later on the stream, that must not bump the output's version after autograd
    # saved it (the host counted the op's writes at the launch).
    base = torch.zeros(4, 3, device="vdev")
    source = torch.ones(2, 3, device="vdev")
    index = torch.tensor([0, 2], device="vdev")
    torch.vdev._sleep(BUSY_MS)
    added = torch.index_add(base, 0, index, source)
    written = torch.zeros(4, 3, device="vdev")
    written.add_(1)
    versions = (added._version, written._version)
    torch.vdev.synchronize()
    assert (added._version, written._version) == versions
    assert added.sum().item() == 6


def test_moe_training_step_with_a_lagging_stream_matches_cpu():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from models import moe_step

    device_step, cpu_step = moe_step("vdev", tokens=64, hidden=16), moe_step("cpu", tokens=64, hidden=16)
    for _ in range(4):
        torch.vdev._sleep(20)  # the host runs ahead of the stream
        device_loss, cpu_loss = device_step(), cpu_step()
    assert_close(device_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-6)


def test_meta_kernel_table_is_current():
    import pathlib
    import subprocess
    import sys

    generator = pathlib.Path(__file__).resolve().parents[1] / "csrc" / "aten" / "generate_meta_kernels.py"
    result = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, "csrc/aten/MetaKernels.inc is stale: run " + str(generator)


def test_a_fork_waits_for_queued_kernels():
    # A fork copies only the forking thread: a worker in the middle of a kernel could
    # hold a lock or a one-time initialisation that the child would wait for forever.
    import os
    import signal
    import time

    stream = torch.vdev.current_stream()
    torch.vdev._sleep(BUSY_MS)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if torch.arange(4.0).sum().item() == 6 else 1)
    assert stream.query()  # the parent forked once the queued work was done
    deadline = time.monotonic() + 60
    while (finished := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if finished[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(finished[1]) == 0


def _draw_then_sleep():
    torch.rand(N, device="vdev")  # the default generator now waits for this device
    torch.vdev._sleep(BUSY_MS)


@pytest.mark.parametrize(
    "queue, wait",
    [
        (lambda: torch.vdev._sleep(BUSY_MS), lambda: torch.vdev.synchronize()),
        (lambda: torch.vdev._sleep(BUSY_MS), lambda: torch.vdev.current_stream().synchronize()),
        (lambda: torch.vdev._sleep(BUSY_MS), lambda: _recorded_event().synchronize()),
        (lambda: torch.vdev._sleep(BUSY_MS), lambda: torch.ones(1, device="vdev").item()),
        (lambda: torch.vdev._sleep(BUSY_MS), lambda: torch.ones(1, device="vdev").cpu()),
        (_draw_then_sleep, lambda: torch.vdev.get_rng_state()),
        (_draw_then_sleep, lambda: torch.vdev.manual_seed(0)),
    ],
    ids=[
        "torch.vdev.synchronize", "Stream.synchronize",
        "Event.synchronize", "item", "cpu", "get_rng_state", "manual_seed",
    ],
)
def test_a_host_thread_waiting_for_a_stream_lets_other_python_threads_run(queue, wait):
    # Work queued on a stream may need a thread that needs the GIL (gloo's threads run
    # Python future callbacks), so a waiting host thread must not hold it. The main
    # thread gives the GIL up only when a call releases it (the switch interval is
    # longer than the test); the counting thread releases it between increments.
    counted = 0
    stop = threading.Event()

    def count():
        nonlocal counted
        while not stop.wait(0.001):
            counted += 1

    switch_interval = sys.getswitchinterval()
    counter = threading.Thread(target=count)
    counter.start()
    sys.setswitchinterval(60.0)
    try:
        queue()
        before = counted
        wait()
        during = counted - before
    finally:
        sys.setswitchinterval(switch_interval)
        stop.set()
        counter.join()
    assert during > 0


def _recorded_event():
    event = torch.vdev.Event()
    event.record()
    return event


# The first launch of an op with arguments of dtypes not yet seen waits for its kernel
# (csrc/aten/SupportedDtypes.h), so a dtype the CPU kernel does not support raises at
# the call, as on CUDA. Each test uses dtypes no other test of this process launches
# the op with.
def _cpu_error(call, *tensors):
    with pytest.raises(NotImplementedError) as error:
        call(*(tensor.cpu() for tensor in tensors))
    return str(error.value)


def test_an_unsupported_dtype_raises_at_the_call_and_the_device_stays_usable():
    flags = torch.tensor([True, False, True], device="vdev")
    cpu_message = _cpu_error(torch.gcd, flags, flags)
    assert cpu_message == "\"gcd_cpu\" not implemented for 'Bool'"
    for _ in range(2):  # every call raises, not only the first
        torch.vdev._sleep(BUSY_MS)  # the error does not wait for the next synchronization
        with pytest.raises(NotImplementedError, match="aten::gcd") as error:
            torch.gcd(flags, flags)
        assert cpu_message in str(error.value)
    torch.vdev.synchronize()  # the stream never saw the error
    values = torch.tensor([12, 18, 7], dtype=torch.int16)
    assert torch.equal(torch.gcd(values.to("vdev"), values.flip(0).to("vdev")).cpu(), torch.gcd(values, values.flip(0)))


def test_a_run_on_empty_tensors_does_not_prove_a_dtype_supported():
    # CPU's addmm_impl_cpu_ returns before its dtype dispatch when there is nothing to compute.
    empty, flags = torch.zeros(0, 3, dtype=torch.bool), torch.ones(3, 2, dtype=torch.bool)
    assert torch.mm(empty, flags).shape == (0, 2)
    cpu_message = _cpu_error(torch.mm, flags.t(), flags)
    assert torch.mm(empty.to("vdev"), flags.to("vdev")).shape == (0, 2)
    with pytest.raises(NotImplementedError, match="aten::mm") as error:
        torch.mm(flags.t().to("vdev"), flags.to("vdev"))
    assert cpu_message in str(error.value)
    torch.vdev.synchronize()  # the stream never saw the error


def test_an_unsupported_dtype_leaves_an_earlier_kernel_failure_to_the_stream():
    flags = torch.tensor([True], device="vdev")
    torch_vdev._C._fail_in_kernel("index 9 is out of bounds")
    with pytest.raises(NotImplementedError, match="lcm_cpu"):
        torch.lcm(flags, flags)
    with pytest.raises(RuntimeError, match="vdev::_fail_in_kernel: index 9 is out of bounds"):
        torch.vdev.synchronize()
    torch.vdev.synchronize()


def test_an_index_error_at_the_first_launch_of_a_signature_surfaces_at_the_next_synchronization():
    source = torch.arange(4, dtype=torch.int16, device="vdev")
    index = torch.tensor([[1, 7]], device="vdev")
    scattered = torch.zeros(1, 2, dtype=torch.int16, device="vdev").scatter_add(1, index, source[None, :2])
    assert scattered.shape == (1, 2)
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 1 with size 2"):
        torch.vdev.synchronize()
    torch.vdev.synchronize()  # reported once


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
def test_a_supported_fresh_signature_runs_and_then_queues(dtype):
    a = torch.tensor([[3, -4], [5, 7]], dtype=dtype)
    b = torch.tensor([[2, 2], [-3, 4]], dtype=dtype)
    for _ in range(2):
        assert torch.equal(torch.remainder(a.to("vdev"), b.to("vdev")).cpu(), torch.remainder(a, b))
    ones, threes = torch.ones(5, 2, dtype=dtype, device="vdev"), torch.full((5, 2), 3, dtype=dtype, device="vdev")
    torch.vdev._sleep(BUSY_MS)
    result = torch.remainder(ones, threes)  # other sizes, known dtypes: queued without waiting
    assert not torch.vdev.current_stream().query()
    assert torch.equal(result.cpu(), torch.ones(5, 2, dtype=dtype))


def test_an_unsupported_dtype_raises_at_the_launch_with_launch_blocking(run_in_subprocess):
    script = """
import torch, torch_vdev
flags = torch.tensor([True], device='vdev')
for _ in range(2):
    try:
        torch.gcd(flags, flags)
    except NotImplementedError as error:
        print('raised:', error)
torch.vdev.synchronize()
print('usable', torch.ones(2, device='vdev').sum().item())
"""
    result = run_in_subprocess(script, env={"VDEV_LAUNCH_BLOCKING": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("raised: aten::gcd: \"gcd_cpu\" not implemented for 'Bool'") == 2
    assert "usable 2.0" in result.stdout


def test_an_unsupported_dtype_of_a_queued_foreach_op_raises_at_the_call():
    cpu_flags = [torch.tensor([True, False])]
    cpu_message = _cpu_error(lambda flag: torch._foreach_lerp_([flag], [flag], 0.5), *cpu_flags)
    flags = [cpu_flags[0].to("vdev")]
    for _ in range(2):
        with pytest.raises(NotImplementedError, match="aten::_foreach_lerp_") as error:
            torch._foreach_lerp_(flags, flags, 0.5)
        assert cpu_message in str(error.value)
    torch.vdev.synchronize()
    halves = [torch.tensor([1.0, 3.0], dtype=torch.float64)]
    targets = [torch.tensor([3.0, -1.0], dtype=torch.float64)]
    on_device = [halves[0].to("vdev")]
    torch._foreach_lerp_(on_device, [targets[0].to("vdev")], 0.25)
    torch._foreach_lerp_(halves, targets, 0.25)
    assert torch.equal(on_device[0].cpu(), halves[0])


def _recycling_program(device):
    """Kernels in a row whose CPU aliases a stream's worker re-points from earlier
    kernels' (LaunchAliases::recycle): dtypes, sizes, strides, offsets and math bits
    change from one kernel to the next, and tensors share storages."""
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=generator).to(device)
    results = []
    view = base[1:, 2:]
    results.append(view + base[:-1, :-2])
    results.append(base.t() * 2)
    doubled = base.double()
    results.append(torch.logaddexp(doubled, doubled.flip(0)))
    counts = torch.arange(48, device=device).view(6, 8)
    results.append(counts[::2] * 3 + counts[1::2])
    results.append(base > 0)
    view.add_(base[:-1, :-2])  # in place, two views of one storage
    results.append(base.clone())
    complex_values = torch.randn(4, dtype=torch.complex64, generator=generator).to(device)
    results.append(complex_values.conj() * 2)
    destination = torch.empty(5, 6, device=device)
    destination.copy_(base[1:, 2:])
    results.append(destination)
    destination[1:].copy_(counts[:4, :6])
    results.append(destination)
    return [result.cpu() for result in results]


def test_kernels_on_recycled_aliases_match_cpu():
    expected = _recycling_program("cpu")
    for _ in range(3):  # later rounds run on aliases recycled by earlier ones
        for got, want in zip(_recycling_program("vdev"), expected):
            assert_close(got, want, rtol=0, atol=0)
