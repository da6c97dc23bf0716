"""CUDA's fused attention ops, which have no CPU kernel, on vdev (torch.nn.attention.varlen
and code written for accelerators call them directly): FlashAttention's and the
memory-efficient kernel's outputs, logsumexp and gradients against the math path on
the CPU in float32, with their causal masks' alignments."""

import contextlib
import math

import pytest
import torch
from torch.testing import assert_close

DEVICE = torch._C._get_privateuse1_backend_name()
LOW = {"atol": 2e-2, "rtol": 2e-2}


def reference(q, k, v, is_causal=False, window=(-1, -1), scale=None, bias=None, bottom_right=True):
    """One sequence, (length, heads, dim) inputs in float32: (output, logsumexp (heads,
    length)). The causal mask and windows align to the bottom-right corner, or the
    top-left one; `bias` (heads, queries, keys) is added to the scaled scores."""
    q, k, v = (t.transpose(0, 1).float() for t in (q, k, v))
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(1, 2) * scale
    if bias is not None:
        scores = scores + bias.float()
    rows = torch.arange(q.shape[1]).unsqueeze(1) + (k.shape[1] - q.shape[1] if bottom_right else 0)
    keys = torch.arange(k.shape[1]).unsqueeze(0)
    left, right = window[0], 0 if is_causal else window[1]
    allowed = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool)
    if right >= 0:
        allowed &= keys <= rows + right
    if left >= 0:
        allowed &= keys >= rows - left
    scores = scores.masked_fill(~allowed, float("-inf"))
    logsumexp = scores.logsumexp(-1)
    weights = torch.nan_to_num(torch.exp(scores - logsumexp.unsqueeze(-1)), nan=0.0)
    logsumexp = logsumexp.masked_fill(logsumexp.isneginf(), float("inf"))
    return (weights @ v).transpose(0, 1), logsumexp


def make(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@pytest.mark.parametrize("is_causal", (False, True))
@pytest.mark.parametrize("kv_heads", (4, 2))
def test_flash_attention_dense_matches_the_math_path(dtype, is_causal, kv_heads):
    q, k, v = make(2, 11, 4, 8, dtype=dtype), make(2, 32, kv_heads, 8, dtype=dtype, seed=1), make(2, 32, kv_heads, 8, dtype=dtype, seed=2)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    out, logsumexp, rng_state, unused, debug = torch.ops.aten._flash_attention_forward(
        *leaves, None, None, 11, 32, 0.0, is_causal, False, scale=0.3
    )
    assert out.dtype == dtype and logsumexp.dtype == torch.float32 and logsumexp.shape == (2, 4, 11)
    assert rng_state.dtype == torch.uint64 and rng_state.shape == (2,)
    cpu_leaves = [t.float().requires_grad_() for t in (q, k, v)]
    for b in range(2):
        want_out, want_lse = reference(*(t[b] for t in cpu_leaves), is_causal=is_causal, scale=0.3)
        assert_close(out[b].cpu().float(), want_out.detach(), **LOW)
        assert_close(logsumexp[b].cpu(), want_lse.detach(), **LOW)
    grad = make(*out.shape, dtype=dtype, seed=3)
    (out.float() * grad.to(DEVICE).float()).sum().backward()
    torch.stack([reference(*(t[b] for t in cpu_leaves), is_causal=is_causal, scale=0.3)[0] for b in range(2)]).mul(
        grad.float()
    ).sum().backward()
    for got, want in zip(leaves, cpu_leaves):
        assert got.grad.dtype == dtype
        assert_close(got.grad.cpu().float(), want.grad, **LOW)


def test_flash_attention_packed_sequences_with_a_window_match_the_math_path():
    lengths_q, lengths_k = [3, 1, 6], [5, 4, 6]
    cum_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32)
    cum_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32)
    q, k, v = make(10, 4, 16), make(15, 2, 16, seed=1), make(15, 2, 16, seed=2)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    out, logsumexp, *_ = torch.ops.aten._flash_attention_forward(
        *leaves, cum_q.to(DEVICE), cum_k.to(DEVICE), 6, 6, 0.0, True, False, window_size_left=2
    )
    assert logsumexp.shape == (4, 10)
    grad = make(*out.shape, seed=3)
    (out.float() * grad.to(DEVICE).float()).sum().backward()
    cpu_leaves = [t.float().requires_grad_() for t in (q, k, v)]
    total = 0
    for s in range(3):
        parts = (cpu_leaves[0][cum_q[s] : cum_q[s + 1]], cpu_leaves[1][cum_k[s] : cum_k[s + 1]], cpu_leaves[2][cum_k[s] : cum_k[s + 1]])
        want_out, want_lse = reference(*parts, is_causal=True, window=(2, -1))
        assert_close(out[cum_q[s] : cum_q[s + 1]].cpu().float(), want_out.detach(), **LOW)
        assert_close(logsumexp[:, cum_q[s] : cum_q[s + 1]].cpu(), want_lse.detach(), **LOW)
        total = total + (want_out * grad[cum_q[s] : cum_q[s + 1]].float()).sum()
    total.backward()
    for got, want in zip(leaves, cpu_leaves):
        assert_close(got.grad.cpu().float(), want.grad, **LOW)


