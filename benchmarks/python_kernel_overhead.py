"""Per-call overhead of a Python kernel against vdev's native kernels and its fallback.

Each row times one op call (median over --repeats runs of --calls calls each). The
Python kernels do the same math as the path they replace, so the difference is the cost
of entering Python: taking the GIL, converting arguments and results, adopting outputs.

Run with:  python benchmarks/python_kernel_overhead.py [--calls N] [--repeats R]
"""

import argparse
import statistics
import time

import numpy as np
import torch

import torch_vdev

aten = torch.ops.aten


def per_call_microseconds(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def numpy_sin(x):
    return torch.from_numpy(np.sin(x.numpy()))


def numpy_fill_(x, value):
    x.numpy()[...] = value
    return x


class Case:
    """One row: `call` timed with `kernels` (and `decompositions`) installed."""

    def __init__(self, op, path, call, calls, kernels=None, decompositions=None):
        self.op, self.path, self.call, self.calls = op, path, call, calls
        self.environment = torch_vdev.BackendEnvironment(kernels)
        if decompositions is not None:
            self.environment.register_default_decompositions(decompositions)
        self.runs = []

    def run(self) -> None:
        with self.environment.install():
            self.runs.append(per_call_microseconds(self.call, self.calls))

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed run of a small op")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs; the median is reported")
    options = parser.parse_args()

    cases = []
    for numel in (16, 1 << 20):
        calls = options.calls if numel < 4096 else max(options.calls // 200, 5)
        cpu = torch.randn(numel)
        device = cpu.to("vdev")
        op = f"sin, {numel} floats"
        on_device = lambda device=device: torch.sin(device)  # noqa: E731
        cases += [
            Case(op, "vdev fallback (CPU kernel on aliases)", on_device, calls),
            Case(op, "CPU tensor, CPU kernel", lambda cpu=cpu: torch.sin(cpu), calls),
            Case(op, "vdev Python kernel: torch.sin", on_device, calls, {aten.sin.default: torch.sin}),
            Case(op, "vdev Python kernel: numpy (result copied)", on_device, calls, {aten.sin.default: numpy_sin}),
            Case(op, "vdev Python kernel: NotImplemented", on_device, calls, {aten.sin.default: lambda x: NotImplemented}),
        ]

    small = torch.empty(16, device="vdev")
    fill = lambda: small.fill_(1.0)  # noqa: E731
    cases += [
        Case("fill_, 16 floats", "vdev native kernel", fill, options.calls),
        Case("fill_, 16 floats", "vdev Python kernel: numpy", fill, options.calls, {aten.fill_.Scalar: numpy_fill_}),
    ]

    from torch._decomp import get_decompositions

    small_input = torch.randn(16, device="vdev")
    hardswish = lambda: torch.nn.functional.hardswish(small_input)  # noqa: E731
    cases += [
        Case("hardswish, 16 floats", "vdev fallback", hardswish, options.calls),
        Case("hardswish, 16 floats", "torch._decomp decomposition on vdev", hardswish, options.calls,
             decompositions=get_decompositions([aten.hardswish])),
    ]

    for case in cases:
        case.run()  # warm up caches and lazy initialisation
        case.runs.clear()
    # Rounds interleave the cases, so load from other processes affects them alike.
    for _ in range(options.repeats):
        for case in cases:
            case.run()

    print(f"median of {options.repeats} runs; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'op':<22} {'path':<44} {'us/call':>10} {'vs ref':>7}")
    reference = {}
    for case in cases:
        reference.setdefault(case.op, case.median)
        print(f"{case.op:<22} {case.path:<44} {case.median:>10.2f} {case.median / reference[case.op]:>6.2f}x")
    print("vs ref: against the first row of the same op (vdev's fallback or native kernel)")


if __name__ == "__main__":
    main()
