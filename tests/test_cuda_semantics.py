"""Where ATen's CPU kernels and CUDA's disagree on what they accept or compute, vdev (which
runs the CPU kernels) behaves as CUDA does. Each test checks the refusal CUDA's kernel
makes, and that what both accept gives the CPU result."""

import warnings

import pytest
import torch
from torch.testing import assert_close

DEVICE = "vdev"


def test_addcmul_refuses_a_cpu_scalar_as_self_or_tensor1_as_cuda_does():
    self, tensor1, tensor2 = (torch.rand(2, 2) for _ in range(3))
    scalar = torch.rand([])
    on_device = [t.to(DEVICE) for t in (self, tensor1, tensor2)]
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        torch.addcmul(on_device[0], scalar, on_device[2], value=0.5)
    with pytest.raises(RuntimeError, match="CPU Scalar support for self argument"):
        torch.addcmul(scalar, on_device[1], on_device[2], value=0.5)
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        on_device[0].clone().addcmul_(scalar, on_device[2])
    with pytest.raises(RuntimeError, match="CPU Scalar support for tensor1 argument"):
        torch.addcmul(on_device[0], scalar, on_device[2], out=torch.empty(2, 2, device=DEVICE))
    # CUDA reads a CPU scalar as tensor2.
    assert_close(torch.addcmul(on_device[0], on_device[1], scalar, value=0.5).cpu(),
                 torch.addcmul(self, tensor1, scalar, value=0.5))


@pytest.mark.parametrize("call", [
    lambda x, i, s: x.scatter_(0, i, s, reduce="multiply"),
    lambda x, i, s: x.scatter_(0, i, 2.0, reduce="multiply"),
    lambda x, i, s: x.scatter(0, i, s, reduce="multiply"),
    lambda x, i, s: torch.scatter(x, 0, i, s, reduce="multiply", out=torch.empty_like(x)),
    lambda x, i, s: x.scatter_reduce(0, i, s, "prod"),
    lambda x, i, s: x.scatter_reduce_(0, i, s, "mean"),
    lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "prod", out=torch.empty_like(x)),
], ids=["scatter_multiply_", "scatter_value_multiply_", "scatter_multiply", "scatter_multiply_out",
        "scatter_reduce_prod", "scatter_reduce_mean_", "scatter_reduce_prod_out"])
def test_complex_scatter_reductions_other_than_sum_raise_as_on_cuda(call):
    index = torch.tensor([[0, 1], [0, 0]], device=DEVICE)
    source = torch.randn(2, 2, dtype=torch.complex64, device=DEVICE)
    target = torch.randn(2, 2, dtype=torch.complex64, device=DEVICE)
    before = target.clone()
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexFloat'"):
        call(target, index, source)
    assert torch.equal(target.cpu(), before.cpu())
    # The same reduction of real tensors is CPU's.
    real_target, real_source = target.real.contiguous(), source.real.contiguous()
    expected = call(real_target.cpu().clone(), index.cpu(), real_source.cpu())
    assert_close(call(real_target.clone(), index, real_source).cpu(), expected)


@pytest.mark.parametrize("call", [
    lambda x, i, s: x.scatter_(0, i, s, reduce="add"),
    lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
    lambda x, i, s: x.scatter_add(0, i, s),
], ids=["scatter_add_", "scatter_reduce_sum", "scatter_add"])
def test_complex_scatter_sums_match_cpu(call):
    index = torch.tensor([[0, 1], [0, 0]])
    source = torch.randn(2, 2, dtype=torch.complex64)
    target = torch.randn(2, 2, dtype=torch.complex64)
    result = call(target.to(DEVICE), index.to(DEVICE), source.to(DEVICE))
    assert_close(result.cpu(), call(target.clone(), index, source))