def test_flash_attention_dropout_is_replayed_by_its_backward():
    """With dropout, the backward uses the forward's masks: gradients equal autograd's
    through the same computation (the output is linear in value)."""
    q, k, v = (make(1, 8, 2, 8, seed=s).to(DEVICE) for s in range(3))
    value = v.clone().requires_grad_()
    torch.manual_seed(0)
    out, _, rng_state, _, _ = torch.ops.aten._flash_attention_forward(q, k, value, None, None, 8, 8, 0.5, False, False)
    torch.manual_seed(0)
    again, *_ = torch.ops.aten._flash_attention_forward(q, k, v, None, None, 8, 8, 0.5, False, False)
    assert torch.equal(out.cpu(), again.cpu())  # the device generator's seed decides the masks
    (grad_value,) = torch.autograd.grad(out.float().sum(), value)
    # d(sum out)/d(value) = column sums of the dropped-out attention weights; recompute
    # them as the output for value = identity rows.
    eye = torch.eye(8, dtype=torch.float16).view(1, 8, 1, 8).expand(1, 8, 2, 8).contiguous().to(DEVICE)
    torch.manual_seed(0)
    weights, *_ = torch.ops.aten._flash_attention_forward(q, k, eye, None, None, 8, 8, 0.5, False, False)
    assert_close(grad_value.cpu().float(), weights.cpu().float().sum(1, keepdim=True).transpose(1, 3).expand_as(grad_value).contiguous(), **LOW)


def test_flash_attention_refuses_float32_as_cuda_does():
    q = torch.randn(1, 4, 2, 8, device=DEVICE)
    with pytest.raises(RuntimeError, match="only support fp16 and bf16"):
        torch.ops.aten._flash_attention_forward(q, q, q, None, None, 4, 4, 0.0, False, False)


def test_varlen_attn_trains_on_vdev():
    from torch.nn.attention.varlen import varlen_attn

    cum = torch.tensor([0, 3, 7], dtype=torch.int32)
    q, k, v = make(7, 2, 8), make(7, 2, 8, seed=1), make(7, 2, 8, seed=2)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    out = varlen_attn(*leaves, cum.to(DEVICE), cum.to(DEVICE), 4, 4, window_size=(-1, 0))
    out.float().sum().backward()
    cpu_leaves = [t.float().requires_grad_() for t in (q, k, v)]
    want = torch.cat([reference(*(t[cum[s] : cum[s + 1]] for t in cpu_leaves), is_causal=True)[0] for s in range(2)])
    want.sum().backward()
    assert_close(out.cpu().float(), want.detach(), **LOW)
    for got, expected in zip(leaves, cpu_leaves):
        assert_close(got.grad.cpu().float(), expected.grad, **LOW)


@pytest.mark.parametrize("dtype", (torch.float16, torch.float32), ids=str)
@pytest.mark.parametrize("mask_type", (0, 1, 2))
def test_efficient_attention_with_a_bias_matches_the_math_path(dtype, mask_type):
    q, k, v = make(2, 11, 3, 8, dtype=dtype), make(2, 16, 3, 8, dtype=dtype, seed=1), make(2, 16, 3, 4, dtype=dtype, seed=2)
    bias = make(2, 3, 11, 16, dtype=dtype, seed=3)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v, bias)]
    out, logsumexp, seed, offset, max_q, max_k = torch.ops.aten._efficient_attention_forward(
        *leaves[:3], leaves[3], None, None, None, None, 0.0, mask_type, True, scale=0.5
    )
    assert (out.shape, out.dtype) == ((2, 11, 3, 4), dtype)
    assert logsumexp.shape == (2, 3, 32) and (max_q, max_k) == (11, 16)
    grad = make(*out.shape, dtype=dtype, seed=4)
    (out.float() * grad.to(DEVICE).float()).sum().backward()
    cpu_leaves = [t.float().requires_grad_() for t in (q, k, v, bias)]
    total = 0
    for b in range(2):
        want_out, want_lse = reference(
            *(t[b] for t in cpu_leaves[:3]), is_causal=mask_type != 0, scale=0.5, bias=cpu_leaves[3][b],
            bottom_right=mask_type == 2,
        )
        assert_close(out[b].cpu().float(), want_out.detach(), **LOW)
        assert_close(logsumexp[b, :, :11].cpu(), want_lse.detach(), **LOW)
        total = total + (want_out * grad[b].float()).sum()
    total.backward()
    for got, want in zip(leaves, cpu_leaves):
        assert got.grad.dtype == dtype
        assert_close(got.grad.cpu().float(), want.grad, **LOW)


