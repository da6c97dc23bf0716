"""Train a small CNN classifier on vdev from synthetic images.

    python examples/train_cnn.py                 # on vdev
    python examples/train_cnn.py --device cpu    # the same run on CPU: the same losses
    python examples/train_cnn.py --amp bf16      # mixed precision (also: fp16)

Each class is a fixed random 16x16 pattern; samples are a pattern plus noise.
"""

from typing import Any, Iterator, List, Optional

import torch
import torch.nn.functional as F

from training import Batch, main, train

CLASSES, SIZE, BATCH = 4, 16, 32


def make_model() -> torch.nn.Module:
    def block(channels_in: int, channels_out: int) -> List[torch.nn.Module]:
        return [torch.nn.Conv2d(channels_in, channels_out, 3, padding=1), torch.nn.BatchNorm2d(channels_out),
                torch.nn.ReLU(), torch.nn.MaxPool2d(2)]

    return torch.nn.Sequential(
        *block(1, 8), *block(8, 16), torch.nn.Flatten(), torch.nn.Linear(16 * (SIZE // 4) ** 2, CLASSES))


def synthetic_batches(seed: int) -> Iterator[Batch]:
    generator = torch.Generator().manual_seed(seed)
    patterns = torch.randn(CLASSES, 1, SIZE, SIZE, generator=generator)
    while True:
        labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
        images = patterns[labels] + 1.5 * torch.randn(BATCH, 1, SIZE, SIZE, generator=generator)
        yield images, labels


def run(device: str, steps: int, amp: str = "none", seed: int = 0,
        progress: Optional[Any] = None) -> List[float]:
    torch.manual_seed(seed)
    model = make_model().to(device)
    return train(model, synthetic_batches(seed), F.cross_entropy, device, steps, amp, lr=3e-3,
                 progress=progress)


if __name__ == "__main__":
    main("CNN classifier", 30, run)
