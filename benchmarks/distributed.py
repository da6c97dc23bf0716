"""vccl (vdev's torch.distributed backend) against gloo on CPU tensors, two processes.

    python benchmarks/distributed.py                 # the table (about 2 minutes)
    python benchmarks/distributed.py --quick         # fewer rounds (about 40 s)
    python benchmarks/distributed.py --instructions  # + instruction counts (callgrind; +13 min at load 11)
    python benchmarks/distributed.py --call-check    # only the cost of comparing the ranks' calls
    python benchmarks/distributed.py --switches      # DDP step: CPU time and thread sleeps per step

Both processes join one "cpu:gloo,vdev:vccl" group, so each case runs the same
collective on CPU tensors (gloo) and on vdev tensors (vccl, gloo over aliases of
device memory). Rounds alternate which side goes first; in a round each side times a
batch of calls (a vdev batch ends with the device synchronised, so queued work
counts). The table shows each side's median time per call and, over the rounds, the
median and the interquartile range of the per-round ratios vdev / CPU, of wall time
and of process CPU time (all threads, gloo's included; rank 0); the load average is
printed with it. Interleaving makes both sides see the same load, but on a machine
shared with other jobs single rounds still swing by 10-50%: read the medians with
their spread.

`--call-check` measures what comparing the ranks' calls costs (CallAgreement.h): in
one pair of processes, all_reduce on vdev tensors in a group that compares calls on
the shared-memory board, in a group that compares them over gloo (as between hosts,
VDEV_VCCL_SHARED_MEMORY=0), and on CPU tensors with gloo, interleaved; wall and
process CPU time (all threads) per call, rank 0.

`--switches` counts, for the DDP step, what the shared machine's load barely moves:
process CPU time per step and each thread's voluntary context switches (its sleeps,
from /proc/self/task, summed by thread name) per step, rank 0, both sides
interleaved. A hand-off between threads on a step's critical path shows up as a sleep.

`--instructions` separates what vccl adds from noise: it counts the instructions of
one all_reduce call (Python, c10d's dispatch, the backend, gloo's work and its
thread) with valgrind's callgrind in a one-process group, where gloo communicates
nothing, so the vdev - CPU difference is vccl's host path per call (device checks,
aliases, stream order, the work wrapper).
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import torch_vdev

LIMIT = 1.05
KB, MB = 1 << 10, 1 << 20
GROUP_BACKEND = f"cpu:gloo,{torch_vdev.BACKEND_NAME}:{torch_vdev.distributed.BACKEND_NAME}"


def all_reduce_case(nbytes):
    def make(device):
        tensor = torch.ones(nbytes // 4, device=device)
        return lambda: dist.all_reduce(tensor)

    return make


def ddp_step_case(device, backward_on_calling_thread=False):
    """A DDP training step. PyTorch runs an accelerator's backward in the device's
    autograd thread (two thread wake-ups per step, which cost a single-process vdev
    MLP step ~5%, README: Performance); `backward_on_calling_thread` turns that off
    to show what DDP itself costs on vdev."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 10)).to(device)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(64, 256).to(device)
    targets = torch.randint(0, 10, (64,)).to(device)

    def step():
        with torch.autograd.set_multithreading_enabled(not backward_on_calling_thread):
            optimizer.zero_grad()
            F.cross_entropy(model(inputs), targets).backward()
            optimizer.step()

    return step


# name, make(device) -> call, calls per timed batch
CASES = [
    ("all_reduce 1 KB", all_reduce_case(KB), 200),
    ("all_reduce 1 MB", all_reduce_case(MB), 20),
    ("all_reduce 64 MB", all_reduce_case(64 * MB), 1),
    ("DDP step (MLP 256-512-512-10, batch 64)", ddp_step_case, 10),
    ("same DDP step, backward on the calling thread",
     lambda device: ddp_step_case(device, backward_on_calling_thread=True), 10),
]


def time_batch(call, number, device):
    """Wall time and process CPU time per call."""
    dist.barrier()  # both processes start the batch together
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        call()
    if device.type == torch_vdev.BACKEND_NAME:
        torch.vdev.synchronize(device)
    return (time.perf_counter() - start) / number, (time.process_time() - start_cpu) / number


def quartiles(values):
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return median, low, high