HALF_CASES = [  # (op, self, other, alpha), values where rounding alpha * other or the scalar first overflows
    (torch.add, 60000.0, -60000.0, 2),
    (torch.sub, 60000.0, 60000.0, 2),
    (torch.add, 60000.0, -70000.0, 1),
    (torch.sub, 60000.0, 70000.0, 1),
    (torch.add, 1.0, 3.0e4, 3.0),
]


def cuda_add(self, other, alpha, dtype):
    """CUDA's self + alpha * other in float16/bfloat16: a tensor operand read in its dtype, a
    Python number as a float, computed in float and rounded once."""
    read = other.to(dtype).float() if isinstance(other, torch.Tensor) else torch.tensor(other, dtype=torch.float)
    return torch.add(self.float(), read, alpha=alpha).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op, self_value, other_value, alpha", HALF_CASES)
def test_reduced_precision_add_and_sub_compute_in_float_as_on_cuda(dtype, op, self_value, other_value, alpha):
    self = torch.full((3,), self_value, dtype=dtype)
    signed_alpha = alpha if op is torch.add else -alpha
    tensor_other = torch.full((3,), other_value).to(dtype)
    for other, device_other in ((tensor_other, tensor_other.to(DEVICE)), (other_value, other_value)):
        if not isinstance(other, torch.Tensor) and alpha != 1:
            continue  # a Python number with alpha is add.Scalar's, covered with alpha 1
        expected = cuda_add(self, other, signed_alpha, dtype)
        assert torch.equal(op(self.to(DEVICE), device_other, alpha=alpha).cpu(), expected)
        assert torch.equal(getattr(self.to(DEVICE), op.__name__ + "_")(device_other, alpha=alpha).cpu(), expected)
        out = torch.empty(3, dtype=torch.float32, device=DEVICE)
        op(self.to(DEVICE), device_other, alpha=alpha, out=out)
        assert torch.equal(out.cpu(), expected.float())


def test_reduced_precision_add_keeps_cpu_results_and_errors_elsewhere():
    # alpha 1 and tensors of one dtype: CPU's kernel, which also rounds once.
    a, b = torch.randn(100, dtype=torch.float16), torch.randn(100, dtype=torch.float16)
    assert torch.equal((a.to(DEVICE) + b.to(DEVICE)).cpu(), a + b)
    assert torch.equal(torch.add(a.to(DEVICE), b.to(DEVICE), alpha=0.3).cpu(), cuda_add(a, b, 0.3, torch.float16))
    with pytest.raises(RuntimeError, match="with a bool tensor is not supported"):
        torch.sub(a.to(DEVICE), torch.ones(100, dtype=torch.bool, device=DEVICE), alpha=2)
    overlapping = torch.arange(10.0, dtype=torch.float16, device=DEVICE)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        overlapping[:3].add_(overlapping[1:4], alpha=2)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.ones(3, dtype=torch.int32, device=DEVICE).add_(torch.ones(3, dtype=torch.float16, device=DEVICE), alpha=2)


@pytest.mark.parametrize("call", [
    lambda x, out: torch.sum(x, dim=[0], dtype=torch.float32, out=out),
    lambda x, out: torch.amax(x, 0, out=out),
    lambda x, out: torch.cumsum(x, 0, out=out),
], ids=["sum", "amax", "cumsum"])
def test_a_host_out_tensor_of_a_structured_op_gets_cudas_error(call):
    # CUDA's structured out= kernels name the out tensor's device (their meta function's check).
    x = torch.randn(5, device=DEVICE)
    out = torch.full((7,), 3.0)
    with pytest.raises(RuntimeError, match=f"Expected out tensor to have device {x.device}, but got cpu instead"):
        call(x, out)
    assert torch.equal(out, torch.full((7,), 3.0))


def test_a_host_out_tensor_of_a_tensor_iterator_op_gets_cudas_error():
    x = torch.randn(5, device=DEVICE)
    out = torch.zeros(5)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two devices"):
        torch.add(x, x, out=out)
    assert torch.equal(out, torch.zeros(5))


