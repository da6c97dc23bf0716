"""Native vdev kernels (ATen's CPU kernels on zero-copy aliases) and the fallback's
bookkeeping: training steps run without a single fallback call."""

import os
import sys

import pytest
import torch
import torch._decomp
import torch.nn.functional as F
from torch.testing import assert_close

import torch_vdev

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from models import TRAINING_STEPS  # noqa: E402


@pytest.mark.parametrize("name", sorted(TRAINING_STEPS))
def test_training_step_needs_no_fallback_and_matches_cpu(name):
    device_step = TRAINING_STEPS[name]("vdev")
    cpu_step = TRAINING_STEPS[name]("cpu")
    device_step()  # first step: optimizer state, lazy modules
    cpu_step()
    torch_vdev.reset_fallback_stats()
    torch.manual_seed(1)
    device_loss = device_step()
    torch.manual_seed(1)
    cpu_loss = cpu_step()
    assert torch_vdev.fallback_stats() == {}
    assert_close(device_loss.cpu(), cpu_loss, rtol=1e-4, atol=1e-5)


def test_fallback_stats_count_calls_per_op():
    torch_vdev.reset_fallback_stats()
    tensor = torch.randn(10, device="vdev")
    for _ in range(3):
        torch.special.i0e(tensor)
    torch.special.erfcx(tensor)
    stats = torch_vdev.fallback_stats()
    assert stats == {"aten::special_i0e": 3, "aten::special_erfcx": 1}
    torch_vdev.reset_fallback_stats()
    assert torch_vdev.fallback_stats() == {}


def test_native_kernel_results_are_device_tensors_without_copies():
    a_cpu, b_cpu = torch.randn(32, 16), torch.randn(16, 8)
    a, b = a_cpu.to("vdev:1"), b_cpu.to("vdev:1")
    before = torch.vdev.memory_allocated(1)
    product = a @ b
    assert product.device == torch.device("vdev:1") and torch_vdev._C.is_vdev_tensor_impl(product)
    assert torch.vdev.memory_allocated(1) >= before + product.nbytes
    assert_close(product.cpu(), a_cpu @ b_cpu)
    out = torch.empty(0, device="vdev:1")
    assert torch.mm(a, b, out=out) is out
    assert_close(out.cpu(), a_cpu @ b_cpu)
    in_place = a.clone()
    assert in_place.mul_(2) is in_place
    assert_close(in_place.cpu(), a_cpu * 2)


@pytest.mark.parametrize(
    "op",
    [
        lambda x, y: x + y,
        lambda x, y: torch.where(x > 0, x, y),
        lambda x, y: torch.maximum(x, y).sum(1),
        lambda x, y: torch.cat([x, y], 0).amax(0),
        lambda x, y: torch.stack([x, y]).var(0),
        lambda x, y: x.softmax(1) * y.log_softmax(0),
        lambda x, y: torch.nn.functional.layer_norm(x, (x.shape[-1],)),
        lambda x, y: x.max(dim=1).values + x.min(dim=1).indices,
        lambda x, y: x.gather(1, y.argsort(1)),
        lambda x, y: x.index_select(0, torch.tensor([2, 0], device=x.device)),
    ],
)
def test_native_ops_match_cpu(op):
    x_cpu, y_cpu = torch.randn(4, 6), torch.randn(4, 6)
    assert_close(op(x_cpu.to("vdev"), y_cpu.to("vdev")).cpu(), op(x_cpu, y_cpu))


def test_native_kernels_reject_mixed_devices():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*vdev:0 and vdev:1"):
        torch.ones(2, device="vdev:0") + torch.ones(2, device="vdev:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*vdev:0 and cpu"):
        torch.mm(torch.ones(2, 2, device="vdev"), torch.ones(2, 2))


def test_convolution_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    conv_cpu = torch.nn.Conv2d(3, 4, 3, padding=1, groups=1)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).to("vdev")
    conv.load_state_dict(conv_cpu.state_dict())
    inputs = torch.randn(2, 3, 8, 8)
    outputs = [conv(inputs.to("vdev")), conv_cpu(inputs)]
    for output in outputs:
        output.square().sum().backward()
    assert_close(outputs[0].cpu(), outputs[1])
    assert_close(conv.weight.grad.cpu(), conv_cpu.weight.grad)
    assert_close(conv.bias.grad.cpu(), conv_cpu.bias.grad)


