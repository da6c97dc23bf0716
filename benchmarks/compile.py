"""torch.compile on vdev against torch.compile on the CPU, measured in one process.

    python benchmarks/compile.py            # full run
    python benchmarks/compile.py --quick    # fewer repeats, one compile-time sample
    python benchmarks/compile.py -k mlp     # only the cases whose name contains "mlp"
    python benchmarks/compile.py --reduce-overhead   # mode="reduce-overhead" (vdev graphs)

For each case: the compiled call on vdev and on the CPU, timed in interleaved batches
(as benchmarks/run.py does; a vdev batch ends with torch.vdev.synchronize(), so work
still queued is counted), and the eager vdev call; then the compile time (first call
of the compiled function) on each device, each in a fresh process with a fresh
Inductor cache, so neither reuses the other's kernels or headers.

With --reduce-overhead: each case compiled with mode="reduce-overhead" on vdev (vdev
graphs replayed) against the default compiled CPU call and the eager CPU call, and
whether vdev graphs were replayed or what made Inductor's graph skip them.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch_vdev

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import TRAINING_STEPS  # noqa: E402
from run import calls_per_batch, cpu_model, format_time, time_batch  # noqa: E402

VDEV = torch_vdev.BACKEND_NAME
# Upper bounds: compiled vdev / compiled CPU, and vdev / CPU compile time.
RUN_LIMIT, COMPILE_LIMIT = 1.05, 1.1


def pointwise_chain(device: str):
    x = torch.rand(1 << 20).to(device)

    def chain():
        y = x * 1.5 + 0.25
        return ((y.sin() * y.cos()).exp() - y.sigmoid()).relu() * y.tanh() + y.sqrt()

    return chain


CASES = {"pointwise chain, 1M floats": pointwise_chain, **{f"{name} training step": make for name, make in TRAINING_STEPS.items()}}


def measure_run(make, repeats, batch_seconds):
    compiled = {device: torch.compile(make(device)) for device in (VDEV, "cpu")}
    eager_vdev = make(VDEV)
    calls = (compiled[VDEV], compiled["cpu"], eager_vdev)
    for call in calls:  # compiles, then warms the caches
        for _ in range(3):
            call()
    number = calls_per_batch(compiled["cpu"], batch_seconds)
    times = [[], [], []]
    finishes = (torch.vdev.synchronize, lambda: None, torch.vdev.synchronize)
    for repeat in range(repeats):
        order = range(3) if repeat % 2 == 0 else reversed(range(3))
        for index in order:
            times[index].append(time_batch(calls[index], number, finishes[index]))
    vdev, cpu, eager = (statistics.median(side) for side in times)
    ratio = statistics.median(v / c for v, c in zip(times[0], times[1]))
    eager_ratio = statistics.median(v / e for v, e in zip(times[0], times[2]))
    return vdev, cpu, ratio, eager, eager_ratio


def measure_graphs(make, repeats, batch_seconds):
    from torch._dynamo.utils import counters

    from torch_vdev._compiled_graphs import REPLAYS_COUNTER

    replays = counters["inductor"][REPLAYS_COUNTER]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = torch.compile(make(VDEV), mode="reduce-overhead")
        for _ in range(3):  # compiles, warms up, captures
            graphed()
    skips = [str(w.message) for w in caught if f"skipping {VDEV} graphs" in str(w.message)]
    calls = (graphed, torch.compile(make("cpu")), make("cpu"))
    for call in calls[1:]:
        for _ in range(3):
            call()
    number = calls_per_batch(calls[1], batch_seconds)
    times = [[], [], []]
    finishes = (torch.vdev.synchronize, lambda: None, lambda: None)
    for repeat in range(repeats):
        for index in (range(3) if repeat % 2 == 0 else reversed(range(3))):
            times[index].append(time_batch(calls[index], number, finishes[index]))
    graphs = "replayed" if counters["inductor"][REPLAYS_COUNTER] > replays and not skips else "; ".join(skips)
    return (
        statistics.median(times[0]),
        statistics.median(g / c for g, c in zip(times[0], times[1])),
        statistics.median(g / e for g, e in zip(times[0], times[2])),
        graphs,
    )


def print_graphs_table(cases, repeats, batch_seconds):
    print('| case | reduce-overhead vdev | / compiled cpu | / eager cpu | vdev graphs |')
    print("| --- | ---: | ---: | ---: | --- |")
    for case in cases:
        graphed, compiled_ratio, eager_ratio, graphs = measure_graphs(CASES[case], repeats, batch_seconds)
        print(f"| {case} | {format_time(graphed)} | {compiled_ratio:.2f}× | {eager_ratio:.2f}× | {graphs} |", flush=True)


def compile_seconds(case: str, device: str, threads: int) -> float:
    """First-call time of the compiled case on `device`, in a fresh process and cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        result = subprocess.run(
            [sys.executable, __file__, "--compile-time", case, device, "--threads", str(threads)],
            env=env, capture_output=True, text=True, check=True,
        )
    return float(result.stdout.strip().splitlines()[-1])


