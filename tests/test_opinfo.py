"""Every OpInfo in PyTorch's op_db on vdev, against the CPU on the same samples.

For each entry and one dtype of each category it supports (floating, integral, bool,
complex), five tests: forward, non-contiguous samples, `out=` (result is the given
tensor, resizing an empty one), in-place (result is the input object), and gradients
in float32 and float64. A sixth runs every entry in each accelerator dtype it has - a
dtype CUDA's kernels take and the CPU's do not (dtypesIfCUDA beyond dtypes) - against
the sample computed on the CPU in a wider dtype and cast back. A seventh runs the
nested-tensor (jagged layout) translation of op_db (`njt_op_db`: the entries PyTorch
gives nested samples) in float32 against the same nested samples on the CPU. Random
ops are compared under the same seed: a seeded vdev generator draws what a seeded CPU
generator draws. Where the CPU raises, vdev must raise the same exception type.
Expected failures are data (expected_failures.py).
"""

import copy
import types

import torch
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, noncontiguous_like, run_tests
from torch.testing._internal.opinfo.definitions.nested import njt_op_db
from torch.utils._pytree import tree_map

from device_suites import DEVICE_TYPE, result_device_type, tensors_in, to_cpu, to_device, with_expected_failures

# One dtype per category, the first the op supports in each list.
DTYPE_CATEGORIES = (
    (torch.float32, torch.float64, torch.float16, torch.bfloat16),
    (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8),
    (torch.bool,),
    (torch.complex64, torch.complex128),
)

# Ops whose results are uninitialized memory: only their metadata is comparable.
UNINITIALIZED_RESULT_OPS = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}

SEED = 1234


# Entries whose vdev kernels take CUDA's dtypes and refuse at the call what CUDA's
# refuse, where the CPU's take more (uint8 bilinear/bicubic: csrc/aten/native/Upsample.cpp,
# checked in test_cuda_semantics.py; integer max pooling: Pooling.cpp, checked in
# test_accelerator_dtypes.py): their CPU-only dtypes are not compared.
CUDA_DTYPE_OPS = {
    "nn.functional.interpolate",
    "nn.functional.upsample_bilinear",
    "_upsample_bilinear2d_aa",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
}


def with_one_dtype_per_category(op):
    supported = op.supported_dtypes(DEVICE_TYPE)
    if op.name in CUDA_DTYPE_OPS:
        supported = supported & op.supported_dtypes("cuda")
    chosen = {next(d for d in category if d in supported) for category in DTYPE_CATEGORIES if supported & set(category)}
    op = copy.copy(op)
    op.dtypesIf = {**op.dtypesIf, DEVICE_TYPE: chosen}
    return op


marked_op_db = with_expected_failures(op_db, "TestOpInfo")
representative_op_db = [with_one_dtype_per_category(op) for op in marked_op_db]


def accelerator_dtypes(op):
    """The dtypes CUDA's kernels take for `op` and the CPU's do not."""
    return set(op.dtypesIf.get("cuda", op.dtypes)) - set(op.dtypes)


def with_accelerator_dtypes(op):
    op = copy.copy(op)
    op.dtypesIf = {**op.dtypesIf, DEVICE_TYPE: accelerator_dtypes(op)}
    return op


# Entries with no CPU kernel to compare with, checked elsewhere.
ACCELERATOR_DTYPES_CHECKED_ELSEWHERE = {
    "torch.ops.aten._flash_attention_forward": "CUDA-only kernel: test_attention_kernels.py checks it against the math path",
    "torch.ops.aten._efficient_attention_forward": "CUDA-only kernel: test_attention_kernels.py checks it against the math path",
}
accelerator_dtype_op_db = [
    with_accelerator_dtypes(op)
    for op in marked_op_db
    if accelerator_dtypes(op) and op.full_name not in ACCELERATOR_DTYPES_CHECKED_ELSEWHERE
]

# The entries with nested samples (njt_op_db translates op_db's entries; the others
# have none).
nested_op_db = [op for op in with_expected_failures(njt_op_db, "TestOpInfo") if op.supports_njt]

# Tolerances beyond the dtype's defaults (the OpInfos set none for these dtypes).
ACCELERATOR_DTYPE_TOLERANCES = {
    # Two transforms (c2c, then c2r), each rounded to complex32 as on CUDA; the
    # reference rounds once.
    "fft.hfft2": {"atol": 5e-2, "rtol": 1e-2},
    "fft.hfftn": {"atol": 5e-2, "rtol": 1e-2},
}

# The reference computes an accelerator dtype in this wider one on the CPU.
WIDER_DTYPE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.complex32: torch.complex64,
    torch.complex64: torch.complex128,
    torch.bool: torch.uint8,
    **{dtype: torch.float64 for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)},
}