@pytest.mark.parametrize("mode", ["warn", "error", "bogus"])
def test_fallback_modes(run_in_subprocess, mode):
    result = run_in_subprocess(
        "import torch, torch_vdev, warnings\n"
        "warnings.simplefilter('always')\n"
        "x = torch.randn(3, device='vdev')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    torch.special.i0e(x); torch.special.i0e(x)\n"
        "print('warnings', sum('has no vdev kernel' in str(w.message) for w in caught))\n",
        env={"VDEV_FALLBACK": mode},
    )
    if mode == "warn":
        assert result.returncode == 0, result.stderr
        assert "warnings 1" in result.stdout  # once per op
    elif mode == "error":
        assert result.returncode != 0
        assert "aten::special_i0e has no vdev kernel and VDEV_FALLBACK=error" in result.stderr
    else:
        assert "VDEV_FALLBACK='bogus' is not one of silent, warn, error" in result.stderr


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_layer_norm_statistics_in_float_as_on_cuda(dtype):
    # torch._refs.native_layer_norm gives the statistics CUDA gives (every device but
    # the CPU keeps a reduced-precision input's mean and rstd in float); the output and
    # gradients match the CPU's.
    cpu_input = torch.randn(5, 8, dtype=dtype, requires_grad=True)
    cpu_weight = torch.randn(8, dtype=dtype, requires_grad=True)
    cpu_bias = torch.randn(8, dtype=dtype, requires_grad=True)
    leaves = [t.detach().to("vdev").requires_grad_() for t in (cpu_input, cpu_weight, cpu_bias)]

    output, mean, rstd = torch.native_layer_norm(*leaves[:1], [8], *leaves[1:], 1e-5)
    ref_output, ref_mean, ref_rstd = torch._refs.native_layer_norm(
        *(t.detach() for t in leaves[:1]), [8], *(t.detach() for t in leaves[1:]), 1e-5)
    assert (output.dtype, mean.dtype, rstd.dtype) == (ref_output.dtype, ref_mean.dtype, ref_rstd.dtype)
    assert_close(mean.cpu(), ref_mean.cpu())
    assert_close(rstd.cpu(), ref_rstd.cpu())

    cpu_output = torch.nn.functional.layer_norm(cpu_input, [8], cpu_weight, cpu_bias)
    vdev_output = torch.nn.functional.layer_norm(leaves[0], [8], leaves[1], leaves[2])
    assert_close(vdev_output.cpu(), cpu_output)
    grad = torch.randn_like(cpu_output)
    cpu_output.backward(grad)
    vdev_output.backward(grad.to("vdev"))
    for cpu_leaf, vdev_leaf in zip((cpu_input, cpu_weight, cpu_bias), leaves):
        assert vdev_leaf.grad.dtype == dtype
        assert_close(vdev_leaf.grad.cpu(), cpu_leaf.grad, atol=2e-2, rtol=2e-2)


def _batch_norm_eval_arguments(dtype, device):
    generator = torch.Generator().manual_seed(0)
    tensors = [
        torch.randn(4, 3, 6, generator=generator, dtype=dtype),
        torch.randn(3, generator=generator, dtype=dtype),
        torch.randn(3, generator=generator, dtype=dtype),
        torch.randn(3, generator=generator, dtype=dtype),
        torch.rand(3, generator=generator, dtype=dtype) + 0.5,
    ]
    return [tensor.to(device) for tensor in tensors]


