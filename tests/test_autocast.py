"""Autocast on vdev applies CUDA's cast policy, op by op."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import torch_vdev

LOWER_PRECISION = [torch.float16, torch.bfloat16]
REGISTERED = dict(torch_vdev._C.autocast_ops())


class Inputs:
    """Makes an op's inputs: floating tensors of `dtype` (the first ones of
    `first_dtypes` if given) with values in (0.1, 0.9), where every listed op is defined."""

    def __init__(self, dtype, first_dtypes=()):
        self.dtype = dtype
        self.first_dtypes = list(first_dtypes)
        self.generator = torch.Generator().manual_seed(0)

    def _next_dtype(self):
        return self.first_dtypes.pop(0) if self.first_dtypes else self.dtype

    def rand(self, *shape):
        values = torch.rand(shape, generator=self.generator) * 0.8 + 0.1
        return values.to(device="vdev", dtype=self._next_dtype())

    def of(self, values):
        return torch.tensor(values, device="vdev", dtype=self._next_dtype())


def ints(values):
    return torch.tensor(values, device="vdev")


def signs(n):
    return [1.0 if i % 2 else -1.0 for i in range(n)]


# For each op of the policy lists: (positional args, keyword args) from an Inputs.
SAMPLES = {
    "_convolution.deprecated": lambda x: (
        (x.rand(1, 2, 5, 5), x.rand(3, 2, 3, 3), x.rand(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
         False, False, False), {}),
    "_convolution": lambda x: (
        (x.rand(1, 2, 5, 5), x.rand(3, 2, 3, 3), x.rand(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
         False, False, False, False), {}),
    "conv1d": lambda x: ((x.rand(1, 2, 6), x.rand(3, 2, 3), x.rand(3)), {}),
    "conv2d": lambda x: ((x.rand(1, 2, 5, 5), x.rand(3, 2, 3, 3), x.rand(3)), {}),
    "conv3d": lambda x: ((x.rand(1, 2, 4, 4, 4), x.rand(3, 2, 2, 2, 2), x.rand(3)), {}),
    "conv_tbc": lambda x: ((x.rand(5, 2, 3), x.rand(2, 3, 4), x.rand(4)), {}),
    "conv_transpose1d": lambda x: ((x.rand(1, 2, 5), x.rand(2, 3, 3), x.rand(3)), {}),
    "conv_transpose2d.input": lambda x: ((x.rand(1, 2, 4, 4), x.rand(2, 3, 3, 3), x.rand(3)), {}),
    "conv_transpose3d.input": lambda x: ((x.rand(1, 2, 3, 3, 3), x.rand(2, 3, 2, 2, 2), x.rand(3)), {}),
    "convolution": lambda x: (
        (x.rand(1, 2, 5, 5), x.rand(3, 2, 3, 3), x.rand(3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
    "prelu": lambda x: ((x.rand(2, 3, 4), x.rand(3)), {}),
    "addmm": lambda x: ((x.rand(3, 5), x.rand(3, 4), x.rand(4, 5)), {}),
    "addmv": lambda x: ((x.rand(3), x.rand(3, 4), x.rand(4)), {}),
    "addr": lambda x: ((x.rand(3, 4), x.rand(3), x.rand(4)), {}),
    "matmul": lambda x: ((x.rand(2, 3, 4), x.rand(4, 5)), {}),
    "einsum": lambda x: (("ij,jk->ik", [x.rand(3, 4), x.rand(4, 5)]), {}),
    "mm": lambda x: ((x.rand(3, 4), x.rand(4, 5)), {}),
    "mv": lambda x: ((x.rand(3, 4), x.rand(4)), {}),
    "linalg_vecdot": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "linear": lambda x: ((x.rand(3, 4), x.rand(5, 4), x.rand(5)), {}),
    "addbmm": lambda x: ((x.rand(3, 5), x.rand(2, 3, 4), x.rand(2, 4, 5)), {}),
    "baddbmm": lambda x: ((x.rand(2, 3, 5), x.rand(2, 3, 4), x.rand(2, 4, 5)), {}),
    "bmm": lambda x: ((x.rand(2, 3, 4), x.rand(2, 4, 5)), {}),
    "chain_matmul": lambda x: (([x.rand(3, 4), x.rand(4, 5), x.rand(5, 2)],), {}),
    "linalg_multi_dot": lambda x: (([x.rand(3, 4), x.rand(4, 5), x.rand(5, 2)],), {}),
    "_thnn_fused_lstm_cell": lambda x: ((x.rand(2, 12), x.rand(2, 12), x.rand(2, 3), x.rand(12), x.rand(12)), {}),
    "_thnn_fused_gru_cell": lambda x: ((x.rand(2, 9), x.rand(2, 9), x.rand(2, 3), x.rand(9), x.rand(9)), {}),
    "lstm_cell": lambda x: (
        (x.rand(2, 4), [x.rand(2, 3), x.rand(2, 3)], x.rand(12, 4), x.rand(12, 3), x.rand(12), x.rand(12)), {}),
    "gru_cell": lambda x: ((x.rand(2, 4), x.rand(2, 3), x.rand(9, 4), x.rand(9, 3), x.rand(9), x.rand(9)), {}),
    "rnn_tanh_cell": lambda x: ((x.rand(2, 4), x.rand(2, 3), x.rand(3, 4), x.rand(3, 3), x.rand(3), x.rand(3)), {}),
    "rnn_relu_cell": lambda x: ((x.rand(2, 4), x.rand(2, 3), x.rand(3, 4), x.rand(3, 3), x.rand(3), x.rand(3)), {}),
    "_scaled_dot_product_flash_attention": lambda x: ((x.rand(1, 2, 4, 8), x.rand(1, 2, 4, 8), x.rand(1, 2, 4, 8)), {}),
    "scaled_dot_product_attention": lambda x: ((x.rand(1, 2, 4, 8), x.rand(1, 2, 4, 8), x.rand(1, 2, 4, 8)), {}),
    "acos": lambda x: ((x.rand(3, 4),), {}),
    "asin": lambda x: ((x.rand(3, 4),), {}),
    "cosh": lambda x: ((x.rand(3, 4),), {}),
    "erfinv": lambda x: ((x.rand(3, 4),), {}),
    "exp": lambda x: ((x.rand(3, 4),), {}),
    "expm1": lambda x: ((x.rand(3, 4),), {}),
    "log": lambda x: ((x.rand(3, 4),), {}),
    "log10": lambda x: ((x.rand(3, 4),), {}),
    "log2": lambda x: ((x.rand(3, 4),), {}),
    "log1p": lambda x: ((x.rand(3, 4),), {}),
    "reciprocal": lambda x: ((x.rand(3, 4),), {}),
    "rsqrt": lambda x: ((x.rand(3, 4),), {}),
    "sinh": lambda x: ((x.rand(3, 4),), {}),
    "tan": lambda x: ((x.rand(3, 4),), {}),
    "pow.Tensor_Scalar": lambda x: ((x.rand(3, 4), 2.5), {}),
    "pow.Tensor_Tensor": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "pow.Scalar": lambda x: ((2.5, x.rand(3, 4)), {}),
    "softplus": lambda x: ((x.rand(3, 4),), {}),
    "layer_norm": lambda x: ((x.rand(3, 4), [4], x.rand(4), x.rand(4)), {}),
    "native_layer_norm": lambda x: ((x.rand(3, 4), [4], x.rand(4), x.rand(4), 1e-5), {}),
    "rms_norm": lambda x: ((x.rand(3, 4), [4], x.rand(4)), {}),
    "group_norm": lambda x: ((x.rand(2, 4, 3), 2, x.rand(4), x.rand(4)), {}),
    "frobenius_norm.dim": lambda x: ((x.rand(3, 4), [0, 1]), {}),
    "nuclear_norm": lambda x: ((x.rand(3, 4),), {}),
    "nuclear_norm.dim": lambda x: ((x.rand(3, 4), [0, 1]), {}),
    "cosine_similarity": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "poisson_nll_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4), True, False, 1e-8, 1), {}),
    "cosine_embedding_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4), x.of(signs(3))), {}),
    "nll_loss": lambda x: ((x.rand(3, 5), ints([0, 4, 2])), {}),
    "nll_loss2d": lambda x: ((x.rand(2, 3, 2, 2), ints([[[0, 1], [2, 0]], [[1, 1], [0, 2]]])), {}),
    "hinge_embedding_loss": lambda x: ((x.rand(4), x.of(signs(4))), {}),
    "kl_div": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "l1_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "smooth_l1_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "huber_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "mse_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "margin_ranking_loss": lambda x: ((x.rand(4), x.rand(4), x.of(signs(4))), {}),
    "multilabel_margin_loss": lambda x: ((x.rand(2, 4), ints([[3, 0, -1, 1], [1, 2, 3, -1]])), {}),
    "soft_margin_loss": lambda x: ((x.rand(4), x.of(signs(4))), {}),
    "triplet_margin_loss": lambda x: ((x.rand(3, 4), x.rand(3, 4), x.rand(3, 4)), {}),
    "multi_margin_loss": lambda x: ((x.rand(3, 4), ints([0, 3, 1])), {}),
    "binary_cross_entropy_with_logits": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "dist": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "pdist": lambda x: ((x.rand(4, 3),), {}),
    "cdist": lambda x: ((x.rand(3, 4), x.rand(2, 4)), {}),
    "renorm": lambda x: ((x.rand(3, 4), 2, 0, 1.0), {}),
    "logsumexp": lambda x: ((x.rand(3, 4), [1]), {}),
    "upsample_nearest1d": lambda x: ((x.rand(1, 2, 4), [8]), {}),
    "_upsample_nearest_exact1d": lambda x: ((x.rand(1, 2, 4), [8]), {}),
    "upsample_nearest2d": lambda x: ((x.rand(1, 2, 3, 3), [6, 6]), {}),
    "_upsample_nearest_exact2d": lambda x: ((x.rand(1, 2, 3, 3), [6, 6]), {}),
    "upsample_nearest3d": lambda x: ((x.rand(1, 1, 2, 2, 2), [4, 4, 4]), {}),
    "_upsample_nearest_exact3d": lambda x: ((x.rand(1, 1, 2, 2, 2), [4, 4, 4]), {}),
    "upsample_linear1d": lambda x: ((x.rand(1, 2, 4), [8], False), {}),
    "upsample_bilinear2d": lambda x: ((x.rand(1, 2, 3, 3), [6, 6], False), {}),
    "_upsample_bilinear2d_aa": lambda x: ((x.rand(1, 2, 3, 3), [6, 6], False), {}),
    "upsample_trilinear3d": lambda x: ((x.rand(1, 1, 2, 2, 2), [4, 4, 4], False), {}),
    "upsample_bicubic2d": lambda x: ((x.rand(1, 2, 3, 3), [6, 6], False), {}),
    "_upsample_bicubic2d_aa": lambda x: ((x.rand(1, 2, 3, 3), [6, 6], False), {}),
    "prod": lambda x: ((x.rand(3, 4),), {}),
    "prod.dim_int": lambda x: ((x.rand(3, 4), 1), {}),
    "softmax.int": lambda x: ((x.rand(3, 4), 1), {}),
    "log_softmax.int": lambda x: ((x.rand(3, 4), 1), {}),
    "cumprod": lambda x: ((x.rand(3, 4), 1), {}),
    "cumsum": lambda x: ((x.rand(3, 4), 1), {}),
    "linalg_vector_norm": lambda x: ((x.rand(3, 4),), {}),
    "linalg_matrix_norm": lambda x: ((x.rand(3, 4), 1), {}),
    "linalg_matrix_norm.str_ord": lambda x: ((x.rand(3, 4),), {}),
    "sum": lambda x: ((x.rand(3, 4),), {}),
    "sum.dim_IntList": lambda x: ((x.rand(3, 4), [1]), {}),
    "norm.Scalar": lambda x: ((x.rand(3, 4), 2), {}),
    "norm.ScalarOpt_dim": lambda x: ((x.rand(3, 4), 2, [1]), {}),
    "addcdiv": lambda x: ((x.rand(3, 4), x.rand(3, 4), x.rand(3, 4)), {}),
    "addcmul": lambda x: ((x.rand(3, 4), x.rand(3, 4), x.rand(3, 4)), {}),
    "atan2": lambda x: ((x.rand(3, 4), x.rand(3, 4)), {}),
    "bilinear": lambda x: ((x.rand(3, 4), x.rand(3, 5), x.rand(2, 4, 5), x.rand(2)), {}),
    "cross": lambda x: ((x.rand(2, 3), x.rand(2, 3)), {}),
    "dot": lambda x: ((x.rand(4), x.rand(4)), {}),
    "vdot": lambda x: ((x.rand(4), x.rand(4)), {}),
    "grid_sampler": lambda x: ((x.rand(1, 1, 4, 4), x.rand(1, 2, 2, 2), 0, 0, False), {}),
    "index_put": lambda x: ((x.rand(5), [ints([0, 3])], x.rand(2)), {}),
    "tensordot": lambda x: ((x.rand(3, 4), x.rand(4, 5), [1], [0]), {}),
    "scatter_add": lambda x: ((x.rand(3, 4), 1, ints([[0, 1], [2, 3], [1, 1]]), x.rand(3, 2)), {}),
}

# Ops vdev cannot run: each maps to the CUDA-only kernel (no CPU implementation) it
# reaches; the test checks the dtype autocast hands that kernel instead. ATen sends
# PrivateUse1 LSTM and GRU cells to the fused CUDA cells.
WITHOUT_CPU_KERNEL = {
    "_thnn_fused_lstm_cell": "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell": "_thnn_fused_gru_cell",
    "_scaled_dot_product_flash_attention": "_scaled_dot_product_flash_attention",
    "lstm_cell": "_thnn_fused_lstm_cell",
    "gru_cell": "_thnn_fused_gru_cell",
}


def aten_op(name):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def floating_tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def to_cpu(tree, float_dtype):
    def convert(value):
        if not isinstance(value, torch.Tensor):
            return value
        return value.cpu().to(float_dtype) if value.is_floating_point() else value.cpu()

    return tree_map(convert, tree)


def policy_case(name, dtype):
    """The op's inputs and the dtype its floating inputs must run in under
    autocast(dtype), per CUDA's policy (ATen/autocast_mode.h)."""
    policy = REGISTERED[name]
    if policy == "lower_precision_fp":
        return Inputs(torch.float32), dtype
    if policy in ("fp32", "fp32_set_opt_dtype", "fp32_append_dtype"):
        return Inputs(dtype), torch.float32
    assert policy == "promote", policy
    # The widest floating input wins: one float32 input among lower-precision ones.
    return Inputs(dtype, first_dtypes=[torch.float32]), torch.float32


