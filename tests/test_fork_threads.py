"""Fork safety (a child forked after the parent initialised vdev cannot use it, as with
CUDA; spawn works) and thread safety (concurrent mixed work on two devices)."""

import gc
import textwrap
import threading

import torch
from torch.testing import assert_close

FORK_ERROR = "Cannot re-initialize vdev in forked subprocess"

CHILD_ENTRY_POINTS = """
import os, sys, torch
parent_tensor = torch.ones(4, device='vdev')
stream = torch.vdev.Stream()
ENTRY_POINTS = {
    'tensor_creation': lambda: torch.ones(2, device='vdev'),
    'empty_tensor': lambda: torch.empty(0, device='vdev:1'),
    'to_device': lambda: torch.arange(3).to('vdev'),
    'op': lambda: parent_tensor + 1,
    'in_place_op': lambda: parent_tensor.add_(1),
    'fill': lambda: parent_tensor.fill_(2),
    'item': lambda: parent_tensor[0].item(),
    'to_cpu': lambda: parent_tensor.cpu(),
    'current_device': torch.vdev.current_device,
    'set_device': lambda: torch.vdev.set_device(1),
    'device_context': lambda: torch.vdev.device(1).__enter__(),
    'synchronize': torch.vdev.synchronize,
    'new_stream': torch.vdev.Stream,
    'current_stream': torch.vdev.current_stream,
    'stream_sync': stream.synchronize,
    'event_record': lambda: torch.vdev.Event().record(stream),
    'record_stream': lambda: parent_tensor.record_stream(stream),
    'memory_allocated': torch.vdev.memory_allocated,
    'init': torch.vdev.init,
    'accelerator_index': torch.accelerator.current_device_index,
}
pid = os.fork()
if pid == 0:
    lines = [f'bad_fork {torch.vdev._is_in_bad_fork()} initialized {torch.vdev.is_initialized()}']
    for name, entry in ENTRY_POINTS.items():
        try:
            entry()
            lines.append(f'{name}: no error')
        except RuntimeError as error:
            lines.append(f'{name}: {str(error).splitlines()[0]}')
    torch.manual_seed(0)  # DataLoader workers seed every device: must not raise
    lines.append(f'still usable: {torch.vdev.is_available()} {torch.vdev.device_count()} {torch.randn(2).shape[0]}')
    print('\\n'.join(lines), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print('parent still works', (parent_tensor * 2).sum().item())
"""


