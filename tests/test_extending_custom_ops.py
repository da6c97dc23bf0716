"""Custom operators on vdev: Python torch.library ops (composed of aten ops, CPU-only,
per-device kernels, mutating), and vdev::scaled_add, the C++ op of our own namespace
(vdev, CPU and Meta kernels, C++ autograd), against CPU and PyTorch's opcheck."""

import io

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.autograd import gradcheck, gradgradcheck
from torch.testing import assert_close

DEVICES = ("cpu", "vdev")

# PyTorch's autograd_registration_check raises NotImplementedError for devices other
# than CPU/CUDA/XPU; on vdev, opcheck runs the other checks, and the registration
# check runs on CPU inputs (the Autograd key serves every backend).
OPCHECK_ON_VDEV = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def assert_vdev_equals_cpu(device_tensor, cpu_tensor, **tolerances):
    assert device_tensor.device.type == "vdev"
    assert_close(device_tensor.cpu(), cpu_tensor, **tolerances)


# A Python op made of aten ops: no new kernel is needed on vdev.
@torch.library.custom_op("extending_tests::gelu_tanh", mutates_args=())
def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    inner = 0.7978845608028654 * (x + 0.044715 * x.pow(3))
    return 0.5 * x * (1 + inner.tanh())


@gelu_tanh.register_fake
def _(x):
    return torch.empty_like(x)


def _gelu_tanh_setup(ctx, inputs, output):
    (ctx.x,) = inputs


def _gelu_tanh_backward(ctx, grad_output):
    return torch.ops.aten.gelu_backward(grad_output, ctx.x, approximate="tanh")


gelu_tanh.register_autograd(_gelu_tanh_backward, setup_context=_gelu_tanh_setup)


def test_python_custom_op_of_aten_ops_runs_on_vdev():
    source = torch.randn(4, 5, dtype=torch.float64)
    assert_vdev_equals_cpu(gelu_tanh(source.to("vdev")), gelu_tanh(source))
    assert_close(gelu_tanh(source), torch.nn.functional.gelu(source, approximate="tanh"))
    x = source.to("vdev").requires_grad_()
    assert gradcheck(gelu_tanh, (x,))
    torch.library.opcheck(gelu_tanh, (x,), test_utils=OPCHECK_ON_VDEV)
    torch.library.opcheck(gelu_tanh, (source.clone().requires_grad_(),))


@torch.library.custom_op("extending_tests::numpy_clip", mutates_args=(), device_types="cpu")
def numpy_clip(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    numpy_clip.seen.append((x.device.type, x.data_ptr()))
    return torch.from_numpy(x.numpy().clip(low, high))


numpy_clip.seen = []


def test_cpu_only_custom_op_runs_on_vdev_through_the_zero_copy_fallback():
    numpy_clip.seen.clear()
    source = torch.randn(10)
    x = source.to("vdev")
    result = numpy_clip(x, -0.5, 0.5)
    # The kernel got a CPU tensor over the device memory itself.
    assert numpy_clip.seen == [("cpu", x.data_ptr())]
    assert_vdev_equals_cpu(result, source.clamp(-0.5, 0.5))


@torch.library.custom_op("extending_tests::softsign", mutates_args=(), device_types="cpu")
def softsign(x: torch.Tensor) -> torch.Tensor:
    softsign.calls.append("cpu")
    return torch.from_numpy(x.numpy() / (1 + abs(x.numpy())))


@softsign.register_kernel("vdev")
def _(x):
    softsign.calls.append("vdev")
    return x / (1 + x.abs())


softsign.calls = []


def test_python_kernels_registered_per_device_dispatch_by_device():
    softsign.calls.clear()
    source = torch.randn(6)
    results = {device: softsign(source.to(device)) for device in DEVICES}
    assert softsign.calls == ["cpu", "vdev"]
    assert_vdev_equals_cpu(results["vdev"], results["cpu"])


@torch.library.custom_op("extending_tests::accumulate_", mutates_args=("total",))
def accumulate_(total: torch.Tensor, value: torch.Tensor, weight: float) -> None:
    total.add_(value, alpha=weight)


def test_mutating_custom_op_updates_its_vdev_argument():
    totals = {device: torch.zeros(3, device=device) for device in DEVICES}
    value = torch.randn(3)
    for device, total in totals.items():
        version = total._version
        accumulate_(total, value.to(device), 0.5)
        accumulate_(total, value.to(device), 2.0)
        assert total._version > version
    assert_vdev_equals_cpu(totals["vdev"], totals["cpu"])
    torch.library.opcheck(accumulate_, (torch.zeros(3, device="vdev"), value.to("vdev"), 1.5))


# vdev::scaled_add(self, other, *, alpha=1) = self + alpha * other, C++.
scaled_add = torch.ops.vdev.scaled_add


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.complex64, torch.float16, torch.bfloat16]
)
@pytest.mark.parametrize("device", DEVICES)
def test_scaled_add_equals_torch_add(device, dtype):
    self_source = torch.randn(4, 1, 5, dtype=dtype)
    other_source = torch.randn(3, 1, dtype=dtype)
    result = scaled_add(self_source.to(device), other_source.to(device), alpha=-2.5)
    assert result.device.type == device and result.dtype == dtype
    # The reference is computed in double precision and rounded once, as our kernel
    # rounds (CPU's torch.add on float16 can be 2 ulps off that).
    wide = torch.complex128 if dtype.is_complex else torch.float64
    expected = torch.add(self_source.to(wide), other_source.to(wide), alpha=-2.5).to(dtype)
    assert_close(result.cpu(), expected)


