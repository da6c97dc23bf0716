"""Profile a few training steps on vdev: a table of CPU ops with their device kernels,
a Chrome / Perfetto trace with a row per vdev stream, and a memory snapshot.

    python examples/profile_training.py --out /tmp/vdev_profile
    python -m torch.cuda._memory_viz trace_plot /tmp/vdev_profile/snapshot.pickle -o memory.html

Open trace.json in https://ui.perfetto.dev (or chrome://tracing) and snapshot.pickle in
https://pytorch.org/memory_viz.
"""

import argparse
import pathlib

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="vdev_profile", help="directory for trace.json and snapshot.pickle")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.LayerNorm(512), torch.nn.Linear(512, 10)
    ).to("vdev")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(64, 128, device="vdev")
    targets = torch.randint(0, 10, (64,), device="vdev")

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss.item()

    # Memory history from the start, so the snapshot names the code that allocated.
    torch.vdev.memory._record_memory_history(max_entries=100_000)
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        schedule=schedule(wait=1, warmup=1, active=args.steps - 2),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for _ in range(args.steps):
            loss = step()
            prof.step()
    torch.vdev.memory._dump_snapshot(str(out / "snapshot.pickle"))
    torch.vdev.memory._record_memory_history(enabled=None)
    prof.export_chrome_trace(str(out / "trace.json"))

    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
    print(torch.vdev.memory_summary(abbreviated=True))
    print(f"loss {loss:.4f}; wrote {out / 'trace.json'} and {out / 'snapshot.pickle'}")


if __name__ == "__main__":
    main()