@pytest.mark.parametrize("op, padding, shape, memory_format", [
    ("replication_pad2d", (1, 2, 0, 3), (2, 3, 4, 5), torch.channels_last),
    ("replication_pad3d", (1, 2, 0, 1, 2, 1), (2, 3, 4, 5, 3), torch.channels_last_3d),
    ("reflection_pad3d", (1, 2, 0, 1, 2, 1), (2, 3, 4, 5, 3), torch.channels_last_3d),
])
def test_padding_a_channels_last_input_gives_cpus_values_in_cudas_contiguous_layout(op, padding, shape, memory_format):
    # CPU's kernel restrides its output (an out= argument too) channels-last; CUDA's and
    # the meta kernel keep it contiguous. The CPU kernel's values must land in that layout.
    pad = getattr(torch.ops.aten, op)
    source = torch.randn(shape, dtype=torch.float64).to(memory_format=memory_format).requires_grad_()
    expected = pad(source, padding)
    grad_output = torch.randn_like(expected)
    expected.backward(grad_output)

    on_device = source.detach().to(DEVICE).requires_grad_()
    result = pad(on_device, padding)
    assert result.is_contiguous()
    assert_close(result.cpu(), expected)
    result.backward(grad_output.to(DEVICE))
    assert_close(on_device.grad.cpu(), source.grad)

    out = torch.empty(expected.shape, dtype=torch.float64, device=DEVICE)
    pad.out(on_device.detach(), padding, out=out)
    assert out.is_contiguous()
    assert_close(out.cpu(), expected.detach())


@pytest.mark.parametrize("dtype, weight_dtype, message", [
    (torch.float32, torch.float16, "expected scalar type Float but found Half"),
    (torch.float16, torch.float32, "expected scalar type Half but found Float"),
])
@pytest.mark.parametrize("batch", [0, 3])
def test_nll_loss_refuses_class_weights_of_another_dtype_at_the_call_as_cuda_does(dtype, weight_dtype, message, batch):
    log_probs = torch.randn(batch, 4, dtype=dtype, device=DEVICE)
    target = torch.zeros(batch, dtype=torch.long, device=DEVICE)
    weight = torch.ones(4, dtype=weight_dtype, device=DEVICE)
    # Raised by the call itself, not on the stream at the next synchronization.
    with pytest.raises(RuntimeError, match=message):
        torch.nn.functional.nll_loss(log_probs, target, weight=weight)
    torch.vdev.synchronize()
    # Matching weights still give CPU's loss and gradient.
    cpu_log_probs = torch.randn(3, 4, requires_grad=True)
    cpu_target = torch.tensor([0, 3, 1])
    cpu_weight = torch.rand(4)
    expected = torch.nn.functional.nll_loss(cpu_log_probs, cpu_target, weight=cpu_weight)
    expected.backward()
    on_device = cpu_log_probs.detach().to(DEVICE).requires_grad_()
    loss = torch.nn.functional.nll_loss(on_device, cpu_target.to(DEVICE), weight=cpu_weight.to(DEVICE))
    loss.backward()
    assert_close(loss.cpu(), expected)
    assert_close(on_device.grad.cpu(), cpu_log_probs.grad)