def test_scaled_add_strides_promotion_scalars_and_default_alpha():
    a, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(4, 6)
    cases = [
        lambda x, y: scaled_add(x.t()[1:], y[1:], alpha=0.5),  # transposed, offset
        lambda x, y: scaled_add(x[:, :1].expand(6, 4), y.t(), alpha=-1.0),  # expanded
        lambda x, y: scaled_add(x, y.t(), alpha=3.0),  # float64 + float32 -> float64
        lambda x, y: scaled_add(y, torch.arange(6, device=x.device), alpha=2.0),  # int64 other
        lambda x, y: scaled_add(x, torch.tensor(1.5), alpha=2.0),  # 0-dim CPU other
        lambda x, y: scaled_add(torch.tensor(1.5, dtype=torch.float64), x),  # 0-dim CPU self
        lambda x, y: scaled_add(x, x),  # default alpha, same tensor twice
    ]
    reference = [
        torch.add(a.t()[1:], b[1:], alpha=0.5),
        torch.add(a[:, :1].expand(6, 4), b.t(), alpha=-1.0),
        torch.add(a, b.t(), alpha=3.0),
        torch.add(b, torch.arange(6), alpha=2.0),
        torch.add(a, torch.tensor(1.5), alpha=2.0),
        torch.add(torch.tensor(1.5, dtype=torch.float64), a),
        a + a,
    ]
    x, y = a.to("vdev"), b.to("vdev")
    for case, expected in zip(cases, reference):
        result = case(x, y)
        assert result.dtype == expected.dtype and result.is_contiguous()
        assert result.untyped_storage().data_ptr() not in (x.data_ptr(), y.data_ptr())
        assert_vdev_equals_cpu(result, expected)
    for case, expected in zip(cases, reference):
        assert_close(case(a, b), expected)


def test_scaled_add_meta_and_fake_tensors():
    self_source, other_source = torch.randn(2, 1, 3), torch.randn(4, 1, dtype=torch.float64)
    meta = scaled_add(self_source.to("meta"), other_source.to("meta"))
    expected = torch.add(self_source, other_source)
    assert meta.device.type == "meta"
    assert (meta.shape, meta.dtype) == (expected.shape, expected.dtype)
    assert meta.stride() == expected.stride()
    self, other = self_source.to("vdev"), other_source.to("vdev")
    with FakeTensorMode() as mode:
        fake = scaled_add(mode.from_tensor(self), mode.from_tensor(other))
    assert isinstance(fake, FakeTensor) and fake.device == torch.device("vdev:0")
    assert (fake.shape, fake.dtype) == (expected.shape, expected.dtype)


@pytest.mark.parametrize(
    "make_arguments, message",
    [
        (lambda: (torch.ones(3, device="vdev"), torch.ones(3)), "same device.*vdev:0 and cpu"),
        (lambda: (torch.ones(3), torch.ones(3, device="vdev")), "same device.*vdev:0 and cpu"),
        (lambda: (torch.ones(3, device="vdev"), torch.ones(3, device="vdev:1")), "vdev:0 and vdev:1"),
        (lambda: (torch.ones(3, dtype=torch.long, device="vdev"),) * 2,
         "floating-point or complex.*Long"),
        (lambda: (torch.ones(3, device="vdev"), torch.ones(4, device="vdev")), "must match the size"),
    ],
    ids=["cpu_other", "cpu_self", "other_vdev_device", "integers", "shapes"],
)
def test_scaled_add_rejects_bad_input_clearly(make_arguments, message):
    with pytest.raises(RuntimeError, match=message):
        scaled_add(*make_arguments())
    assert scaled_add(torch.ones(2, device="vdev"), torch.ones(2, device="vdev")).sum().item() == 2 * 2