def join_group(rank, world_size, port):
    """This process's device, in the benchmark's "cpu:gloo,vdev:vccl" group."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device(torch_vdev.BACKEND_NAME, rank)
    torch.vdev.set_device(device)
    dist.init_process_group(GROUP_BACKEND, rank=rank, world_size=world_size, device_id=device)
    torch.set_num_threads(1)
    return device


def worker(rank, world_size, port, rounds, results):
    device = join_group(rank, world_size, port)
    for name, make, number in CASES:
        devices = {"cpu": torch.device("cpu"), "vdev": device}
        calls = {side: make(devices[side]) for side in devices}
        for side, call in calls.items():  # warm up
            time_batch(call, max(1, number // 4), devices[side])
        times = {"cpu": [], "vdev": []}
        for round_ in range(rounds):
            for side in (["vdev", "cpu"] if round_ % 2 == 0 else ["cpu", "vdev"]):
                times[side].append(time_batch(calls[side], number, devices[side]))
        if rank == 0:
            def ratios(index):
                return quartiles([v[index] / c[index] for v, c in zip(times["vdev"], times["cpu"])])

            results.put((name, statistics.median(t[0] for t in times["vdev"]),
                         statistics.median(t[0] for t in times["cpu"]), ratios(0), ratios(1)))
    dist.destroy_process_group()


def call_check_worker(rank, world_size, port, rounds, results):
    device = join_group(rank, world_size, port)
    on_board = dist.new_group(list(range(world_size)))
    os.environ["VDEV_VCCL_SHARED_MEMORY"] = "0"  # read when a group is created
    over_gloo = dist.new_group(list(range(world_size)))
    for nbytes, label, number in [(KB, "1 KB", 200), (MB, "1 MB", 20)]:
        sides = {
            "CPU (gloo)": (torch.ones(nbytes // 4), on_board),
            "vdev, calls compared in shared memory": (torch.ones(nbytes // 4, device=device), on_board),
            "vdev, calls compared over gloo": (torch.ones(nbytes // 4, device=device), over_gloo),
        }
        calls = {side: (lambda t=tensor, g=group: dist.all_reduce(t, group=g)) for side, (tensor, group) in sides.items()}
        for side, (tensor, _) in sides.items():  # warm up
            time_batch(calls[side], number // 4, tensor.device)
        times = {side: [] for side in sides}
        for round_ in range(rounds):
            for side in (list(sides) if round_ % 2 == 0 else list(reversed(sides))):
                times[side].append(time_batch(calls[side], number, sides[side][0].device))
        if rank == 0:
            for side in sides:
                def ratios(index):
                    return quartiles([t[index] / c[index] for t, c in zip(times[side], times["CPU (gloo)"])])

                results.put((f"all_reduce {label}", side, statistics.median(t[0] for t in times[side]),
                             statistics.median(t[1] for t in times[side]), ratios(0), ratios(1)))
    dist.destroy_process_group()


def thread_sleeps():
    """Voluntary context switches so far of each thread of this process, by thread id:
    (thread name, count)."""
    sleeps = {}
    for thread in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{thread}/status") as status:
                fields = dict(line.split(":", 1) for line in status.read().splitlines())
        except FileNotFoundError:  # the thread ended
            continue
        sleeps[thread] = (fields["Name"].strip(), int(fields["voluntary_ctxt_switches"]))
    return sleeps


def switches_worker(rank, world_size, port, rounds, results):
    device = join_group(rank, world_size, port)
    devices = {"vdev": device, "cpu": torch.device("cpu")}
    steps = {side: ddp_step_case(devices[side]) for side in devices}
    number = 20
    cpu_time = {side: 0.0 for side in devices}
    sleeps = {side: {} for side in devices}
    for side in devices:
        time_batch(steps[side], 3, devices[side])  # warm up
    for round_ in range(rounds):
        for side in (["vdev", "cpu"] if round_ % 2 == 0 else ["cpu", "vdev"]):
            dist.barrier()
            before = thread_sleeps()
            cpu_time[side] += time_batch(steps[side], number, devices[side])[1]
            for thread, (name, count) in thread_sleeps().items():
                added = count - before.get(thread, (name, 0))[1]
                sleeps[side][name] = sleeps[side].get(name, 0) + added
    if rank == 0:
        for side in devices:
            per_step = {name: count / (rounds * number) for name, count in sleeps[side].items() if count}
            results.put((side, cpu_time[side] / rounds, per_step))
    dist.destroy_process_group()


def print_switches(rounds, port):
    context = mp.get_context("spawn")
    results = context.Queue()
    load_before = os.getloadavg()[0]
    mp.start_processes(switches_worker, args=(2, port, rounds, results), nprocs=2, start_method="spawn")
    print(f"\nDDP step, {rounds} rounds of 20 steps; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after\n")
    print("| side | CPU time per step | thread sleeps per step | by thread |\n|---|---|---|---|")
    cpu_times = {}
    for _ in range(2):
        side, cpu_time, per_step = results.get()
        cpu_times[side] = cpu_time
        by_thread = ", ".join(f"{name} {count:.1f}" for name, count in sorted(per_step.items(), key=lambda x: -x[1]))
        print(f"| {side} | {cpu_time * 1e6:.0f} µs | {sum(per_step.values()):.1f} | {by_thread} |")
    print(f"\nCPU time vdev / CPU: {cpu_times['vdev'] / cpu_times['cpu']:.3f}×")


def print_call_check(rounds, port):
    context = mp.get_context("spawn")
    results = context.Queue()
    load_before = os.getloadavg()[0]
    mp.start_processes(call_check_worker, args=(2, port, rounds, results), nprocs=2, start_method="spawn")
    print(f"\n{rounds} rounds; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print("| case | side | wall time per call | / CPU (IQR) | CPU time per call | / CPU (IQR) |\n"
          "|---|---|---|---|---|---|")
    for _ in range(2 * 3):  # two sizes, three sides
        case, side, wall, cpu, (ratio, low, high), (cpu_ratio, cpu_low, cpu_high) = results.get()
        print(f"| {case} | {side} | {wall * 1e6:.1f} µs | {ratio:.3f}× ({low:.2f}-{high:.2f}) "
              f"| {cpu * 1e6:.1f} µs | {cpu_ratio:.3f}× ({cpu_low:.2f}-{cpu_high:.2f}) |")


def print_table(rounds, port):
    context = mp.get_context("spawn")
    results = context.Queue()
    load_before = os.getloadavg()[0]
    mp.start_processes(worker, args=(2, port, rounds, results), nprocs=2, start_method="spawn")
    load_after = os.getloadavg()[0]
    print(f"\n{rounds} rounds per case; load average {load_before:.1f} before, {load_after:.1f} after "
          f"({os.cpu_count()} CPUs)\n")
    print("| case | vdev (vccl) | CPU (gloo) | vdev / CPU, wall (IQR) | vdev / CPU, CPU time (IQR) "
          "| target |\n|---|---|---|---|---|---|")
    missed = False
    for _ in CASES:
        name, vdev_time, cpu_time, (ratio, low, high), (cpu_ratio, cpu_low, cpu_high) = results.get()
        ok = ratio <= LIMIT
        missed |= not ok
        print(f"| {name} | {vdev_time * 1e6:.1f} µs | {cpu_time * 1e6:.1f} µs "
              f"| {ratio:.3f}× ({low:.2f}-{high:.2f}) | {cpu_ratio:.3f}× ({cpu_low:.2f}-{cpu_high:.2f}) "
              f"| ≤ {LIMIT}× {'' if ok else '(missed)'} |")
    return missed


INSTRUCTIONS_SETUP = f"""
import torch
import torch.distributed as dist
if not dist.is_initialized():  # the Timer also runs this setup once outside valgrind
    dist.init_process_group({GROUP_BACKEND!r}, rank=0, world_size=1, store=dist.HashStore(),
                            device_id=torch.device({torch_vdev.BACKEND_NAME!r}, 0))