@pytest.mark.parametrize("dtype", (torch.float64, torch.int64, torch.bool, torch.complex64), ids=str)
def test_efficient_attention_refuses_the_dtypes_cudas_kernels_refuse(dtype):
    # CUDA's memory-efficient kernels exist for float32, float16 and bfloat16 only and
    # raise this error, forward and backward, before any work.
    q, k, v = (make(1, 5, 2, 8, dtype=dtype, seed=seed).to(DEVICE) for seed in (0, 1, 2))
    with pytest.raises(RuntimeError, match="Only fp32, half & bf16 supported at the moment"):
        torch.ops.aten._efficient_attention_forward(q, k, v, None, None, None, None, None, 0.0, 0, True)
    logsumexp = torch.zeros(1, 2, 32, device=DEVICE)
    seed = torch.zeros((), dtype=torch.int64, device=DEVICE)
    with pytest.raises(RuntimeError, match="Only fp32, half & bf16 supported at the moment"):
        torch.ops.aten._efficient_attention_backward(
            q, q, k, v, None, q, None, None, 5, 5, logsumexp, 0.0, seed, seed, 0, False)
    torch.vdev.synchronize()


def test_efficient_attention_packed_sequences_match_the_math_path():
    cum_q = torch.tensor([0, 2, 7, 8], dtype=torch.int32)
    cum_k = torch.tensor([0, 4, 6, 11], dtype=torch.int32)
    q, k, v = make(1, 8, 2, 8), make(1, 11, 2, 8, seed=1), make(1, 11, 2, 8, seed=2)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    out, logsumexp, *_ = torch.ops.aten._efficient_attention_forward(
        *leaves, None, cum_q.to(DEVICE), cum_k.to(DEVICE), 5, 5, 0.0, 2, True
    )
    assert logsumexp.shape == (3, 2, 32)
    grad = make(*out.shape, seed=3)
    (out.float() * grad.to(DEVICE).float()).sum().backward()
    cpu_leaves = [t[0].float().requires_grad_() for t in (q, k, v)]
    total = 0
    for s in range(3):
        qs, ks = slice(cum_q[s], cum_q[s + 1]), slice(cum_k[s], cum_k[s + 1])
        want_out, want_lse = reference(cpu_leaves[0][qs], cpu_leaves[1][ks], cpu_leaves[2][ks], is_causal=True)
        assert_close(out[0, qs].cpu().float(), want_out.detach(), **LOW)
        assert_close(logsumexp[s, :, : cum_q[s + 1] - cum_q[s]].cpu(), want_lse.detach(), **LOW)
        total = total + (want_out * grad[0, qs].float()).sum()
    total.backward()
    for got, want in zip(leaves, cpu_leaves):
        assert_close(got.grad[0].cpu().float(), want.grad, **LOW)


@pytest.mark.parametrize("is_causal", (False, True))
def test_float64_attention_takes_the_math_path_and_has_a_double_backward_as_on_cuda(is_causal):
    # CUDA's fused kernels take no float64 input, so it computes the math path, whose
    # backward is differentiable; the CPU's flash backward is not (TestModule test_gradgrad
    # of the Transformer modules).
    query, key, value = (make(2, 3, 5, 4, dtype=torch.float64, seed=seed) for seed in range(3))
    inputs = [t.to(DEVICE).requires_grad_() for t in (query, key, value)]

    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    assert torch.autograd.gradgradcheck(attention, inputs)
    assert_close(attention(*inputs).cpu(), attention(query, key, value))