def test_scaled_add_gradients():
    sources = (torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
    grads = {}
    for device in DEVICES:
        self, other = (s.to(device, copy=True).requires_grad_() for s in sources)
        (scaled_add(self, other, alpha=-1.5) * torch.arange(4.0, device=device)).sum().backward()
        grads[device] = (self.grad, other.grad)
    reference = [s.clone().requires_grad_() for s in sources]
    (torch.add(*reference, alpha=-1.5) * torch.arange(4.0)).sum().backward()
    for device_grad, cpu_grad, expected in zip(grads["vdev"], grads["cpu"], reference):
        assert_vdev_equals_cpu(device_grad, expected.grad)
        assert_close(cpu_grad, expected.grad)

    self, other = (s.to("vdev").requires_grad_() for s in sources)
    op = lambda x, y: scaled_add(x, y, alpha=2.5)
    assert gradcheck(op, (self, other)) and gradgradcheck(op, (self, other))
    assert gradcheck(op, (other, self))
    # Only the input that requires grad gets one.
    frozen = sources[0].to("vdev")
    scaled_add(frozen, other, alpha=2.0).sum().backward()
    assert frozen.grad is None and other.grad is not None


@pytest.mark.parametrize(
    "self_dtype, other_dtype",
    [(torch.float32, torch.float64), (torch.complex128, torch.float64),
     (torch.float64, torch.complex128)],
)
def test_scaled_add_gradients_with_mixed_dtypes_equal_torch_add(self_dtype, other_dtype):
    # Each input's gradient takes its dtype; a real input of a complex result gets a real one.
    sources = (torch.randn(3, 4, dtype=self_dtype), torch.randn(4, dtype=other_dtype))
    grads = {}
    for name, op, device in (("ours", scaled_add, "vdev"), ("reference", torch.add, "cpu")):
        inputs = [s.to(device, copy=True).requires_grad_() for s in sources]
        op(*inputs, alpha=1.5).abs().pow(2).sum().backward()
        grads[name] = [tensor.grad for tensor in inputs]
    for ours, reference in zip(grads["ours"], grads["reference"]):
        assert ours.dtype == reference.dtype
        assert_vdev_equals_cpu(ours, reference)
    inputs = tuple(s.to("vdev", torch.promote_types(s.dtype, torch.float64)).requires_grad_()
                   for s in sources)
    assert gradcheck(lambda x, y: scaled_add(x, y, alpha=1.5), inputs)


def test_scaled_add_passes_opcheck():
    self, other = torch.randn(3, 4, device="vdev", requires_grad=True), torch.randn(4, device="vdev")
    torch.library.opcheck(scaled_add.default, (self, other), {"alpha": 2.0}, test_utils=OPCHECK_ON_VDEV)
    cpu_self = self.detach().cpu().requires_grad_()
    torch.library.opcheck(scaled_add.default, (cpu_self, other.cpu()), {"alpha": 2.0})


@pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:DeprecationWarning")  # still supported
def test_scaled_add_in_torchscript_boxed_calls_equal_eager_calls():
    @torch.jit.script
    def scripted(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.vdev.scaled_add(x, y, alpha=0.25).relu()

    x, y = torch.randn(3, 4, device="vdev"), torch.randn(4, device="vdev")
    eager = scaled_add(x, y, alpha=0.25).relu()
    assert_vdev_equals_cpu(scripted(x, y), eager.cpu())
    assert_close(eager.cpu(), torch.add(x.cpu(), y.cpu(), alpha=0.25).relu())
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    assert_vdev_equals_cpu(torch.jit.load(buffer)(x, y), eager.cpu())


def test_scaled_add_under_vmap():
    # Without a batching rule, vmap runs the op once per sample (PyTorch warns once).
    batch, other = torch.randn(5, 3), torch.randn(3)
    on_device = other.to("vdev")
    batched = torch.func.vmap(lambda row: scaled_add(row, on_device, alpha=2.0))(batch.to("vdev"))
    assert_vdev_equals_cpu(batched, torch.add(batch, other, alpha=2.0))


def test_scaled_add_limits_of_cpp_autograd_functions_are_reported():
    # PyTorch does not support forward AD or torch.func's grad transforms through C++
    # autograd::Functions (nor through Python register_autograd for this op).
    x, y = torch.randn(3, device="vdev"), torch.randn(3, device="vdev")
    with pytest.raises(RuntimeError, match=r"cannot use C\+\+ torch::autograd::Function"):
        torch.func.grad(lambda x: scaled_add(x, y).sum())(x)
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=r"jvp is not implemented for the c\+\+"):
        scaled_add(fwAD.make_dual(x, torch.ones_like(x)), y)