def batch_norm_statistics_as_on_cuda(parts, result):
    """In evaluation, native batch norm off the CPU saves the running mean and
    1/sqrt(running_var + eps) per channel in the accumulation type where the CPU saves
    empty tensors (PyTorch's decomposition: "CPU and CUDA give different shapes"); vdev
    saves CUDA's (checked against the decomposition in test_native_kernels.py)."""
    input, args, _ = parts
    if len(args) != 7 or args[4]:  # training, or the overload without running statistics
        return result
    _, _, running_mean, running_var, _, _, eps = to_cpu(args)
    statistics_dtype = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    mean = running_mean.to(statistics_dtype)
    invstd = torch.rsqrt(running_var.to(statistics_dtype) + eps)
    return type(result)((result[0], mean, invstd))


# The CPU's result turned into CUDA's, for the entries whose vdev results are CUDA's.
AS_ON_CUDA = {
    "native_batch_norm": batch_norm_statistics_as_on_cuda,
    "_native_batch_norm_legit": batch_norm_statistics_as_on_cuda,
}


def as_on_cuda(op, parts, cpu_result):
    return AS_ON_CUDA.get(op.name, lambda parts, result: result)(parts, cpu_result)


def sample_parts(sample):
    return sample.input, sample.args, sample.kwargs


def noncontiguous_parts(sample):
    """The sample with its strided tensors made non-contiguous (sparse ones have no
    non-contiguous form)."""
    if all(t.layout == torch.strided for t in tensors_in(sample_parts(sample))):
        return sample_parts(sample.noncontiguous())
    return tree_map(
        lambda v: noncontiguous_like(v) if isinstance(v, torch.Tensor) and v.layout == torch.strided else v,
        sample_parts(sample),
    )


def call(fn, parts):
    input, args, kwargs = parts
    torch.manual_seed(SEED)
    return fn(input, *args, **kwargs)


def widened(parts, dtype, wider):
    """The sample on the CPU with its `dtype` tensors (and dtype= arguments) in `wider`."""

    def widen(value):
        if isinstance(value, torch.dtype):
            return wider if value == dtype else value
        if isinstance(value, torch.Tensor) and value.dtype == dtype:
            return value.to(wider)
        return value

    return tree_map(widen, to_cpu(parts))


def wider_reference(op, parts, dtype):
    """The op on the CPU in `dtype` where the CPU kernels take it (as vdev runs them),
    else in a wider dtype; where no CPU kernel takes the op in any width (nansum of
    complex tensors), the OpInfo's NumPy reference in the wider dtype."""
    wider = WIDER_DTYPE.get(dtype, dtype)
    for compute in dict.fromkeys((dtype, wider)):
        try:
            return call(op, widened(parts, dtype, compute))
        except (NotImplementedError, RuntimeError):
            if compute == wider and op.ref is None:
                raise
    as_numpy = lambda value: value.detach().numpy() if isinstance(value, torch.Tensor) else value
    input, args, kwargs = tree_map(as_numpy, widened(parts, dtype, wider))
    return torch.as_tensor(op.ref(input, *args, **kwargs))


class CpuRaised(Exception):
    """The CPU reference raised; vdev raised the same type."""