def test_forked_child_of_an_initialised_parent_cannot_use_vdev(run_in_subprocess):
    result = run_in_subprocess(CHILD_ENTRY_POINTS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "bad_fork True initialized False"
    entries = dict(line.split(": ", 1) for line in lines[1:-2])
    assert len(entries) == 20
    for name, message in entries.items():
        assert message.startswith(FORK_ERROR) and "'spawn' start method" in message, (name, message)
    assert lines[-2] == "still usable: True 2 2"
    assert lines[-1] == "parent still works 8.0"


def test_python_tensor_creation_in_the_child_goes_through_lazy_init(run_in_subprocess):
    # torch caches "vdev is initialised" per process; the fork handler must reset it in
    # the child so that creating a tensor from Python calls torch.vdev._lazy_init again.
    script = """
import os, torch
torch.ones(1, device='vdev')
calls = []
def recording_lazy_init():
    calls.append(1)
    raise RuntimeError('lazy init called')
torch.vdev._lazy_init = recording_lazy_init
pid = os.fork()
if pid == 0:
    try:
        torch.zeros(2, device='vdev')
    except RuntimeError as error:
        print(error, len(calls), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
    result = run_in_subprocess(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "lazy init called 1"


def test_child_forked_before_initialisation_can_use_vdev(run_in_subprocess):
    script = """
import os, torch
assert not torch.vdev.is_initialized()
pid = os.fork()
if pid == 0:
    print((torch.arange(4.0, device='vdev:1') * 2).sum().item(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
    result = run_in_subprocess(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "12.0"


MULTIPROCESSING = """
import multiprocessing as mp
import sys
import torch


def work(queue):
    try:
        result = torch.arange(6.0, device='vdev:1').view(2, 3).sum(0).cpu().tolist()
        queue.put(('ok', result))
    except RuntimeError as error:
        queue.put(('error', str(error).splitlines()[0]))


if __name__ == '__main__':
    torch.ones(1, device='vdev')  # the parent initialises vdev
    context = mp.get_context(sys.argv[1])
    queue = context.Queue()
    process = context.Process(target=work, args=(queue,))
    process.start()
    print(*queue.get(timeout=60))
    process.join()
    print('exit', process.exitcode)
"""


def _run_multiprocessing(tmp_path, method):
    import subprocess
    import sys

    script = tmp_path / "multiprocessing_vdev.py"
    script.write_text(textwrap.dedent(MULTIPROCESSING))
    return subprocess.run(
        [sys.executable, str(script), method], capture_output=True, text=True, timeout=120
    )


def test_multiprocessing_fork_fails_clearly(tmp_path):
    result = _run_multiprocessing(tmp_path, "fork")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()
    assert first.startswith(f"error {FORK_ERROR}")
    assert second == "exit 0"


def test_multiprocessing_spawn_works(tmp_path):
    result = _run_multiprocessing(tmp_path, "spawn")
    assert result.returncode == 0, result.stderr
    expected = torch.arange(6.0).view(2, 3).sum(0).tolist()
    assert result.stdout.strip().splitlines() == [f"ok {expected}", "exit 0"]


# --- threads -----------------------------------------------------------------

THREADS = 8
OPS_PER_THREAD = 1000


def _mixed_ops(device, other_device, side_stream):
    """Named ops, each computing on vdev and on CPU from the same inputs."""
    index = torch.tensor([0, 2, 3])

    def elementwise(a, b, on):
        return ((a * 2 + b).sin() - b.exp() / 3).to(on)

    def matmul(a, b, on):
        return (a.to(on) @ b.to(on).t()).relu()

    def reductions(a, b, on):
        a = a.to(on)
        return torch.stack([a.sum(), a.mean(), a.amax(), a.std()])

    def views_in_place(a, b, on):
        result = a.to(on).clone()
        result[1:3].mul_(3)
        result.t()[0].add_(b.to(on)[:, 0])
        return result.t()

    def across_devices(a, b, on):
        if on == "cpu":
            return a * b
        return (a.to(on).to(other_device) * b.to(other_device)).to(on)

    def cat_and_index(a, b, on):
        return torch.cat([a.to(on), b.to(on)])[index]

    def fallback(a, b, on):
        return torch.special.i0e(a.to(on)) + torch.logaddexp(a.to(on), b.to(on))

    def item(a, b, on):
        return torch.tensor((a.to(on) * b.to(on)).sum().item())

    def side_stream_with_record(a, b, on):
        if on == "cpu":
            return a.cumsum(0)
        with torch.vdev.stream(side_stream):
            result = a.to(on).cumsum(0)
        # As on CUDA: the current stream reads the result only after the side stream made it.
        torch.vdev.current_stream().wait_stream(side_stream)
        result.record_stream(torch.vdev.current_stream())
        return result

    return [elementwise, matmul, reductions, views_in_place, across_devices, cat_and_index, fallback, item, side_stream_with_record]


def _worker(thread_index, failures, counts):
    device_index = thread_index % 2
    torch.vdev.set_device(device_index)  # the current device is per thread
    device = f"vdev:{device_index}"
    ops = _mixed_ops(device, f"vdev:{1 - device_index}", torch.vdev.Stream(device_index))
    if thread_index % 4 >= 2:
        torch.vdev.set_stream(torch.vdev.Stream(device_index, priority=-1))
    generator = torch.Generator().manual_seed(thread_index)
    try:
        for step in range(OPS_PER_THREAD):
            op = ops[(step + thread_index) % len(ops)]
            a = torch.randn(4, 5, dtype=torch.float64, generator=generator)
            b = torch.randn(4, 5, dtype=torch.float64, generator=generator)
            got = op(a, b, device)
            assert got.device.type == "vdev" or op.__name__ == "item"
            assert_close(got.cpu(), op(a, b, "cpu"), msg=lambda m: f"{op.__name__}: {m}")
            counts[thread_index] += 1
    except Exception as error:  # reported by the main thread
        failures.append((thread_index, repr(error)))


def test_threads_doing_mixed_work_on_two_devices():
    gc.collect()
    torch.vdev.synchronize(0)
    torch.vdev.synchronize(1)
    baseline = [torch.vdev.memory_stats(i) for i in range(2)]
    failures, counts = [], [0] * THREADS
    threads = [threading.Thread(target=_worker, args=(i, failures, counts)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert counts == [OPS_PER_THREAD] * THREADS
    gc.collect()
    for index in range(2):
        torch.vdev.synchronize(index)
        torch.empty(1, device=f"vdev:{index}")  # an allocation reclaims recorded blocks
        stats = torch.vdev.memory_stats(index)
        before = baseline[index]
        assert stats["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
        assert stats["active_bytes.all.current"] == before["active_bytes.all.current"]
        assert stats["allocation.all.current"] == before["allocation.all.current"]
        assert stats["allocation.all.allocated"] - before["allocation.all.allocated"] >= OPS_PER_THREAD * 4
        for key in ("allocation", "allocated_bytes", "active", "active_bytes", "segment", "reserved_bytes"):
            allocated = stats[f"{key}.all.allocated"] - before[f"{key}.all.allocated"]
            freed = stats[f"{key}.all.freed"] - before[f"{key}.all.freed"]
            assert allocated - freed == stats[f"{key}.all.current"] - before[f"{key}.all.current"], key
            assert stats[f"{key}.all.current"] == (
                stats[f"{key}.small_pool.current"] + stats[f"{key}.large_pool.current"]
            ), key
        assert stats["reserved_bytes.all.current"] >= stats["active_bytes.all.current"]


def test_threads_reading_the_same_tensors_at_once():
    # Each op borrows its arguments' kept CPU aliases; ops of other threads on the same
    # tensors meanwhile make their own. Results and the shared inputs must be unaffected.
    a_cpu = torch.randn(64, dtype=torch.float64)
    b_cpu = torch.randn(64, dtype=torch.float64)
    a, b = a_cpu.to("vdev"), b_cpu.to("vdev")
    expected = [a_cpu + b_cpu, a_cpu * b_cpu, torch.logaddexp(a_cpu, b_cpu), a_cpu[::2] - b_cpu[1::2]]
    failures = []

    def work():
        try:
            for _ in range(400):
                got = [a + b, a * b, torch.logaddexp(a, b), a[::2] - b[1::2]]
                for value, reference in zip(got, expected):
                    assert_close(value.cpu(), reference)
        except Exception as error:  # reported by the main thread
            failures.append(repr(error))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert_close(a.cpu(), a_cpu)
    assert_close(b.cpu(), b_cpu)
    # Kept aliases keep no memory alive: freeing the inputs frees their blocks at once.
    allocated = torch.vdev.memory_allocated()
    del a, b
    assert torch.vdev.memory_allocated() == allocated - 2 * 64 * 8
