"""The training steps the benchmarks time and the tests check for fallback-free runs.
Inputs are drawn on the CPU, so a model gets the same data on every device."""

import torch
import torch.nn.functional as F


def _classifier_step(model, optimizer, inputs, targets):
    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return step


def mlp_step(device: str, batch: int = 64):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(batch, 256).to(device)
    targets = torch.randint(0, 10, (batch,)).to(device)
    return _classifier_step(model, optimizer, inputs, targets)


def cnn_step(device: str, batch: int = 16):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.randn(batch, 3, 32, 32).to(device)
    targets = torch.randint(0, 10, (batch,)).to(device)
    return _classifier_step(model, optimizer, inputs, targets)


def transformer_step(device: str, batch: int = 8, length: int = 32, vocab: int = 1000, layers: int = 2):
    torch.manual_seed(0)

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, 64)
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = torch.nn.LayerNorm(64)
            self.head = torch.nn.Linear(64, vocab)

        def forward(self, tokens):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
            return self.head(self.norm(self.encoder(self.embed(tokens), mask=mask, is_causal=True)))

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, vocab, (batch, length + 1)).to(device)

    def step():
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step


TRAINING_STEPS = {"mlp": mlp_step, "cnn": cnn_step, "transformer": transformer_step}
