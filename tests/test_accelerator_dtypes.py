"""Accelerator dtypes: what CUDA's kernels take and the CPU's do not works on vdev.
Every OpInfo's accelerator dtypes (op_db's dtypesIfCUDA beyond its CPU dtypes) are
checked in test_opinfo.py (test_accelerator_dtypes); here: in-place and out= write-back,
the table's generator and off switch, the mixture-of-experts training step, the
float16 FFTs' gradients and complex nansum's NaN handling."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from models import moe_step  # noqa: E402

DEVICE = torch._C._get_privateuse1_backend_name()
ROOT = pathlib.Path(__file__).resolve().parent.parent


def tolerance(dtype):
    """16-bit results are compared at their dtype's precision."""
    if dtype in (torch.float16, torch.bfloat16, torch.complex32):
        return {"rtol": 1e-2, "atol": 5e-2}
    return {}


def test_in_place_and_out_variants_write_back_in_the_accelerator_dtype():
    x = torch.randn(6, dtype=torch.complex64).to(torch.complex32)
    on_device = x.to(DEVICE)
    alias = on_device
    on_device.exp_()
    expected = x.to(torch.complex64).exp().to(torch.complex32)
    assert alias is on_device and on_device.dtype == torch.complex32
    torch.testing.assert_close(on_device.cpu(), expected)
    out = torch.empty(0, dtype=torch.int32, device=DEVICE)
    values = torch.tensor([0, 3, 3, 1, 2], dtype=torch.int32)
    result = torch.histc(values.to(DEVICE), bins=4, min=0, max=3, out=out)
    assert result is out
    assert out.cpu().tolist() == torch.histc(values.double(), bins=4, min=0, max=3).int().tolist()


