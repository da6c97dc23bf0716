"""The training loop the examples share: command line, mixed precision, a tqdm
progress bar and the final loss. Used by train_cnn.py and train_lm.py (tqdm comes with
the `examples` extra: pip install ".[examples]")."""

import argparse
import sys
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}

Batch = Tuple[torch.Tensor, torch.Tensor]


def parse_args(description: str, default_steps: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="vdev", help="vdev (default), vdev:1, cpu, ...")
    parser.add_argument("--amp", choices=AMP_DTYPES, default="none",
                        help="autocast dtype; fp16 also scales the loss with GradScaler")
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def train(
    model: torch.nn.Module,
    batches: Iterator[Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: str,
    steps: int,
    amp: str = "none",
    lr: float = 1e-3,
    progress: Optional[Any] = None,
) -> List[float]:
    """Trains `model` (already on `device`) for `steps` batches with fused AdamW and
    returns the loss of every step. Batches come from the host and are moved over.
    `progress`, a tqdm bar, advances by a step and shows the loss."""
    device_type = torch.device(device).type
    amp_dtype = AMP_DTYPES[amp]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    scaler = torch.amp.GradScaler(device_type, enabled=amp_dtype is torch.float16)
    losses = []
    model.train()
    for _ in range(steps):
        inputs, targets = (t.to(device) for t in next(batches))
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        if progress is not None:
            progress.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
            progress.update()
    if progress is not None:
        progress.close()
    return losses


def main(description: str, default_steps: int, run: Callable[..., List[float]]) -> None:
    """Parses the command line, runs `run(device, steps, amp, seed, progress)` and reports."""
    from tqdm import tqdm

    args = parse_args(description, default_steps)
    print(f"{description} on {args.device}, amp={args.amp}, {args.steps} steps")
    start = time.perf_counter()
    losses = run(args.device, args.steps, args.amp, args.seed, tqdm(total=args.steps, unit="step"))
    elapsed = time.perf_counter() - start
    print(f"final loss {losses[-1]:.6f}  (first {losses[0]:.6f}, {elapsed:.1f} s)")