def print_compile_time(case: str, device: str) -> None:
    compiled = torch.compile(CASES[case](device))
    start = time.perf_counter()
    compiled()
    print(time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("-k", dest="keyword", default="", help="only cases whose name contains this")
    parser.add_argument("--reduce-overhead", action="store_true", help='mode="reduce-overhead" rows')
    parser.add_argument("--compile-time", nargs=2, metavar=("CASE", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.compile_time:
        print_compile_time(*args.compile_time)
        return

    repeats, batch_seconds, compile_repeats = (7, 0.05, 1) if args.quick else (21, 0.1, 3)
    cases = [case for case in CASES if args.keyword.lower() in case.lower()]
    load_before = os.getloadavg()[0]
    if args.reduce_overhead:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {cpu_model()}, "
              f"load average {load_before:.1f}, median of {repeats} interleaved batches\n")
        print_graphs_table(cases, repeats, batch_seconds)
        return
    rows = []
    for case in cases:
        vdev, cpu, ratio, eager, eager_ratio = measure_run(CASES[case], repeats, batch_seconds)
        compile_times = {VDEV: [], "cpu": []}
        for repeat in range(compile_repeats):
            for device in ((VDEV, "cpu") if repeat % 2 == 0 else ("cpu", VDEV)):
                compile_times[device].append(compile_seconds(case, device, args.threads))
        compile_vdev, compile_cpu = (statistics.median(compile_times[d]) for d in (VDEV, "cpu"))
        rows.append((case, vdev, cpu, ratio, eager, eager_ratio, compile_vdev, compile_cpu))
        print(f"measured {case}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    print(f"torch {torch.__version__}, torch_vdev {torch_vdev.__version__}, "
          f"{torch.get_num_threads()} thread(s), {cpu_model()}, {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} → {load_after:.1f}, run times: median of {repeats} "
          f"interleaved batches; compile times: median of {compile_repeats} fresh processes\n")
    print("| case | compiled vdev | compiled cpu | ratio (≤ 1.05×) | eager vdev | compiled / eager vdev "
          "| compile vdev | compile cpu | ratio (≤ 1.1×) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    missed = []
    for case, vdev, cpu, ratio, eager, eager_ratio, compile_vdev, compile_cpu in rows:
        compile_ratio = compile_vdev / compile_cpu
        print(f"| {case} | {format_time(vdev)} | {format_time(cpu)} | {ratio:.2f}× | {format_time(eager)} "
              f"| {eager_ratio:.2f}× | {compile_vdev:.1f} s | {compile_cpu:.1f} s | {compile_ratio:.2f}× |")
        if ratio > RUN_LIMIT or compile_ratio > COMPILE_LIMIT:
            missed.append(case)
    if missed:
        print(f"\nmissed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