@pytest.mark.parametrize("mode, size", [
    ("nearest", (6,)), ("nearest-exact", (6,)), ("linear", (6,)),
    ("nearest", (6, 6)), ("nearest-exact", (6, 6)), ("bilinear", (6, 6)), ("bicubic", (6, 6)),
    ("nearest", (6, 6, 6)), ("trilinear", (6, 6, 6)),
])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_upsampling_takes_cuda_dtypes_and_refuses_the_others_at_the_call(mode, size, dtype):
    # CUDA's upsample kernels take floating types (and uint8 for nearest); the CPU's take
    # integers too. A refused dtype raises at the call, as on CUDA, not at a later sync.
    source = torch.arange(2 * 3 * 4 ** len(size)).reshape(2, 3, *[4] * len(size)) % 200
    source = source.to(dtype)
    on_cuda = dtype.is_floating_point or (dtype == torch.uint8 and mode.startswith("nearest"))
    if not on_cuda:
        with pytest.raises(NotImplementedError, match="_out_frame\" not implemented for '"):
            torch.nn.functional.interpolate(source.to(DEVICE), size, mode=mode)
        torch.vdev.synchronize()  # nothing was queued: no error is left for later
        return
    result = torch.nn.functional.interpolate(source.to(DEVICE), size, mode=mode)
    assert_close(result.cpu(), torch.nn.functional.interpolate(source, size, mode=mode))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_upsampling_refuses_uint8_at_the_call(mode):
    image = torch.randint(0, 255, (1, 3, 16, 16), dtype=torch.uint8)
    with pytest.raises(NotImplementedError, match=f"upsample_{mode}2d_aa_out_frame\" not implemented for 'Byte'"):
        torch.nn.functional.interpolate(image.to(DEVICE), (6, 6), mode=mode, antialias=True)
    torch.vdev.synchronize()
    floats = image.float()
    assert_close(torch.nn.functional.interpolate(floats.to(DEVICE), (6, 6), mode=mode, antialias=True).cpu(),
                 torch.nn.functional.interpolate(floats, (6, 6), mode=mode, antialias=True))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last_3d])
def test_avg_pool3d_into_a_noncontiguous_out_keeps_its_strides_and_gives_cpus_values(memory_format):
    # CPU's kernel writes a noncontiguous out as if it were contiguous; CUDA's (and vdev's)
    # respects its strides. The reference is CPU's functional result.
    source = torch.randn(2, 3, 4, 6, 6).contiguous(memory_format=memory_format)
    expected = torch.nn.functional.avg_pool3d(source, 2)
    out = torch.full((*expected.shape[:-1], expected.shape[-1] * 2), float("nan"), device=DEVICE)[..., ::2]
    strides = out.stride()
    result = torch._C._nn.avg_pool3d(source.to(DEVICE), 2, out=out)
    assert result is out and out.stride() == strides
    assert_close(out.cpu(), expected)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch._C._nn.avg_pool3d(source.to(DEVICE), 2, out=torch.zeros_like(out, dtype=torch.long))


