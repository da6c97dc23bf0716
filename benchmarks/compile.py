"""torch.compile on vdev against torch.compile on the CPU, measured in one process.

    python benchmarks/compile.py            # full run
    python benchmarks/compile.py --quick    # fewer repeats, one compile-time sample per device
    python benchmarks/compile.py --compile-only --compile-repeats 5   # compile times alone, 5 samples per device
    python benchmarks/compile.py -k mlp     # only the cases whose name contains "mlp"
    python benchmarks/compile.py --reduce-overhead   # mode="reduce-overhead" (vdev graphs)

For each case: the compiled call on vdev and on the CPU, timed in interleaved batches
(as benchmarks/run.py does; a vdev batch ends with torch.vdev.synchronize(), so work
still queued is counted), and the eager vdev call; then the compile time (first call
of the compiled function) on each device, each sample in a fresh process with fresh,
empty Inductor caches (FX graph and AOTAutograd caches off, so nothing is found in a
cache), vdev and CPU samples interleaved; medians, with the range of the samples and
what each compile did (Dynamo frames, graph breaks, recompiles) so the two sides can be
compared.

With --reduce-overhead: each case compiled with mode="reduce-overhead" on vdev (vdev
graphs replayed) against the default compiled CPU call and the eager CPU call, and
whether vdev graphs were replayed or what made Inductor's graph skip them.
"""

import argparse
import json
import os
import resource
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


def compile_sample(case: str, device: str, threads: int) -> dict:
    """The compile of `case` on `device` in a fresh process, with empty caches."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=cache,
            TRITON_CACHE_DIR=os.path.join(cache, "triton"),
            TORCHINDUCTOR_FX_GRAPH_CACHE="0",
            TORCHINDUCTOR_AUTOGRAD_CACHE="0",
        )
        process_tree_start = _cpu_seconds(resource.RUSAGE_CHILDREN)
        result = subprocess.run(
            [sys.executable, __file__, "--compile-time", case, device, "--threads", str(threads)],
            env=env, capture_output=True, text=True, check=True,
        )
    sample = json.loads(result.stdout.strip().splitlines()[-1])
    # The whole process's CPU time (from start to exit), its compile workers' and compilers' included.
    sample["process_tree_cpu_seconds"] = _cpu_seconds(resource.RUSAGE_CHILDREN) - process_tree_start
    return sample


def _cpu_seconds(who=resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def print_compile_sample(case: str, device: str) -> None:
    from torch._dynamo.utils import counters

    compiled = torch.compile(CASES[case](device))
    start, start_cpu = time.perf_counter(), _cpu_seconds()
    compiled()
    seconds, cpu_seconds = time.perf_counter() - start, _cpu_seconds() - start_cpu
    print(json.dumps({
        "seconds": seconds,
        "main_process_cpu_seconds": cpu_seconds,
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": sum(counters["recompiles"].values()),
    }))


def compile_times(case: str, repeats: int, threads: int) -> dict:
    """Compile-time samples of `case` per device, vdev and CPU interleaved."""
    samples = {VDEV: [], "cpu": []}
    for repeat in range(repeats):
        for device in ((VDEV, "cpu") if repeat % 2 == 0 else ("cpu", VDEV)):
            samples[device].append(compile_sample(case, device, threads))
    return samples


def describe_compiles(samples: list) -> str:
    """The range of the compile times and what the compiles did, if they differed."""
    seconds = [sample["seconds"] for sample in samples]
    main_cpu, tree_cpu = (
        statistics.median(sample[key] for sample in samples)
        for key in ("main_process_cpu_seconds", "process_tree_cpu_seconds")
    )
    work = {(s["graphs"], s["graph_breaks"], s["recompiles"]) for s in samples}
    described = (
        f"{min(seconds):.1f}-{max(seconds):.1f} s; median CPU time: compile in the main process "
        f"{main_cpu:.1f} s, whole process with its compile workers {tree_cpu:.1f} s"
    )
    return described + "".join(f", {g} graphs/{b} breaks/{r} recompiles" for g, b, r in sorted(work))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("-k", dest="keyword", default="", help="only cases whose name contains this")
    parser.add_argument("--reduce-overhead", action="store_true", help='mode="reduce-overhead" rows')
    parser.add_argument("--compile-only", action="store_true", help="only the compile-time columns")
    parser.add_argument("--compile-repeats", type=int, help="compile-time samples per device (default 3, 1 with --quick)")
    parser.add_argument("--compile-time", nargs=2, metavar=("CASE", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.compile_time:
        print_compile_sample(*args.compile_time)
        return

    repeats, batch_seconds, compile_repeats = (7, 0.05, 1) if args.quick else (21, 0.1, 3)
    compile_repeats = args.compile_repeats or compile_repeats
    cases = [case for case in CASES if args.keyword.lower() in case.lower()]
    load_before = os.getloadavg()[0]
    if args.reduce_overhead:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {cpu_model()}, "
              f"load average {load_before:.1f}, median of {repeats} interleaved batches\n")
        print_graphs_table(cases, repeats, batch_seconds)
        return
    rows, spreads = [], []
    for case in cases:
        nan = float("nan")
        vdev, cpu, ratio, eager, eager_ratio = (
            (nan,) * 5 if args.compile_only else measure_run(CASES[case], repeats, batch_seconds)
        )
        samples = compile_times(case, compile_repeats, args.threads)
        compile_vdev, compile_cpu = (statistics.median(s["seconds"] for s in samples[d]) for d in (VDEV, "cpu"))
        spreads.append(f"{case}: vdev {describe_compiles(samples[VDEV])}; cpu {describe_compiles(samples['cpu'])}")
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
    print(f"\ncompile-time samples (range; what each compile did):")
    for spread in spreads:
        print(f"- {spread}")
    if missed:
        print(f"\nmissed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