class TestOpInfo(TestCase):
    def run_on_both(self, fn, sample_on_device, sample_on_cpu=None):
        """(result on vdev, result on CPU). Raises CpuRaised when the CPU raises, after
        checking that vdev raises the same exception type."""
        if sample_on_cpu is None:
            sample_on_cpu = to_cpu(sample_on_device)
        try:
            expected = fn(sample_on_cpu)
        except Exception as error:
            with self.assertRaises(type(error)):
                fn(sample_on_device)
            raise CpuRaised() from error
        return fn(sample_on_device), expected

    def assert_matches_cpu(self, op, actual, expected, result_device=DEVICE_TYPE):
        for tensor in tensors_in(actual):
            self.assertEqual(tensor.device.type, result_device)
        if op.name in UNINITIALIZED_RESULT_OPS:
            self.assertEqual(tree_map(lambda t: (t.shape, t.dtype), actual), tree_map(lambda t: (t.shape, t.dtype), expected))
        else:
            self.assertEqual(actual, expected, exact_device=False)

    def for_each_sample(self, samples, check):
        for sample in samples:
            try:
                check(sample)
            except CpuRaised:
                pass
            except Exception as error:
                error.add_note(f"sample: {sample.summary()}")
                raise

    @ops(representative_op_db, dtypes=OpDTypes.supported)
    def test_forward(self, device, dtype, op):
        def check(sample):
            parts = sample_parts(sample)
            actual, expected = self.run_on_both(lambda parts: call(op, parts), parts)
            self.assert_matches_cpu(op, actual, as_on_cuda(op, parts, expected), result_device_type(parts))

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops(representative_op_db, dtypes=OpDTypes.supported)
    def test_noncontiguous(self, device, dtype, op):
        def check(sample):
            noncontiguous = noncontiguous_parts(sample)
            actual, expected = self.run_on_both(lambda parts: call(op, parts), noncontiguous)
            self.assert_matches_cpu(op, actual, as_on_cuda(op, noncontiguous, expected), result_device_type(noncontiguous))

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops([op for op in representative_op_db if op.supports_out], dtypes=OpDTypes.supported)
    def test_out(self, device, dtype, op):
        def check(sample):
            parts = sample_parts(sample)
            try:
                expected = as_on_cuda(op, parts, call(op, to_cpu(parts)))
            except Exception:
                return  # test_forward checks that vdev raises too
            single = not isinstance(expected, (tuple, list))
            expected_results = [expected] if single else list(expected)
            if not all(isinstance(t, torch.Tensor) for t in expected_results):
                return  # no tensor result to write into

            def call_with_out(parts, out_device, out_size):
                """The out= tensors, after checking that the op returned them."""
                outs = [
                    torch.empty(t.shape if out_size is None else out_size, dtype=t.dtype, device=out_device)
                    for t in expected_results
                ]
                input, args, kwargs = parts
                result = call(op, (input, args, {**kwargs, "out": outs[0] if single else tuple(outs)}))
                results = [result] if single else list(result)
                self.assertTrue(
                    len(results) == len(outs) and all(r is o for r, o in zip(results, outs)),
                    "out= returned other tensors",
                )
                return outs

            for out_size in (None, 0):  # of the result, and empty (resized by the op)
                actual, expected_outs = self.run_on_both(
                    lambda p: call_with_out(*p, out_size), (parts, device), (to_cpu(parts), "cpu")
                )
                expected_outs = as_on_cuda(op, parts, expected_outs)
                try:
                    self.assert_matches_cpu(op, expected_outs, expected_results, "cpu")
                except AssertionError:
                    return  # the CPU fails this sample itself: its out= result is not its result
                self.assert_matches_cpu(op, actual, expected_outs)

            # Native out= kernels refuse outputs on another device; ops written in Python
            # (torch.lu) copy into them, as on CUDA.
            if isinstance(op.op, types.BuiltinFunctionType) and any(
                t.device.type == DEVICE_TYPE for t in tensors_in(parts)
            ):
                with self.assertRaisesRegex(RuntimeError, "(?i)device"):
                    call_with_out(parts, "cpu", None)

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops([op for op in representative_op_db if op.get_inplace() is not None], dtypes=OpDTypes.supported)
    def test_inplace(self, device, dtype, op):
        inplace = op.get_inplace()

        def check(sample):
            input, args, kwargs = sample_parts(sample)
            target = input.clone()
            cpu_target = to_cpu(input).clone()
            cpu_parts = (cpu_target, *to_cpu((args, kwargs)))
            result, expected = self.run_on_both(lambda parts: call(inplace, parts), (target, args, kwargs), cpu_parts)
            self.assertIs(result, target)
            self.assertIs(expected, cpu_target)
            self.assert_matches_cpu(op, target, cpu_target)

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops(accelerator_dtype_op_db, dtypes=OpDTypes.supported)
    def test_accelerator_dtypes(self, device, dtype, op):
        """The dtype CUDA returns (the meta device's, which follows the accelerators'
        rules) and the values of the op computed in a wider dtype, cast back."""

        def check(sample):
            parts = sample_parts(sample)
            actual = call(op, parts)
            expected_dtypes = [t.dtype for t in tensors_in(call(op, to_device(parts, "meta")))]
            reference = wider_reference(op, parts, dtype)
            self.assertEqual([t.dtype for t in tensors_in(actual)], expected_dtypes)
            for got, want in zip(tensors_in(actual), tensors_in(reference), strict=True):
                self.assertEqual(got.device.type, DEVICE_TYPE)
                self.assertEqual(
                    got, want.to(got.dtype), exact_device=False, **ACCELERATOR_DTYPE_TOLERANCES.get(op.full_name, {})
                )

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops(nested_op_db, allowed_dtypes=(torch.float32,))
    def test_nested_forward(self, device, dtype, op):
        """Results as the CPU's on the same nested samples, compared component by component."""

        def components(tree):
            return [part for t in tensors_in(tree) for part in (t.unbind() if t.is_nested else (t,))]

        def check(sample):
            parts = sample_parts(sample)
            actual, expected = self.run_on_both(lambda parts: call(op, parts), parts)
            for tensor in tensors_in(actual):
                self.assertEqual(tensor.device.type, result_device_type(parts))
            self.assertEqual(components(actual), components(expected), exact_device=False)

        self.for_each_sample(op.sample_inputs(device, dtype), check)

    @ops(
        [op for op in marked_op_db if op.supports_autograd],
        dtypes=OpDTypes.supported_backward,
        allowed_dtypes=(torch.float32, torch.float64),
    )
    def test_grad(self, device, dtype, op):
        def check(sample):
            def gradients(parts):
                output = call(lambda *a, **k: op.gradcheck_wrapper(op.get_op(), *a, **k), parts)
                outputs = [t for t in tensors_in(sample.output_process_fn_grad(output)) if t.requires_grad]
                inputs = [t for t in tensors_in(parts) if t.requires_grad]
                if not outputs:
                    return []
                generator = torch.Generator().manual_seed(SEED)
                grad_outputs = [torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in outputs]
                return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)

            actual, expected = self.run_on_both(gradients, sample_parts(sample))
            self.assert_matches_cpu(op, actual, expected)

        self.for_each_sample(op.sample_inputs(device, dtype, requires_grad=True), check)


instantiate_device_type_tests(TestOpInfo, globals(), only_for=DEVICE_TYPE)

if __name__ == "__main__":
    run_tests()