tensor = torch.ones(NUMEL, device=DEVICE)
for _ in range(20):
    dist.all_reduce(tensor)
"""


def print_instructions(number=200):
    """Instructions per all_reduce call on each side (callgrind, one-process group)."""
    from torch.utils.benchmark import Timer

    print(f"\nInstructions per all_reduce call (callgrind, one process, {number} calls)\n")
    print("| case | vdev (vccl) | CPU (gloo) | vccl adds |\n|---|---|---|---|")
    for nbytes, label in [(KB, "1 KB"), (MB, "1 MB")]:
        counts = {}
        for side in ["vdev", "cpu"]:
            device = torch_vdev.BACKEND_NAME if side == "vdev" else "cpu"
            setup = INSTRUCTIONS_SETUP.replace("NUMEL", str(nbytes // 4)).replace("DEVICE", repr(device))
            stats = Timer("dist.all_reduce(tensor)", setup=setup).collect_callgrind(
                number=number, collect_baseline=False)
            counts[side] = stats.counts(denoise=True) / number
        added = counts["vdev"] - counts["cpu"]
        print(f"| all_reduce {label} | {counts['vdev']:,.0f} | {counts['cpu']:,.0f} "
              f"| {added:,.0f} ({counts['vdev'] / counts['cpu']:.3f}×) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 rounds instead of 61")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per all_reduce with callgrind")
    parser.add_argument("--call-check", action="store_true",
                        help="only the cost of comparing the ranks' calls, in shared memory and over gloo")
    parser.add_argument("--switches", action="store_true",
                        help="only the DDP step's CPU time and thread sleeps per step")
    parser.add_argument("--port", type=int, default=29651)
    args = parser.parse_args()
    if args.switches:
        print_switches(5 if args.quick else 15, args.port)
        return
    if args.call_check:
        print_call_check(15 if args.quick else 61, args.port)
        return
    missed = print_table(15 if args.quick else 61, args.port)
    if args.instructions:
        print_instructions()
    raise SystemExit(1 if missed else 0)


if __name__ == "__main__":
    main()