_aten = torch.ops.aten
# Each: the op in evaluation, how the input reaches it, its scalar arguments, and whether
# it is launched on the stream (a dense input's native_batch_norm) or runs the CPU kernel
# on the calling thread.
BATCH_NORM_EVAL_CASES = {
    "native_batch_norm": (_aten.native_batch_norm.default, lambda x: x, (False, 0.1, 1e-5), True),
    "native_batch_norm_strided": (_aten.native_batch_norm.default, lambda x: x[..., ::2], (False, 0.1, 1e-5), False),
    "_native_batch_norm_legit": (_aten._native_batch_norm_legit.default, lambda x: x, (False, 0.1, 1e-5), False),
    "_native_batch_norm_legit_no_training": (
        _aten._native_batch_norm_legit_no_training.default, lambda x: x, (0.1, 1e-5), False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", BATCH_NORM_EVAL_CASES)
def test_batch_norm_eval_statistics_as_on_cuda(case, dtype):
    # In evaluation CUDA returns the running mean and 1 / sqrt(running_var + eps), one per
    # channel in the accumulation type, where the CPU returns empty tensors: PyTorch's
    # decomposition gives every device but the CPU CUDA's. The output is the CPU's.
    op, take, scalars, launched = BATCH_NORM_EVAL_CASES[case]
    x, weight, bias, running_mean, running_var = _batch_norm_eval_arguments(dtype, "vdev")
    torch.vdev.synchronize()
    torch_vdev.reset_synchronizing_op_stats()
    output, save_mean, save_invstd = op(take(x), weight, bias, running_mean, running_var, *scalars)
    calling_thread_ops = [name for name in torch_vdev.synchronizing_op_stats() if "batch_norm" in name]
    assert bool(calling_thread_ops) != launched
    reference = torch._decomp.decomposition_table[op](take(x), weight, bias, running_mean, running_var, *scalars)
    for result, expected in zip((save_mean, save_invstd), reference[1:]):
        assert (result.shape, result.dtype) == (torch.Size([3]), expected.dtype)
        assert_close(result.cpu(), expected.cpu())
    cpu_arguments = _batch_norm_eval_arguments(dtype, "cpu")
    cpu_output = op(take(cpu_arguments[0]), *cpu_arguments[1:], *scalars)[0]
    assert_close(output.cpu(), cpu_output, atol=0, rtol=0)


def test_batch_norm_eval_statistics_out_resized_as_on_cuda():
    # CUDA's out= kernel resizes save_mean and save_invstd to one per channel and fills
    # them in evaluation; the CPU's leaves them as given.
    x, weight, bias, running_mean, running_var = _batch_norm_eval_arguments(torch.float32, "vdev")
    expected = _aten.native_batch_norm.default(x, weight, bias, running_mean, running_var, False, 0.1, 1e-5)
    for op in (_aten.native_batch_norm.out, _aten._native_batch_norm_legit.out):
        out, save_mean, save_invstd = (torch.empty(0, device="vdev") for _ in range(3))
        op(x, weight, bias, running_mean, running_var, False, 0.1, 1e-5, out=out, save_mean=save_mean, save_invstd=save_invstd)
        for result, reference in zip((out, save_mean, save_invstd), expected):
            assert_close(result.cpu(), reference.cpu(), atol=0, rtol=0)


@pytest.mark.parametrize("strided", [False, True], ids=["launched", "strided"])
def test_batch_norm_eval_gradients_equal_cpu(strided):
    cpu_x, cpu_weight, cpu_bias, running_mean, running_var = _batch_norm_eval_arguments(torch.float64, "cpu")
    cpu_leaves = [t.requires_grad_() for t in (cpu_x, cpu_weight, cpu_bias)]
    vdev_leaves = [t.detach().to("vdev").requires_grad_() for t in cpu_leaves]

    def forward(x, weight, bias):
        x = x[..., ::2] if strided else x
        return F.batch_norm(x, running_mean.to(x.device), running_var.to(x.device), weight, bias, training=False)

    cpu_output = forward(*cpu_leaves)
    grad = torch.randn_like(cpu_output)
    cpu_output.backward(grad)
    forward(*vdev_leaves).backward(grad.to("vdev"))
    for cpu_leaf, vdev_leaf in zip(cpu_leaves, vdev_leaves):
        assert_close(vdev_leaf.grad.cpu(), cpu_leaf.grad)
    inputs = [t.detach().to("vdev").requires_grad_() for t in cpu_leaves]
    assert torch.autograd.gradcheck(forward, inputs)
    assert torch.autograd.gradgradcheck(forward, inputs)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5),
        lambda x: torch.native_batch_norm(x[..., ::2], None, None, None, None, False, 0.1, 1e-5),
        lambda x: _aten._native_batch_norm_legit.no_stats(x, None, None, False, 0.1, 1e-5),
    ],
    ids=["native_batch_norm", "native_batch_norm_strided", "_native_batch_norm_legit_no_stats"],
)
def test_batch_norm_eval_without_running_statistics_raises(call):
    # CUDA refuses; the CPU kernel reads the missing statistics and crashes the process.
    with pytest.raises(RuntimeError, match="running_mean and running_var must be defined in evaluation mode"):
        call(torch.randn(4, 3, 6, device="vdev"))
    assert torch.ones(2, device="vdev").sum().item() == 2
