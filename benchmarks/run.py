"""vdev against native CPU, measured in one process.

    python benchmarks/run.py            # full run (a few minutes)
    python benchmarks/run.py --quick    # fewer repeats
    python benchmarks/run.py -k add     # only the cases whose name contains "add"
    python benchmarks/run.py --context-switches   # and each thread's sleeps and preemptions

Each case builds the same work on vdev and on CPU, then times batches of calls,
alternating vdev and CPU batches (and which goes first) so that both see the same
machine load. A vdev batch ends with torch.vdev.synchronize(), so work queued on a
stream counts. `VDEV_LAUNCH_BLOCKING=1 python benchmarks/run.py` measures with every
launch run before it returns. The table shows each side's median time per call and the median of
the per-pair ratios vdev / CPU. Copies are compared with a CPU-to-CPU copy of the
same size, i.e. memcpy bandwidth. Before timing, each case checks that its vdev
work takes the intended path: the named ops through the CPU fallback, everything
else through native vdev kernels (no fallback call at all).
"""

import argparse
import gc
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Tuple

import torch
import torch_vdev

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import TRAINING_STEPS, moe_step  # noqa: E402

SMALL, LARGE, FALLBACK, COPY, TRAINING = "small", "large", "fallback", "copy", "training"
# Upper bounds on vdev time / CPU time. Launched asynchronously, a training step's
# host work overlaps its kernels (so it should beat CPU eager) and a small op costs a
# launch; with VDEV_LAUNCH_BLOCKING=1 every launch runs before it returns.
LAUNCH_BLOCKING = os.environ.get("VDEV_LAUNCH_BLOCKING", "0") == "1"
if LAUNCH_BLOCKING:
    LIMITS = {SMALL: 1.15, LARGE: 1.05, FALLBACK: 1.05, COPY: 1 / 0.9, TRAINING: 1.05}
else:
    LIMITS = {SMALL: 1.3, LARGE: 1.02, FALLBACK: 1.02, COPY: 1 / 0.9, TRAINING: 0.9}
TARGET_TEXT = {
    kind: "≥ 0.9× memcpy bw" if kind == COPY else f"≤ {limit:.2f}×" for kind, limit in LIMITS.items()
}
MB = 1 << 20


@dataclass
class Case:
    name: str
    kind: str
    # device -> the call to time; built once per device, outside the timing.
    make: Callable[[str], Callable[[], object]]
    # The ops that must go through the fallback; none may if empty.
    fallback_ops: Tuple[str, ...] = ()
    # Bytes moved per call, to print a bandwidth for copies.
    nbytes: int = 0


def binary(op, shape):
    def make(device):
        a, b = torch.rand(shape).to(device), torch.rand(shape).to(device)
        return lambda: op(a, b)
    return make


def unary(op, shape):
    def make(device):
        x = torch.rand(shape).to(device)
        return lambda: op(x)
    return make


def view_chain(device):
    x = torch.rand(64, 64).to(device)
    return lambda: (
        x.view(16, 256).transpose(0, 1).unsqueeze(0).narrow(1, 0, 128).squeeze(0)
        .t().select(1, 3).unsqueeze(1).expand(16, 4)
    )


