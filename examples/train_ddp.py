"""Data-parallel training of the CNN classifier on vdev, one process per device.

    torchrun --nproc-per-node 2 examples/train_ddp.py            # vdev:0 and vdev:1
    torchrun --nproc-per-node 2 examples/train_ddp.py --device cpu  # the same on CPU (gloo)

Each process trains on its own vdev device (local rank i on vdev:i; more processes
than devices need VDEV_DEVICE_COUNT) with its share of every batch. DDP averages the
gradients over vccl, vdev's torch.distributed backend. Rank 0 shows a progress bar
(tqdm: pip install ".[examples]").
"""

import os
import time
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from train_cnn import make_model, synthetic_batches
from training import Batch, parse_args, train


def shard(batches: Iterator[Batch], rank: int, world_size: int) -> Iterator[Batch]:
    """Every process draws the same global batches and keeps its slice."""
    for inputs, targets in batches:
        yield inputs.chunk(world_size)[rank], targets.chunk(world_size)[rank]


def main() -> None:
    args = parse_args("CNN classifier, data parallel", 30)
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "cpu":
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        device = torch.device(torch.device(args.device).type, local_rank)
        torch.get_device_module(device.type).set_device(device)
        # The device selects its backend: vccl for vdev, as NCCL for CUDA.
        dist.init_process_group(device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    model = DistributedDataParallel(make_model().to(device))
    progress = None
    if rank == 0:
        from tqdm import tqdm

        print(f"{world_size} processes on {device.type}, backend {dist.get_backend()}, {args.steps} steps")
        progress = tqdm(total=args.steps, unit="step")
    start = time.perf_counter()
    losses = train(model, shard(synthetic_batches(args.seed), rank, world_size), F.cross_entropy,
                   str(device), args.steps, args.amp, lr=3e-3, progress=progress)
    elapsed = time.perf_counter() - start
    final = torch.tensor([losses[0], losses[-1]], device=device)
    dist.all_reduce(final, op=dist.ReduceOp.AVG)
    if rank == 0:
        first, last = final.tolist()
        print(f"final loss {last:.6f}  (first {first:.6f}, mean over ranks, {elapsed:.1f} s)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
