"""Train a small transformer language model on vdev from synthetic text.

    python examples/train_lm.py                  # on vdev
    python examples/train_lm.py --device cpu     # the same run on CPU: the same losses
    python examples/train_lm.py --amp bf16       # mixed precision (also: fp16)

The text follows a fixed rule, next = (5 * token + 3) mod 32, with 10% random tokens,
so a causal model can learn to predict it.
"""

import math
from typing import Any, Iterator, List, Optional

import torch
import torch.nn.functional as F

from training import Batch, main, train

VOCAB, CONTEXT, BATCH, WIDTH = 32, 32, 16, 64


class LanguageModel(torch.nn.Module):
    def __init__(self, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tokens = torch.nn.Embedding(VOCAB, WIDTH)
        self.positions = torch.nn.Parameter(torch.randn(CONTEXT, WIDTH) / math.sqrt(WIDTH))
        layer = torch.nn.TransformerEncoderLayer(
            WIDTH, heads, dim_feedforward=2 * WIDTH, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        hidden = self.tokens(tokens) + self.positions[:length]
        return self.head(self.encoder(hidden, mask=mask, is_causal=True))


def synthetic_batches(seed: int) -> Iterator[Batch]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        text = torch.empty(BATCH, CONTEXT + 1, dtype=torch.long)
        text[:, 0] = torch.randint(0, VOCAB, (BATCH,), generator=generator)
        for position in range(1, CONTEXT + 1):
            text[:, position] = (5 * text[:, position - 1] + 3) % VOCAB
            noise = torch.rand(BATCH, generator=generator) < 0.1
            text[noise, position] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=generator)
        yield text[:, :-1], text[:, 1:]


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def run(device: str, steps: int, amp: str = "none", seed: int = 0,
        progress: Optional[Any] = None) -> List[float]:
    torch.manual_seed(seed)
    model = LanguageModel().to(device)
    # Dropout draws from the generator of the model's device; the initialisation above
    # drew from the CPU's: seeding again starts both devices' draws alike.
    torch.manual_seed(seed)
    return train(model, synthetic_batches(seed), next_token_loss, device, steps, amp, lr=3e-3,
                 progress=progress)


if __name__ == "__main__":
    main("Transformer language model", 30, run)