def empty_1mb(device):
    return lambda: torch.empty(MB // 4, device=device)


def item(device):
    x = torch.rand(1).to(device)
    return x.item


# On CPU, these are CPU-to-CPU copies of the same size: the memcpy reference.
def host_to_device(nbytes):
    def make(device):
        source = torch.rand(nbytes // 4)
        destination = torch.empty(nbytes // 4, device=device)
        return lambda: destination.copy_(source)
    return make


def device_to_host(nbytes):
    def make(device):
        source = torch.rand(nbytes // 4).to(device)
        destination = torch.empty(nbytes // 4)
        return lambda: destination.copy_(source)
    return make


def device_to_device(numel):
    """Copies between two vdev tensors are queued on the stream (on CPU: a CPU copy)."""
    def make(device):
        source = torch.rand(numel).to(device)
        destination = torch.empty(numel, device=device)
        return lambda: destination.copy_(source)
    return make


def backward_on_calling_thread(make_step):
    """The step with multithreaded backward off. PyTorch's autograd engine runs the
    backward of a graph on an accelerator in that device's worker thread, and the
    calling thread waits for it: two thread wake-ups per backward, and the backward
    on a core whose caches hold none of the forward's activations. CPU graphs run on
    the calling thread. This variant shows a step's cost without that hand-off."""
    def make(device):
        step = make_step(device)

        def call():
            with torch.autograd.set_multithreading_enabled(False):
                return step()
        return call
    return make


CASES = [
    Case("add, 1 element", SMALL, binary(torch.add, 1)),
    Case("chain of 9 view ops", SMALL, view_chain),
    Case("empty, 1 MB", SMALL, empty_1mb),
    Case("item()", SMALL, item),
    Case("logaddexp, 8 elements (fallback)", SMALL, binary(torch.logaddexp, 8),
         fallback_ops=("aten::logaddexp",)),
    Case("add, 4M floats", LARGE, binary(torch.add, 4 * MB)),
    Case("matmul 512×512", LARGE, binary(torch.matmul, (512, 512))),
    Case("sum over dim 1 of 4096×1024", LARGE, unary(lambda x: x.sum(dim=1), (4096, 1024))),
    Case("cummax, 1M floats (fallback)", FALLBACK, unary(lambda x: torch.cummax(x, 0), MB),
         fallback_ops=("aten::_cummax_helper",)),
    Case("special.i0e, 1M floats (fallback)", FALLBACK, unary(torch.special.i0e, MB),
         fallback_ops=("aten::special_i0e",)),
    Case("copy between vdev tensors, 1 element (queued launch)", SMALL, device_to_device(1)),
    Case("copy between vdev tensors, 4M floats (queued launch)", LARGE, device_to_device(4 * MB)),
    Case("H2D copy, 64 MB", COPY, host_to_device(64 * MB), nbytes=64 * MB),
    Case("D2H copy, 64 MB", COPY, device_to_host(64 * MB), nbytes=64 * MB),
] + [
    Case(f"{name} training step", TRAINING, make) for name, make in TRAINING_STEPS.items()
] + [
    Case(f"{name} training step, backward on the calling thread", TRAINING,
         backward_on_calling_thread(make))
    for name, make in TRAINING_STEPS.items()
] + [
    # transformers' device branch: torch.histc on integer expert indices on vdev (an
    # accelerator dtype: computed in float64), torch.bincount on the CPU.
    Case("mixture-of-experts training step (histc on integers)", TRAINING,
         lambda device: moe_step(device, tokens=256, hidden=64), fallback_ops=("aten::histc", "aten::topk")),
]


def check_path(case, vdev_call):
    """Fails unless the vdev call runs exactly `case.fallback_ops` through the fallback."""
    torch_vdev.reset_fallback_stats()
    vdev_call()
    used = set(torch_vdev.fallback_stats())
    if used != set(case.fallback_ops):
        raise RuntimeError(
            f"{case.name}: expected fallback ops {sorted(case.fallback_ops)}, got {sorted(used)}"
        )


def thread_switches():
    """{thread: (voluntary, involuntary)} context switches of this process's threads
    since they started, threads keyed by (id, name); empty where /proc is missing."""
    switches = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return switches
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue  # the thread ended
        name = "calling thread" if int(tid) == threading.get_native_id() else fields["Name"].strip()
        switches[(int(tid), name)] = (
            int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]))
    return switches


class SwitchCounter:
    """Context switches per call of each thread (by name) over the batches it counts.
    A voluntary switch is a sleep (a wait for another thread, a lock); an involuntary
    one, losing the core to another thread. Counted by the kernel, so unlike times they
    do not depend on the machine's load."""

    def __init__(self):
        self.calls = 0
        self.totals = {}

    def count(self, batch, number):
        before = thread_switches()
        result = batch()
        after = thread_switches()
        self.calls += number
        for thread, (voluntary, involuntary) in after.items():
            start = before.get(thread, (0, 0))
            total = self.totals.setdefault(thread[1], [0, 0])
            total[0] += voluntary - start[0]
            total[1] += involuntary - start[1]
        return result

    def text(self):
        return ", ".join(
            f"{name} {voluntary / self.calls:.2f}/{involuntary / self.calls:.2f}"
            for name, (voluntary, involuntary) in sorted(self.totals.items())
            if voluntary or involuntary
        ) or "none"


def time_batch(call, number, finish=lambda: None):
    """Seconds per call over `number` back-to-back calls and `finish()` (garbage
    collection off, as timeit)."""
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            call()
        finish()
        return (time.perf_counter() - start) / number
    finally:
        gc.enable()


def calls_per_batch(call, batch_seconds):
    number = 1
    while True:
        elapsed = time_batch(call, number) * number
        if elapsed >= batch_seconds or number >= 1 << 20:
            return number
        number *= 2 if elapsed <= 0 else max(2, min(10, int(batch_seconds / elapsed * 1.2)))


@dataclass
class Result:
    case: Case
    vdev: float
    cpu: float
    ratio: float


def measure(case, repeats, batch_seconds, switches=None):
    vdev_call, cpu_call = case.make("vdev"), case.make("cpu")
    check_path(case, vdev_call)
    for call in (vdev_call, cpu_call):  # warm caches (allocator, kernels, autograd)
        for _ in range(3):
            call()
    torch.vdev.synchronize()
    number = calls_per_batch(cpu_call, batch_seconds)
    vdev_times, cpu_times, ratios = [], [], []
    sync = torch.vdev.synchronize

    def vdev_batch():
        if switches is None:
            return time_batch(vdev_call, number, sync)
        return switches.count(lambda: time_batch(vdev_call, number, sync), number)

    for repeat in range(repeats):
        # Alternate which side goes first, so neither always follows the other.
        if repeat % 2 == 0:
            vdev_time, cpu_time = vdev_batch(), time_batch(cpu_call, number)
        else:
            cpu_time, vdev_time = time_batch(cpu_call, number), vdev_batch()
        vdev_times.append(vdev_time)
        cpu_times.append(cpu_time)
        ratios.append(vdev_time / cpu_time)
    del vdev_call, cpu_call
    gc.collect()
    torch.vdev.empty_cache()
    return Result(case, statistics.median(vdev_times), statistics.median(cpu_times),
                  statistics.median(ratios))


def format_time(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_side(seconds, nbytes):
    text = format_time(seconds)
    return f"{text} ({nbytes / seconds / 1e9:.1f} GB/s)" if nbytes else text


def table(results):
    lines = ["| case | vdev | cpu | ratio | target | met |", "| --- | ---: | ---: | ---: | --- | --- |"]
    for result in results:
        case = result.case
        met = "yes" if result.ratio <= LIMITS[case.kind] else "**no**"
        lines.append(
            f"| {case.name} | {format_side(result.vdev, case.nbytes)} | "
            f"{format_side(result.cpu, case.nbytes)} | {result.ratio:.2f}× | "
            f"{TARGET_TEXT[case.kind]} | {met} |"
        )
    return "\n".join(lines)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: steadier small-op timings)")
    parser.add_argument("-k", dest="keyword", default="", help="only cases whose name contains this")
    parser.add_argument("--context-switches", action="store_true",
                        help="also print each thread's voluntary/involuntary context switches per vdev call")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    repeats, batch_seconds = (7, 0.02) if args.quick else (31, 0.05)
    cases = [case for case in CASES if args.keyword.lower() in case.name.lower()]
    load_before = os.getloadavg()[0]
    results, switch_lines = [], []
    for case in cases:
        switches = SwitchCounter() if args.context_switches else None
        results.append(measure(case, repeats, batch_seconds, switches))
        print(f"measured {case.name}", file=sys.stderr, flush=True)
        if switches is not None:
            switch_lines.append(f"- {case.name}: {switches.text()}")
    load_after = os.getloadavg()[0]

    print(f"torch {torch.__version__}, torch_vdev {torch_vdev.__version__}, "
          f"{torch.get_num_threads()} thread(s), {cpu_model()}, {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} → {load_after:.1f}, "
          f"VDEV_LAUNCH_BLOCKING={os.environ.get('VDEV_LAUNCH_BLOCKING', '0')}, "
          f"median of {repeats} interleaved batches of ≥ {batch_seconds * 1e3:.0f} ms\n")
    print(table(results))
    if switch_lines:
        print("\ncontext switches per vdev call, voluntary/involuntary, by thread:")
        print("\n".join(switch_lines))
    missed = [result.case.name for result in results if result.ratio > LIMITS[result.case.kind]]
    if missed:
        print(f"\nmissed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