def test_logsigmoid_warns_when_it_resizes_a_non_empty_out_as_cuda_does():
    source = torch.randn(20)
    out = torch.zeros(21, device=DEVICE)
    # Every other op warns so when it resizes a non-empty out= tensor (CPU's add here);
    # CPU's log_sigmoid kernel does not, CUDA's does.
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.add(source, 1, out=torch.zeros(21))
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch._C._nn.log_sigmoid(source.to(DEVICE), out=out)
    assert_close(out.cpu(), torch.nn.functional.logsigmoid(source))
    empty = torch.empty(0, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch._C._nn.log_sigmoid(source.to(DEVICE), out=empty)
    assert_close(empty.cpu(), torch.nn.functional.logsigmoid(source))


@pytest.mark.parametrize("batch, values_shape, vectors_shape", [
    (3, (0,), (0,)),
    (0, (0, 4), (0, 4, 4)),
    (3, (3, 4), (3, 4, 4)),
], ids=["resized", "empty_of_the_right_shape", "of_the_right_shape"])
@pytest.mark.parametrize("noncontiguous", [False, True])
def test_linalg_eig_copies_into_its_outs_as_cuda_does(batch, values_shape, vectors_shape, noncontiguous):
    # CPU's kernel restrides empty outs to column-major in place; CUDA's computes into host
    # temporaries and copies them in (resize_output, copy_), as the meta kernel's out= does,
    # which is the reference for the strides. CPU's eig is the reference for the values.
    source = torch.randn(batch, 4, 4, dtype=torch.float64)
    expected_values, expected_vectors = torch.linalg.eig(source)
    strides = {}
    for device in ("meta", DEVICE):
        values = torch.empty(values_shape, dtype=torch.complex128, device=device)
        vectors = torch.empty(*vectors_shape[:-1], vectors_shape[-1] * 2, dtype=torch.complex128, device=device)
        vectors = vectors[..., ::2] if noncontiguous else vectors[..., :vectors_shape[-1]].contiguous()
        given = vectors.stride()
        torch.linalg.eig(source.to(device), out=(values, vectors))
        strides[device] = vectors.stride()
        if vectors_shape == expected_vectors.shape:
            assert vectors.stride() == given
    assert strides[DEVICE] == strides["meta"]
    assert_close(values.cpu(), expected_values)
    assert_close(vectors.cpu(), expected_vectors)
    with pytest.raises(RuntimeError, match="Expected eigenvalues to be safely castable"):
        torch.linalg.eig(source.to(DEVICE), out=(torch.empty(values.shape, dtype=torch.long, device=DEVICE), vectors))


@pytest.mark.parametrize("out_dtype", [torch.long, torch.int32, torch.bool])
def test_mean_refuses_an_integral_out_at_the_call(out_dtype):
    # CPU's error, raised by its kernel; on vdev it raised from the queued kernel at the next
    # synchronization instead of at the call, as CUDA's does.
    source = torch.randn(4, 5)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.mean(source, 1, out=torch.empty(4, dtype=out_dtype))
    out = torch.zeros(4, dtype=out_dtype, device=DEVICE)
    with pytest.raises(RuntimeError, match=str(on_cpu.value)):
        torch.mean(source.to(DEVICE), 1, out=out)
    torch.vdev.synchronize()
    assert_close(out.cpu(), torch.zeros(4, dtype=out_dtype))
    assert_close(torch.mean(source.to(DEVICE), 1, out=torch.empty(4, device=DEVICE)).cpu(), source.mean(1))


@pytest.mark.parametrize("call", [
    lambda x: torch.nn.functional.gelu(x, approximate="asdf"),
    lambda x: torch._C._nn.gelu(x, approximate="asdf", out=torch.empty_like(x)),
    lambda x: torch._C._nn.gelu_(x.clone(), approximate="asdf"),
    lambda x: torch.ops.aten.gelu_backward(torch.ones_like(x), x, approximate="asdf"),
], ids=["gelu", "gelu_out", "gelu_", "gelu_backward"])
def test_gelu_refuses_a_bad_approximation_at_the_call(call):
    # CPU's error; on vdev it raised from the queued kernel at the next synchronization.
    source = torch.randn(5)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        call(source)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        call(source.to(DEVICE))
    torch.vdev.synchronize()
    assert_close(torch.nn.functional.gelu(source.to(DEVICE), approximate="tanh").cpu(),
                 torch.nn.functional.gelu(source, approximate="tanh"))


@pytest.mark.parametrize("dim, start, length", [(3, 0, 0), (0, 0, -1), (0, 11, 0)])
def test_narrow_copy_raises_narrows_errors(dim, start, length):
    # CUDA narrows, then copies; CPU's own kernel asserts or words its errors otherwise. The
    # reference is narrow's error on CPU.
    source = torch.randn(10, 5, 20)
    with pytest.raises((IndexError, RuntimeError)) as on_cpu:
        source.narrow(dim, start, length)
    with pytest.raises(type(on_cpu.value)) as on_device:
        torch.narrow_copy(source.to(DEVICE), dim, start, length)
    assert str(on_device.value) == str(on_cpu.value)
    assert_close(torch.narrow_copy(source.to(DEVICE), -1, 2, 5).cpu(), torch.narrow_copy(source, -1, 2, 5))


def _metadata(tensor):
    return tensor.shape, tensor.stride(), tensor.dtype


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_max_unpool2d_gives_cpus_values_in_the_meta_kernels_contiguous_layout(memory_format):
    # CPU's kernel unpools a channels-last input channels-last; CUDA's and the meta kernel
    # (which fake tensors and torch.compile trust) always give a contiguous result.
    source = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    pooled, indices = torch.nn.functional.max_pool2d(source, 2, return_indices=True)
    pooled = pooled.to(memory_format=memory_format).requires_grad_()
    indices = indices.to(memory_format=memory_format)
    expected = torch.nn.functional.max_unpool2d(pooled, indices, 2)
    grad_output = torch.randn_like(expected)
    expected.backward(grad_output)

    on_device = pooled.detach().to(DEVICE).requires_grad_()
    result = torch.nn.functional.max_unpool2d(on_device, indices.to(DEVICE), 2)
    on_meta = torch.nn.functional.max_unpool2d(pooled.detach().to("meta"), indices.to("meta"), 2)
    assert _metadata(result) == _metadata(on_meta)
    assert_close(result.cpu(), expected)
    result.backward(grad_output.to(DEVICE))
    assert_close(on_device.grad.cpu(), pooled.grad)


@pytest.mark.parametrize("op", [torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only])
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_embedding_bag_gives_cudas_auxiliary_results_as_the_meta_kernel_does(op, mode, include_last_offset, index_dtype):
    # The CPU's sum fast path leaves offset2bag empty, its bag_size has one element per bag
    # and its max_indices one per bag in every mode; CUDA's (and the meta kernel for every
    # device but the CPU) give each index's bag, one bag_size per offset, and max_indices
    # only for max. The bags themselves are the CPU's.
    weight = torch.randn(10, 3, dtype=torch.float64)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 9], dtype=index_dtype)
    offsets = torch.tensor([0, 2, 2, 7] if include_last_offset else [0, 2, 2], dtype=index_dtype)
    arguments = (False, mode, False, None, include_last_offset, -1)

    expected = op(weight, indices, offsets, *arguments)
    result = op(weight.to(DEVICE), indices.to(DEVICE), offsets.to(DEVICE), *arguments)
    on_meta = op(weight.to("meta"), indices.to("meta"), offsets.to("meta"), *arguments)
    assert [_metadata(t) for t in result] == [_metadata(t) for t in on_meta]
    assert_close(result[0].cpu(), expected[0])
    assert result[1].tolist() == [0, 0, 2, 2, 2, 2, 2]
    if mode == 2:
        assert_close(result[3].cpu(), expected[3])


