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


def mlp_step(device: str, batch: int = 64, dropout: float = 0.1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Dropout(dropout),
        torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(batch, 256).to(device)
    targets = torch.randint(0, 10, (batch,)).to(device)
    return _classifier_step(model, optimizer, inputs, targets)


def cnn_step(device: str, batch: int = 16, capturable: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    inputs = torch.randn(batch, 3, 32, 32).to(device)
    targets = torch.randint(0, 10, (batch,)).to(device)
    return _classifier_step(model, optimizer, inputs, targets)


def transformer_step(
    device: str, batch: int = 8, length: int = 32, vocab: int = 1000, layers: int = 2, dropout: float = 0.1,
    capturable: bool = False,
):
    torch.manual_seed(0)

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, 64)
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=dropout, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = torch.nn.LayerNorm(64)
            self.head = torch.nn.Linear(64, vocab)

        def forward(self, tokens):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
            return self.head(self.norm(self.encoder(self.embed(tokens), mask=mask, is_causal=True)))

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)
    tokens = torch.randint(0, vocab, (batch, length + 1)).to(device)

    def step():
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step


class MoeBlock(torch.nn.Module):
    """A Mixtral-style sparse mixture-of-experts block, with transformers' device branch:
    expert load is counted with torch.histc on the integer expert indices except on
    the CPU (and MPS), which cannot."""

    def __init__(self, hidden=16, experts=4, top_k=2):
        super().__init__()
        self.top_k, self.experts = top_k, experts
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.w = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(experts))

    def forward(self, x):
        weights = torch.softmax(self.gate(x), dim=-1)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        if x.device.type in ("cpu", "mps"):
            load = torch.bincount(chosen.flatten(), minlength=self.experts)
        else:
            load = torch.histc(chosen.int(), bins=self.experts, min=0, max=self.experts - 1)
        out = torch.zeros_like(x)
        for expert in range(self.experts):
            if load[expert] == 0:
                continue
            token, slot = torch.where(chosen == expert)
            out.index_add_(0, token, self.w[expert](x[token]) * weights[token, slot, None])
        balance = (load.float() / load.sum()).square().sum()
        return out, balance


def moe_step(device: str, tokens: int = 32, hidden: int = 16):
    torch.manual_seed(0)
    block = MoeBlock(hidden).to(device)
    optimizer = torch.optim.SGD(block.parameters(), lr=0.1)
    data = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)).to(device)

    def step():
        out, balance = block(data)
        loss = out.square().mean() + 0.01 * balance
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return step


TRAINING_STEPS = {"mlp": mlp_step, "cnn": cnn_step, "transformer": transformer_step}
