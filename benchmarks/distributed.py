"""vccl (vdev's torch.distributed backend) against gloo on CPU tensors, two processes.

    python benchmarks/distributed.py            # full run (about a minute)
    python benchmarks/distributed.py --quick    # fewer rounds

Both processes join one "cpu:gloo,vdev:vccl" group, so each case runs the same
collective on CPU tensors (gloo) and on vdev tensors (vccl, gloo over aliases of
device memory). Rounds alternate which side goes first; each side times a batch of
calls, and the table shows each side's median time per call and the medians of the
per-round ratios vdev / CPU, of wall time and of process CPU time (all threads,
gloo's included; rank 0). On a machine shared with other jobs the CPU-time ratio is
the steadier measure of what vccl adds.
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


def time_batch(call, number):
    """Wall time and process CPU time per call."""
    dist.barrier()  # both processes start the batch together
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        call()
    return (time.perf_counter() - start) / number, (time.process_time() - start_cpu) / number


def worker(rank, world_size, port, rounds, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device(torch_vdev.BACKEND_NAME, rank)
    torch.vdev.set_device(device)
    dist.init_process_group(
        f"cpu:gloo,{torch_vdev.BACKEND_NAME}:{torch_vdev.distributed.BACKEND_NAME}",
        rank=rank, world_size=world_size, device_id=device)
    torch.set_num_threads(1)
    for name, make, number in CASES:
        calls = {"cpu": make("cpu"), "vdev": make(device)}
        for call in calls.values():  # warm up
            time_batch(call, max(1, number // 4))
        times = {"cpu": [], "vdev": []}
        for round_ in range(rounds):
            order = ["vdev", "cpu"] if round_ % 2 == 0 else ["cpu", "vdev"]
            for side in order:
                times[side].append(time_batch(calls[side], number))
        if rank == 0:
            def median_ratio(index):
                return statistics.median(v[index] / c[index] for v, c in zip(times["vdev"], times["cpu"]))

            results.put((name, statistics.median(t[0] for t in times["vdev"]),
                         statistics.median(t[0] for t in times["cpu"]), median_ratio(0), median_ratio(1)))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--port", type=int, default=29651)
    args = parser.parse_args()
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(worker, args=(2, args.port, 7 if args.quick else 31, results), nprocs=2,
                       start_method="spawn")
    print("| case | vdev (vccl) | CPU (gloo) | vdev / CPU, wall | vdev / CPU, CPU time | target |\n"
          "|---|---|---|---|---|---|")
    failed = False
    for _ in CASES:
        name, vdev_time, cpu_time, ratio, cpu_time_ratio = results.get()
        ok = ratio <= LIMIT
        failed |= not ok
        print(f"| {name} | {vdev_time * 1e6:.1f} µs | {cpu_time * 1e6:.1f} µs | {ratio:.3f}× "
              f"| {cpu_time_ratio:.3f}× | ≤ {LIMIT}× {'' if ok else '(missed)'} |")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