# per_sample_weights are for mode='sum' only, on every device.
@pytest.mark.parametrize("mode, with_per_sample_weights", [
    ("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_embedding_bag_backward_from_cudas_auxiliary_results_gives_cpus_gradients(mode, with_per_sample_weights):
    weight = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 9])
    offsets = torch.tensor([0, 2, 2])
    per_sample_weights = torch.randn(7, dtype=torch.float64, requires_grad=True) if with_per_sample_weights else None

    def bags(weight, indices, offsets, per_sample_weights):
        return torch.nn.functional.embedding_bag(indices, weight, offsets, mode=mode, per_sample_weights=per_sample_weights)

    expected = bags(weight, indices, offsets, per_sample_weights)
    grad_output = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, [t for t in (weight, per_sample_weights) if t is not None], grad_output)

    on_device = [t.detach().to(DEVICE).requires_grad_() if t is not None else None for t in (weight, per_sample_weights)]
    result = bags(on_device[0], indices.to(DEVICE), offsets.to(DEVICE), on_device[1])
    grads = torch.autograd.grad(result, [t for t in on_device if t is not None], grad_output.to(DEVICE))
    assert_close(result.cpu(), expected)
    for grad, expected_grad in zip(grads, expected_grads):
        assert_close(grad.cpu(), expected_grad)