def test_table_is_generated_from_op_db():
    check = subprocess.run(
        [sys.executable, str(ROOT / "csrc" / "aten" / "generate_accelerator_dtypes.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def test_off_switch_takes_only_what_the_cpu_takes(run_in_subprocess):
    code = (
        "import torch\n"
        "x = torch.tensor([1, 2], dtype=torch.int32, device='vdev')\n"
        "try:\n    torch.histc(x, bins=2)\nexcept NotImplementedError as e:\n    print('refused', e)\n"
    )
    finished = run_in_subprocess(code, env={"VDEV_ACCELERATOR_DTYPES": "0"})
    assert "refused" in finished.stdout and "histogram_cpu" in finished.stdout, finished.stderr


def test_mixture_of_experts_trains_as_on_cpu():
    """transformers' device branch: histc on integers on vdev, bincount on the CPU."""

    def train(device):
        step = moe_step(device)
        return [step().item() for _ in range(3)]

    torch.testing.assert_close(train(DEVICE), train("cpu"))


def test_widened_copy_waits_for_work_queued_on_the_stream():
    """The wider copy is made before the CPU kernel runs: it must see a queued write."""
    counts = torch.zeros(64, dtype=torch.int32, device=DEVICE)
    torch.vdev._sleep(100)  # the copy below stays queued behind this kernel
    counts.copy_(torch.arange(64, dtype=torch.int32, device=DEVICE))
    histogram = torch.histc(counts, bins=4, min=0, max=63)
    expected = torch.histc(torch.arange(64, dtype=torch.float64), bins=4, min=0, max=63)
    torch.testing.assert_close(histogram.cpu().to(torch.float64), expected)


@pytest.mark.parametrize("dtype", (torch.complex32, torch.complex64, torch.complex128), ids=str)
def test_complex_nansum_and_nanmean_skip_elements_with_a_nan_part(dtype):
    """As CUDA's kernel (and NumPy): an element whose real or imaginary part is NaN
    counts as zero, and nanmean does not count it."""
    values = torch.randn(4, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    values[0, 1] = complex(float("nan"), 1.0)
    values[2, 3] = complex(1.0, float("nan"))
    values[3, :] = complex(float("nan"), float("nan"))
    on_device = values.to(dtype).to(DEVICE)
    wide = values.to(dtype).to(torch.complex128).numpy()
    for dim in (None, 1):
        total = torch.nansum(on_device, dim=dim)
        mean = torch.nanmean(on_device, dim=dim)
        assert total.dtype == mean.dtype == dtype
        torch.testing.assert_close(total.cpu(), torch.as_tensor(np.nansum(wide, axis=dim)).to(dtype), **tolerance(dtype))
        torch.testing.assert_close(
            mean.cpu(), torch.as_tensor(np.nanmean(wide, axis=dim)).to(dtype), equal_nan=True, **tolerance(dtype)
        )


@pytest.mark.parametrize("transform", ("fft", "rfft", "ihfft", "irfft", "hfft2", "rfftn"))
def test_half_precision_fft_gradients_and_out_match_float32_cast_back(transform):
    """torch.fft's composites refuse float16 off CUDA before reaching vdev; vdev's own
    autograd kernels run them in float32 and return CUDA's dtypes, with gradients in
    float16 and out= results written in out's dtype."""
    function = getattr(torch.fft, transform)
    # cuFFT's half-precision signal sizes are powers of two: a complex-to-real
    # transform's last one is its output's, 2 * (5 - 1).
    last = 5 if transform in ("irfft", "hfft2") else 8
    values = torch.randn(4, last, generator=torch.Generator().manual_seed(0)).half()
    on_device = values.to(DEVICE).requires_grad_()
    reference_input = values.float().requires_grad_()
    result, reference = function(on_device), function(reference_input)
    narrow = torch.complex32 if reference.is_complex() else torch.float16
    assert result.dtype == narrow
    torch.testing.assert_close(result.cpu(), reference.detach().to(narrow), **tolerance(narrow))
    weights = torch.randn(reference.shape, dtype=reference.dtype, generator=torch.Generator().manual_seed(1))
    (result * weights.to(narrow).to(DEVICE)).real.sum().backward()
    (reference * weights.to(narrow).to(reference.dtype)).real.sum().backward()
    assert on_device.grad.dtype == torch.float16
    torch.testing.assert_close(on_device.grad.cpu(), reference_input.grad.half(), **tolerance(torch.float16))
    out = torch.empty(0, dtype=narrow, device=DEVICE)
    assert function(values.to(DEVICE), out=out) is out
    torch.testing.assert_close(out.cpu(), reference.detach().to(narrow), **tolerance(narrow))


# (function, input shape, further arguments): ops CUDA differentiates in float16 and
# bfloat16 whose CPU backward kernels take neither (backward_dtypesIfCUDA).
HALF_PRECISION_BACKWARDS = {
    "avg_pool3d": (lambda x: torch.nn.functional.avg_pool3d(x, 2), (1, 2, 4, 4, 4)),
    "multi_margin_loss": (lambda x: torch.nn.functional.multi_margin_loss(x, TARGETS.to(x.device)), (3, 5)),
    "multilabel_margin_loss": (
        lambda x: torch.nn.functional.multilabel_margin_loss(x, LABELS.to(x.device)), (3, 5)),
    "_upsample_bilinear2d_aa": (
        lambda x: torch.ops.aten._upsample_bilinear2d_aa(x, [3, 5], False, None, None), (1, 2, 6, 7)),
}
TARGETS = torch.tensor([0, 4, 2])
LABELS = torch.tensor([[1, 3, -1, 0, 0], [0, -1, 2, 2, 2], [4, 2, 1, 0, -1]])


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@pytest.mark.parametrize("name", sorted(HALF_PRECISION_BACKWARDS))
def test_half_precision_backward_matches_float32_cast_back(name, dtype):
    function, shape = HALF_PRECISION_BACKWARDS[name]
    values = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    on_device = values.to(DEVICE).requires_grad_()
    reference_input = values.float().requires_grad_()
    result, reference = function(on_device), function(reference_input)
    weights = torch.randn(reference.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (result * weights.to(DEVICE)).sum().backward()
    (reference * weights.float()).sum().backward()
    assert on_device.grad.dtype == dtype
    torch.testing.assert_close(on_device.grad.cpu(), reference_input.grad.to(dtype), **tolerance(dtype))


CUFFT_HALF_SIZES = "cuFFT only supports dimensions whose sizes are powers of two when computing in half precision"


# (transform, input shape, keyword arguments, the signal sizes of CUDA's failing plan)
NON_POWER_OF_TWO_SIGNALS = [
    ("fft", (4, 6), {}, [6]),
    ("fft", (4, 8), {"n": 12}, [12]),
    ("rfft", (3, 10), {}, [10]),
    ("irfft", (4, 8), {}, [14]),  # the output's size, 2 * (8 - 1)
    ("irfft", (4, 8), {"n": 6}, [6]),
    ("fft2", (6, 8), {}, [6, 8]),
    ("fft2", (8, 8), {"s": (8, 3)}, [8, 3]),
    # Five dimensions: CUDA's first plan transforms the last three, its second these.
    ("fftn", (3, 2, 2, 4, 8), {}, [3, 2]),
    # Dimensions from (0, 1): CUDA's complex-to-complex plan comes before the last one's.
    ("irfftn", (6, 4, 5), {}, [6, 4]),
]


def with_half_dtypes(cases):
    """Each case with a float16 input and, for the transforms of complex input, complex32."""
    return [
        (*case, dtype)
        for case in cases
        for dtype in (torch.float16, torch.complex32)
        if not (case[0] == "rfft" and dtype == torch.complex32)
    ]


@pytest.mark.parametrize("transform,shape,kwargs,signal,dtype", with_half_dtypes(NON_POWER_OF_TWO_SIGNALS))
def test_half_precision_fft_of_a_non_power_of_two_size_raises_cudas_error(transform, shape, kwargs, signal, dtype):
    """cuFFT plans half-precision transforms only for power-of-two signal sizes; CUDA
    raises its error for the others (functional and out=), and vdev the same."""
    values = torch.randn(shape, dtype=torch.complex64 if dtype.is_complex else torch.float32).to(dtype).to(DEVICE)
    function = getattr(torch.fft, transform)
    out_dtype = torch.float16 if transform.startswith("irfft") else torch.complex32
    message = f"{CUFFT_HALF_SIZES}, but got a signal size of\\[{', '.join(map(str, signal))}\\]$"
    with pytest.raises(RuntimeError, match=message):
        function(values, **kwargs)
    with pytest.raises(RuntimeError, match=message):
        function(values, **kwargs, out=torch.empty(0, dtype=out_dtype, device=DEVICE))
    # Only half precision is refused: the same transform in single precision runs.
    wide = torch.complex64 if dtype.is_complex else torch.float32
    torch.testing.assert_close(function(values.to(wide), **kwargs).cpu(), function(values.cpu().to(wide), **kwargs))


# (transform, input shape, keyword arguments): every signal size a power of two.
POWER_OF_TWO_SIGNALS = [
    ("fft", (4, 8), {}),
    ("fft", (3, 6), {"n": 16}),
    ("rfft", (3, 16), {}),
    ("irfft", (4, 9), {}),
    ("irfft", (4, 7), {"n": 4}),
    ("fft2", (4, 8), {}),
    ("fft2", (6, 5), {"s": (8, 2)}),
    ("fftn", (2, 3, 4, 8), {"dim": (0, 2, 3)}),
    ("ifftn", (2, 2, 2, 4, 8), {}),  # five dimensions: two cuFFT plans
]


@pytest.mark.parametrize("transform,shape,kwargs,dtype", with_half_dtypes(POWER_OF_TWO_SIGNALS))
def test_half_precision_fft_of_power_of_two_sizes_matches_float32_cast_back(transform, shape, kwargs, dtype):
    wide = torch.complex64 if dtype.is_complex else torch.float32
    values = torch.randn(shape, dtype=wide, generator=torch.Generator().manual_seed(0)).to(dtype)
    function = getattr(torch.fft, transform)
    result, reference = function(values.to(DEVICE), **kwargs), function(values.to(wide), **kwargs)
    narrow = torch.complex32 if reference.is_complex() else torch.float16
    assert result.dtype == narrow
    torch.testing.assert_close(result.cpu(), reference.to(narrow), **tolerance(narrow))


def test_bfloat16_ffts_are_refused_as_on_cuda():
    with pytest.raises(RuntimeError, match="Unsupported dtype BFloat16"):
        torch.fft.rfft(torch.randn(8, device=DEVICE, dtype=torch.bfloat16))


MAX_POOL_ENTRIES = ("nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d")
# What CUDA's dispatch errors name: max_pool1d reaches the 2-d kernel off the CPU.
CUDA_MAX_POOL_KERNELS = {1: "max_pool2d_with_indices_out_cuda_frame", 2: "max_pool2d_with_indices_out_cuda_frame",
                         3: "max_pool3d_with_indices_out_frame"}
POOLED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                 torch.int16, torch.int8, torch.uint8, torch.bool)


def max_pool_cases():
    from torch.testing._internal.common_methods_invocations import op_db

    entries = {op.name: op for op in op_db if op.name in MAX_POOL_ENTRIES}
    assert sorted(entries) == sorted(MAX_POOL_ENTRIES)
    return [pytest.param(entries[name], dtype, id=f"{name}-{dtype}") for name in MAX_POOL_ENTRIES for dtype in POOLED_DTYPES]


@pytest.mark.parametrize("op,dtype", max_pool_cases())
def test_max_pooling_takes_the_dtypes_op_db_claims_for_cuda(op, dtype):
    """op_db's CUDA dtypes are floating types, float16 and bfloat16; the CPU's kernels also
    take integers. vdev runs the CUDA dtypes as the CPU computes them and refuses the others
    at the call, with the CUDA kernel's dispatch error."""
    samples = list(op.sample_inputs("cpu", dtype if dtype.is_floating_point else torch.float32))
    samples = [s for s in samples if s.input.numel() > 0]
    dimensions = int(op.name[-2])
    for sample in samples[:4]:
        values = sample.input.to(dtype) if not dtype.is_floating_point else sample.input
        on_device = values.to(DEVICE)
        if dtype in op.supported_dtypes("cuda"):
            results = op(on_device, *sample.args, **sample.kwargs)
            references = op(values.float() if dtype in (torch.float16, torch.bfloat16) else values, *sample.args, **sample.kwargs)
            # (output, indices) with return_indices: both as the CPU's.
            for result, reference in zip(*(r if isinstance(r, tuple) else (r,) for r in (results, references))):
                torch.testing.assert_close(result.cpu(), reference.to(result.dtype), **tolerance(dtype))
            continue
        name = str(dtype).removeprefix("torch.")
        scalar_type = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                       "bool": "Bool"}[name]
        # At the call: with kernels queued, a refusal on the stream would raise only at a synchronization.
        with pytest.raises(NotImplementedError, match=f'"{CUDA_MAX_POOL_KERNELS[dimensions]}" not implemented for \'{scalar_type}\''):
            op(on_device, *sample.args, **sample.kwargs)


@pytest.mark.parametrize("dimensions", (2, 3))
def test_max_pooling_aten_ops_refuse_integers_as_cuda_forward_out_and_backward(dimensions):
    shape = (1, 2) + (4,) * dimensions
    forward = getattr(torch.ops.aten, f"max_pool{dimensions}d_with_indices")
    backward = getattr(torch.ops.aten, f"max_pool{dimensions}d_with_indices_backward")
    kernel = [2] * dimensions
    values = torch.arange(torch.Size(shape).numel()).reshape(shape).to(DEVICE)
    pooled, indices = forward(values.float(), kernel)
    backward_kernel = CUDA_MAX_POOL_KERNELS[dimensions].replace("_out_frame", "_backward_out_frame") if dimensions == 3 else CUDA_MAX_POOL_KERNELS[2]
    with pytest.raises(NotImplementedError, match=f'"{CUDA_MAX_POOL_KERNELS[dimensions]}" not implemented for \'Long\''):
        forward(values, kernel)
    with pytest.raises(NotImplementedError, match=f'"{CUDA_MAX_POOL_KERNELS[dimensions]}" not implemented for \'Long\''):
        forward.out(values, kernel, out=torch.empty(0, dtype=torch.int64, device=DEVICE),
                    indices=torch.empty(0, dtype=torch.int64, device=DEVICE))
    with pytest.raises(NotImplementedError, match=f'"{backward_kernel}" not implemented for \'Long\''):
        backward(pooled.long(), values, kernel, [], [0] * dimensions, [1] * dimensions, False, indices)
    # Floating point runs, with the CPU's values and gradients.
    expected_pooled, expected_indices = forward.default(values.cpu().float(), kernel)
    torch.testing.assert_close(pooled.cpu(), expected_pooled)
    assert torch.equal(indices.cpu(), expected_indices)
    gradient = backward(torch.ones_like(pooled), values.float(), kernel, [], [0] * dimensions, [1] * dimensions, False, indices)
    expected = backward(torch.ones_like(expected_pooled), values.cpu().float(), kernel, [], [0] * dimensions,
                        [1] * dimensions, False, expected_indices)
    torch.testing.assert_close(gradient.cpu(), expected)


REDUCTIONS_INTO = {
    "prod": lambda x, dtype: x.prod(dtype=dtype),
    "prod dim": lambda x, dtype: x.prod(1, dtype=dtype),
    "sum dim": lambda x, dtype: x.sum(1, dtype=dtype),
    "cumprod": lambda x, dtype: x.cumprod(1, dtype=dtype),
}


@pytest.mark.parametrize("source", (torch.float32, torch.int64, torch.complex64, torch.complex32), ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS_INTO))
def test_reductions_into_complex32_compute_in_complex64_as_cuda_takes_them(name, source):
    """CUDA reduces into complex32 (op_db's CUDA dtypes of prod), whatever the input's
    dtype: a complex32 dtype= argument widens the call as a complex32 tensor does, and an
    explicit wider dtype= is kept (complex32 input into complex64 stays complex64)."""
    from torch.testing._internal.common_methods_invocations import op_db

    assert torch.complex32 in next(op for op in op_db if op.name == "prod").supported_dtypes("cuda")
    reduce = REDUCTIONS_INTO[name]
    values = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)) * 0.5 + 1
    values = values.to(source) if source.is_complex else (values.real * 2).to(source)
    on_device = values.to(DEVICE)
    wide = values.to(torch.complex64) if source == torch.complex32 else values
    narrow = reduce(on_device, torch.complex32)
    assert narrow.dtype == torch.complex32
    torch.testing.assert_close(narrow.cpu(), reduce(wide, torch.complex64).to(torch.complex32), **tolerance(torch.complex32))
    kept = reduce(on_device, torch.complex64)
    assert kept.dtype == torch.complex64
    torch.testing.assert_close(kept.cpu(), reduce(wide, torch.complex64), **tolerance(source))