def test_vdev_registers_cudas_policy_ops():
    cuda_ops = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    # cuDNN convolutions exist on CUDA only.
    cuda_ops -= {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    vdev_ops = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    assert vdev_ops == cuda_ops
    assert {f"aten::{name}" for name in REGISTERED} | {"aten::binary_cross_entropy"} == vdev_ops
    assert set(SAMPLES) == set(REGISTERED)


@pytest.mark.parametrize("dtype", LOWER_PRECISION, ids=str)
@pytest.mark.parametrize("name", sorted(set(REGISTERED) - set(WITHOUT_CPU_KERNEL)))
def test_output_dtype_and_values_follow_policy(name, dtype):
    inputs, compute_dtype = policy_case(name, dtype)
    args, kwargs = SAMPLES[name](inputs)
    op = aten_op(name)
    with torch.autocast("vdev", dtype=dtype):
        result = op(*args, **kwargs)
    outputs = floating_tensors(result)
    assert outputs and all(t.device.type == "vdev" for t in outputs)
    assert [t.dtype for t in outputs] == [compute_dtype] * len(outputs)
    expected = op(*to_cpu(args, compute_dtype), **to_cpu(kwargs, compute_dtype))
    assert_close(to_cpu(result, compute_dtype), expected)


class StopAtOp(Exception):
    pass


class RecordInputDtypes(TorchDispatchMode):
    """Records the floating input dtypes `op` reaches the backend with, then stops.
    The mode sits below the autocast and autograd keys: it sees what the kernel gets."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.dtypes = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is self.op:
            self.dtypes = [t.dtype for t in floating_tensors((args, kwargs))]
            raise StopAtOp
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", LOWER_PRECISION, ids=str)
@pytest.mark.parametrize("name", sorted(WITHOUT_CPU_KERNEL))
def test_ops_without_cpu_kernel_reach_the_backend_cast(name, dtype):
    inputs, compute_dtype = policy_case(name, dtype)
    args, kwargs = SAMPLES[name](inputs)
    recorder = RecordInputDtypes(aten_op(WITHOUT_CPU_KERNEL[name]))
    with torch.autocast("vdev", dtype=dtype), recorder, pytest.raises(StopAtOp):
        aten_op(name)(*args, **kwargs)
    assert recorder.dtypes and set(recorder.dtypes) == {compute_dtype}


def test_explicit_output_dtype_is_kept():
    x = torch.rand(3, 4, device="vdev", dtype=torch.bfloat16)
    with torch.autocast("vdev", dtype=torch.bfloat16):
        assert torch.sum(x).dtype == torch.float32
        assert torch.sum(x, dtype=torch.float64).dtype == torch.float64
        assert torch.softmax(x, 1, dtype=torch.float16).dtype == torch.float16


def test_ops_outside_the_lists_and_non_float_inputs_are_untouched():
    x = torch.rand(3, 4, device="vdev")
    with torch.autocast("vdev", dtype=torch.bfloat16):
        assert torch.relu(x).dtype == torch.float32
        assert (x + x).dtype == torch.float32
        assert torch.mm(x.double(), x.double().t()).dtype == torch.float64
        assert torch.cumsum(torch.arange(4, device="vdev"), 0).dtype == torch.int64
        # CPU tensors belong to CPU autocast, which is off.
        assert torch.mm(x.cpu(), x.cpu().t()).dtype == torch.float32


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x + x,  # a native kernel's result
        lambda x: torch.logaddexp(x, x),  # the fallback's
        lambda x: x.t(),  # a view
        lambda x: x.cpu().to("vdev"),  # a copy
    ],
    ids=["native", "fallback", "view", "copy"],
)
def test_results_of_ops_are_autocast_like_factory_tensors(make):
    x = torch.rand(4, 4, device="vdev")
    result = make(x)
    assert torch._C._dispatch_keys(result) == torch._C._dispatch_keys(x)
    with torch.autocast("vdev", dtype=torch.bfloat16):
        assert torch.mm(result, result).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(result, result).dtype == torch.float32


def test_binary_cross_entropy_is_refused_as_on_cuda():
    probabilities = torch.rand(4, device="vdev")
    target = torch.rand(4, device="vdev")
    with torch.autocast("vdev"):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(probabilities, target)
        F.binary_cross_entropy_with_logits(probabilities, target)
    assert_close(
        F.binary_cross_entropy(probabilities, target).cpu(),
        F.binary_cross_entropy(probabilities.cpu(), target.cpu()),
    )


def test_autocast_state_and_default_dtype():
    assert torch.amp.is_autocast_available("vdev")
    assert torch.vdev.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    # PyTorch's default lower-precision dtype for PrivateUse1, as for CUDA.
    assert torch.get_autocast_dtype("vdev") == torch.float16
    assert not torch.is_autocast_enabled("vdev")
    with torch.autocast("vdev", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("vdev")
        assert torch.get_autocast_dtype("vdev") == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
        with torch.autocast("vdev", enabled=False):
            assert torch.mm(torch.rand(2, 2, device="vdev"), torch.rand(2, 2, device="vdev")).dtype == torch.float32
    assert not torch.is_autocast_enabled("vdev")
    assert torch.get_autocast_dtype("vdev") == torch.float16


def test_vdev_amp_autocast_is_torch_autocast_for_vdev():
    a = torch.rand(2, 3, device="vdev")
    b = torch.rand(3, 2, device="vdev")
    with torch.vdev.amp.autocast():
        assert torch.get_autocast_dtype("vdev") == torch.float16
        assert (a @ b).dtype == torch.float16
    with torch.vdev.amp.autocast(dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16

    @torch.vdev.amp.autocast(dtype=torch.bfloat16)
    def product(x, y):
        return x @ y

    assert product(a, b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32


def test_unsupported_dtype_warns_and_disables():
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("vdev", dtype=torch.float64):
            assert not torch.is_autocast_enabled("vdev")


def test_training_step_matches_cpu_with_the_policys_casts():
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).vdev()
    model.load_state_dict(model_cpu.state_dict())
    x = torch.randn(5, 8)
    target = torch.randint(0, 4, (5,))
    with torch.autocast("vdev", dtype=torch.bfloat16):
        logits = model(x.vdev())
        assert logits.dtype == torch.bfloat16
        loss = F.cross_entropy(logits, target.vdev())
    assert loss.dtype == torch.float32
    loss.backward()

    # The same step on CPU with the policy's casts written out: linear in bfloat16
    # (input, weight and bias cast), nll_loss in float32. cross_entropy asks
    # log_softmax for the logits' dtype explicitly, which fp32_set_opt_dtype keeps.
    first, _, second = model_cpu
    bf16 = torch.bfloat16
    hidden = F.gelu(F.linear(x.to(bf16), first.weight.to(bf16), first.bias.to(bf16)))
    logits_cpu = F.linear(hidden, second.weight.to(bf16), second.bias.to(bf16))
    loss_cpu = F.nll_loss(F.log_softmax(logits_cpu, 1).float(), target)
    loss_cpu.backward()

    assert_close(loss.cpu(), loss_cpu)
    for p, p_cpu in zip(model.parameters(), model_cpu.parameters()):
        assert p.grad.dtype == torch.float32
        assert_close(p.grad.cpu(), p_cpu.grad)


def test_cast_cache_is_released_on_exit():
    weight = torch.nn.Parameter(torch.randn(64, 64, device="vdev"))
    x = torch.randn(8, 64, device="vdev")
    baseline = torch.vdev.memory_allocated()
    with torch.autocast("vdev", dtype=torch.float16):
        (x @ weight).sum()
        (x @ weight).sum()
        # The float16 copy of the weight is cached while autocast is on.
        assert torch.vdev.memory_allocated() >= baseline + weight.numel() * 2
    assert torch.vdev.memory_allocated() == baseline