class AttentionOps(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops scaled_dot_product_attention decomposes into."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


BACKENDS = {int(backend): backend for backend in torch.nn.attention.SDPBackend.__members__.values()}
# An op only each backend's path runs: the CPU's flash kernel, or the math path's
# softmax (the math path itself is a composite, which a dispatch mode sees decomposed).
PATH_OPS = {
    torch.nn.attention.SDPBackend.FLASH_ATTENTION: "_scaled_dot_product_flash_attention_for_cpu",
    torch.nn.attention.SDPBackend.MATH: "_safe_softmax",
}


@pytest.mark.parametrize("backends", ("default", "math"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16), ids=str)
def test_fused_sdp_choice_names_the_path_attention_takes(dtype, backends):
    """torch._fused_sdp_choice answers what vdev's attention then computes: the CPU's
    choice (and path), except in float64, which CUDA's fused kernels do not take."""
    query, key, value = (make(2, 3, 5, 8, dtype=dtype, seed=seed).to(DEVICE) for seed in range(3))
    enabled = (
        torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH])
        if backends == "math"
        else contextlib.nullcontext()
    )
    with enabled:
        choice = BACKENDS[torch._fused_sdp_choice(query, key, value)]
        cpu_choice = BACKENDS[torch._fused_sdp_choice(query.cpu(), key.cpu(), value.cpu())]
        with AttentionOps() as mode:
            result = torch.nn.functional.scaled_dot_product_attention(query, key, value)
    expected = torch.nn.attention.SDPBackend.MATH if dtype == torch.float64 else cpu_choice
    assert choice == expected
    assert [op for op in PATH_OPS.values() if op in mode.ops] == [PATH_OPS[choice]]
    reference = torch.nn.functional.scaled_dot_product_attention(query.cpu().double(), key.cpu().double(), value.cpu().double())
    assert_close(result.cpu(), reference.to(dtype), **(LOW if dtype == torch.float16 else {}))


def test_float64_attention_with_the_math_backend_disabled_raises_cudas_error():
    query = make(2, 3, 5, 8, dtype=torch.float64).to(DEVICE)
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
        with pytest.raises(RuntimeError, match="^No available kernel. Aborting execution."):
            torch._fused_sdp_choice(query, query, query)
        with pytest.raises(RuntimeError, match="^No available kernel. Aborting execution."):
            torch.nn.functional.scaled_dot_product_attention(query, query, query)


EFFICIENT_ONLY = [torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]


@pytest.mark.parametrize("mask", ("none", "causal", "bool", "additive"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16), ids=str)
def test_attention_with_only_the_efficient_backend_runs_cudas_efficient_kernel(dtype, mask):
    """As on CUDA, where the CPU finds no backend: outputs and gradients against the CPU's
    math path in float32 (with an additive or boolean mask, or causal)."""
    query, key, value = (make(2, 3, 5, 8, dtype=dtype, seed=seed) for seed in range(3))
    value = make(2, 3, 7, 16, dtype=dtype, seed=5)  # its own head dimension and length,
    key = make(2, 3, 7, 8, dtype=dtype, seed=6)  # which CPU's flash kernel refuses
    attn_mask = {"none": None, "causal": None, "bool": make(5, 7, dtype=torch.float32, seed=7) > 0,
                 "additive": make(2, 1, 5, 7, dtype=dtype, seed=8)}[mask]
    inputs = [t.to(DEVICE).requires_grad_() for t in (query, key, value)]
    cpu_inputs = [t.float().requires_grad_() for t in (query, key, value)]

    def attention(q, k, v):
        bias = None if attn_mask is None else attn_mask.to(q.device, q.dtype if attn_mask.is_floating_point() else None)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=mask == "causal")

    with torch.nn.attention.sdpa_kernel(EFFICIENT_ONLY):
        assert BACKENDS[torch._fused_sdp_choice(*inputs)] == torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION
        with pytest.raises(RuntimeError, match="No viable backend"):
            attention(*cpu_inputs)
        with AttentionOps() as mode:
            result = attention(*inputs)
        assert "_scaled_dot_product_efficient_attention" in mode.ops
        result.backward(torch.ones_like(result))
    expected = attention(*cpu_inputs)
    expected.backward(torch.ones_like(expected))
    tolerance = {} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    assert_close(result.cpu().float(), expected, **tolerance)
    for got, want in zip(inputs, cpu_inputs):
        assert_close(got.grad.cpu().float(), want.grad, **tolerance)


def test_attention_with_only_the_efficient_backend_refuses_what_cudas_kernel_refuses():
    # A head dimension not in whole 16-byte rows (6 float32 values), as CUDA's kernel
    # refuses it; and float64, which it does not take.
    for dtype, head_dim in ((torch.float32, 6), (torch.float64, 8)):
        query = make(2, 3, 5, head_dim, dtype=dtype).to(DEVICE)
        with torch.nn.attention.sdpa_kernel(EFFICIENT_ONLY), pytest.raises(RuntimeError):
            torch.nn.functional.scaled_dot_product_attention(query, query, query)
