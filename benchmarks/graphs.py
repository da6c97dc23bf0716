"""Replayed vdev graphs against eager CPU and eager vdev, measured in one process.

    python benchmarks/graphs.py            # full run
    python benchmarks/graphs.py --quick    # fewer repeats

Each case builds the same work on CPU and on vdev, captures the vdev work into a graph
(after warm-up runs on a side stream, as with CUDA graphs), checks that a replay gives
the eager CPU result, then times batches of graph replays, eager vdev calls and eager
CPU calls, rotating their order so all see the same machine load. vdev batches end with
torch.vdev.synchronize(), so queued work counts. The table gives median times per call
and the medians of the per-batch ratios replay / CPU eager and replay / vdev eager. A
case whose work cannot be captured yet says which op refused.
"""

import argparse
import os
import re
import statistics
import sys
from typing import Callable, Optional

import torch
import torch_vdev

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import TRAINING_STEPS  # noqa: E402
from run import calls_per_batch, cpu_model, format_time, time_batch  # noqa: E402

# Targets of the graphs issue: replayed graph time / CPU eager time.
# (A training step at most half of CPU eager; the optimizer step alone has no target.)
TARGETS = {"pointwise": 0.3, "optimizer": None, "mlp": 0.5, "cnn": 0.5, "transformer": 0.8}


def pointwise_chain(device: str, length: int = 50, numel: int = 64) -> Callable[[], None]:
    """`length` small in-place pointwise ops on one tensor."""
    torch.manual_seed(0)
    x = torch.rand(numel).to(device)
    y = torch.rand(numel).to(device)
    ops = [
        lambda: x.mul_(0.999),
        lambda: x.add_(y, alpha=0.001),
        lambda: x.addcmul_(y, y, value=-0.0005),
        lambda: x.clamp_max_(10.0),
        lambda: x.sub_(y, alpha=0.0005),
    ]

    def chain():
        for index in range(length):
            ops[index % len(ops)]()

    chain.result = lambda: x
    return chain


def fused_adam_step(device: str) -> Callable[[], None]:
    """A fused Adam step over the MLP's parameters, with fixed gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
        torch.nn.GELU(), torch.nn.Linear(512, 10),
    ).to(device)
    for parameter in model.parameters():
        parameter.grad = torch.randn(parameter.shape).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    def step():
        optimizer.step()

    step.result = lambda: next(model.parameters()).detach()
    return step


def training_step(name: str, **options) -> Callable[[str], Callable[[], object]]:
    def make(device: str) -> Callable[[], object]:
        step = TRAINING_STEPS[name](device, **options)
        losses = []

        def call():
            # Detached: a loss kept with its autograd graph would keep the previous
            # step's gradient accumulators (and their stream) alive.
            losses.append(step().detach())
            del losses[:-1]

        call.result = lambda: losses[-1]
        return call

    return make


CASES = [
    ("50 pointwise ops, 64 elements", "pointwise", pointwise_chain),
    ("fused Adam step, MLP parameters", "optimizer", fused_adam_step),
    ("MLP training step", "mlp", training_step("mlp")),
    ("MLP training step without dropout", "mlp", training_step("mlp", dropout=0.0)),
    ("CNN training step", "cnn", training_step("cnn")),
    ("transformer training step", "transformer", training_step("transformer")),
    ("transformer training step without dropout", "transformer", training_step("transformer", dropout=0.0)),
]


def capture(call: Callable[[], object]) -> "torch.vdev.VDEVGraph":
    """`call` captured after three warm-up calls on a side stream."""
    side = torch.vdev.Stream()
    side.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(side):
        for _ in range(3):
            call()
    torch.vdev.current_stream().wait_stream(side)
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        call()
    return graph


def refusal(error: RuntimeError) -> Optional[str]:
    """The op a capture refused, if `error` is a capture refusal."""
    found = re.search(r"(\S+): operation not permitted when stream is capturing", str(error))
    return found.group(1) if found else None


def check_replay(make, graph, vdev_call) -> None:
    """A replay continues the vdev sequence as an eager call would on CPU, the
    generators (dropout's) seeded alike before the first call."""
    after_warm_ups = torch.vdev.get_rng_state()
    cpu_call = make("cpu")  # the models seed every generator as they are built
    torch.manual_seed(1)
    for _ in range(4):  # the vdev call ran three warm-ups, then the replay
        cpu_call()
    torch.vdev.set_rng_state(after_warm_ups)
    graph.replay()
    torch.testing.assert_close(
        vdev_call.result().cpu(), cpu_call.result(), rtol=1e-4, atol=1e-5,
        msg=lambda text: f"replay differs from eager CPU: {text}",
    )


def measure(make, repeats: int, batch_seconds: float):
    vdev_call = make("vdev")
    torch.manual_seed(1)  # for check_replay
    try:
        graph = capture(vdev_call)
    except RuntimeError as error:
        op = refusal(error)
        if op is None:
            raise
        return f"not capturable yet ({op} runs on the calling thread)"
    check_replay(make, graph, vdev_call)
    eager_vdev, cpu_call = make("vdev"), make("cpu")
    for call in (eager_vdev, cpu_call, graph.replay):
        for _ in range(3):
            call()
    torch.vdev.synchronize()
    number = calls_per_batch(cpu_call, batch_seconds)
    sync = torch.vdev.synchronize
    sides = [("replay", graph.replay, sync), ("vdev", eager_vdev, sync), ("cpu", cpu_call, lambda: None)]
    times = {name: [] for name, _, _ in sides}
    to_cpu, to_vdev = [], []
    for repeat in range(repeats):
        order = sides[repeat % 3:] + sides[: repeat % 3]
        batch = {name: time_batch(call, number, finish) for name, call, finish in order}
        for name, seconds in batch.items():
            times[name].append(seconds)
        to_cpu.append(batch["replay"] / batch["cpu"])
        to_vdev.append(batch["replay"] / batch["vdev"])
    medians = {name: statistics.median(values) for name, values in times.items()}
    return medians, statistics.median(to_cpu), statistics.median(to_vdev)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("-k", dest="keyword", default="", help="only cases whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats, batch_seconds = (7, 0.02) if args.quick else (21, 0.05)
    load_before = os.getloadavg()[0]
    rows = []
    for name, kind, make in CASES:
        if args.keyword.lower() not in name.lower():
            continue
        measured = measure(make, repeats, batch_seconds)
        print(f"measured {name}", file=sys.stderr, flush=True)
        target = TARGETS[kind]
        target_text = "–" if target is None else f"≤ {target}×"
        if isinstance(measured, str):
            rows.append(f"| {name} | – | – | – | – | – | {target_text} | {measured} |")
            continue
        medians, to_cpu, to_vdev = measured
        met = "–" if target is None else "yes" if to_cpu <= target else "**no**"
        rows.append(
            f"| {name} | {format_time(medians['replay'])} | {format_time(medians['vdev'])} | "
            f"{format_time(medians['cpu'])} | {to_cpu:.2f}× | {to_vdev:.2f}× | "
            f"{target_text} | {met} |"
        )
    load_after = os.getloadavg()[0]
    print(f"torch {torch.__version__}, torch_vdev {torch_vdev.__version__}, "
          f"{torch.get_num_threads()} thread(s), {cpu_model()}, {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} → {load_after:.1f}, "
          f"median of {repeats} rotated batches of ≥ {batch_seconds * 1e3:.0f} ms\n")
    print("| case | replay | vdev eager | CPU eager | replay / CPU | replay / vdev | target | met |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
