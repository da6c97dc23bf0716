"""A launch remembers, per thread, what its meta kernel said of a call's outputs and
skips the meta kernel for a call with the same signature (csrc/aten/MetaResultCache.h).
Each test repeats calls that share or differ in one part of the signature and checks
results, dtypes, errors and warnings against the same calls on CPU tensors."""

import threading
import warnings

import pytest
import torch
from torch.testing import assert_close


def _pair(*sizes, dtype=torch.float32):
    cpu = torch.randn(*sizes).to(dtype) if dtype.is_floating_point else (torch.randn(*sizes) * 4).to(dtype)
    return cpu, cpu.to("vdev")


def _same(vdev_result, cpu_result):
    assert vdev_result.device.type == "vdev"
    assert vdev_result.dtype == cpu_result.dtype
    assert vdev_result.stride() == cpu_result.stride()
    assert_close(vdev_result.cpu(), cpu_result)


def test_repeated_calls_match_cpu():
    a, a_v = _pair(3, 4)
    b, b_v = _pair(3, 4)
    for _ in range(3):
        _same(torch.add(a_v, b_v, alpha=2), torch.add(a, b, alpha=2))


@pytest.mark.parametrize(
    "sizes",
    [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((1,), (3, 4)), ((2, 3, 4), (3, 1))],
)
def test_broadcast_shapes_after_other_shapes(sizes):
    # Warm the cache with another shape first: a signature must not match another's.
    w, w_v = _pair(5)
    _same(torch.mul(w_v, w_v), torch.mul(w, w))
    a, a_v = _pair(*sizes[0])
    b, b_v = _pair(*sizes[1])
    for _ in range(2):
        _same(torch.mul(a_v, b_v), torch.mul(a, b))


def test_type_promotion_follows_dtypes_and_scalar_kinds():
    for dtype in (torch.float32, torch.int64, torch.int32, torch.float64, torch.bool):
        a, a_v = _pair(4, dtype=dtype)
        for other in (2, 2.5, True, complex(1, 1)):
            for _ in range(2):
                _same(torch.add(a_v, other), torch.add(a, other))


def test_integer_scalar_of_other_value_same_result_kind():
    a, a_v = _pair(4, dtype=torch.int64)
    for alpha in (1, 2, 3):
        _same(torch.add(a_v, a_v, alpha=alpha), torch.add(a, a, alpha=alpha))


def test_strides_and_memory_format_are_part_of_the_signature():
    a, a_v = _pair(2, 3, 4, 5)
    last, last_v = a.contiguous(memory_format=torch.channels_last), a_v.contiguous(memory_format=torch.channels_last)
    for _ in range(2):
        _same(torch.exp(a_v), torch.exp(a))
        _same(torch.exp(last_v), torch.exp(last))
        _same(torch.exp(a_v.transpose(1, 3)), torch.exp(a.transpose(1, 3)))


def test_dim_arguments_are_part_of_the_signature():
    a, a_v = _pair(3, 4)
    for dim in (0, 1, 0, 1, -1):
        _same(torch.sum(a_v, dim), torch.sum(a, dim))
        _same(torch.sum(a_v, dim, keepdim=True), torch.sum(a, dim, keepdim=True))


def test_string_arguments_are_part_of_the_signature():
    a, a_v = _pair(8)
    for approximate in ("none", "tanh", "none"):
        _same(torch.nn.functional.gelu(a_v, approximate=approximate), torch.nn.functional.gelu(a, approximate=approximate))
    b, b_v = _pair(8)
    for mode in (None, "floor", "trunc", None):
        _same(torch.div(a_v, b_v, rounding_mode=mode), torch.div(a, b, rounding_mode=mode))


def test_errors_raise_at_every_call():
    a, a_v = _pair(3)
    b_v = torch.randn(4, device="vdev")
    _same(torch.add(a_v, a_v), torch.add(a, a))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="must match the size"):
            torch.add(a_v, b_v)
    _same(torch.add(a_v, a_v), torch.add(a, a))


def test_overlap_of_arguments_is_part_of_the_signature():
    # Same sizes, strides and offsets: over two storages it is allowed, over one the
    # input and output partially overlap, which CPU refuses.
    x, y = torch.zeros(4, device="vdev"), torch.arange(4.0, device="vdev")
    for _ in range(2):
        torch.add(y[:3], 1, out=x[1:])
    assert_close(x.cpu(), torch.tensor([0.0, 1.0, 2.0, 3.0]))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.add(y[:3], 1, out=y[1:])
    # One tensor passed twice (in place on itself) is a different signature from two.
    x_cpu = x.cpu()
    z, z_cpu = torch.ones(4, device="vdev"), torch.ones(4)
    for _ in range(2):
        torch.mul(z, z, out=z)
        torch.mul(z_cpu, z_cpu, out=z_cpu)
        torch.mul(x, z, out=z)
        torch.mul(x_cpu, z_cpu, out=z_cpu)
    assert_close(z.cpu(), z_cpu)


def test_out_resize_warns_at_every_call():
    a, a_v = _pair(4)
    counts = []
    for device, source in (("cpu", a), ("vdev", a_v)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                out = torch.empty(2, device=device)
                torch.exp(source, out=out)
                assert out.shape == (4,)
        counts.append(sum("resized" in str(w.message) for w in caught))
    assert counts[0] == 3
    assert counts[1] == counts[0]


def test_default_dtype_is_part_of_the_signature():
    a, a_v = _pair(3, dtype=torch.int64)
    previous = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            _same(torch.true_divide(a_v, 2), torch.true_divide(a, 2))
    finally:
        torch.set_default_dtype(previous)


def test_wrapped_numbers_promote_like_scalars():
    a, a_v = _pair(3, dtype=torch.float16)
    t, t_v = _pair(3, dtype=torch.float64)
    for _ in range(2):
        _same(a_v * 2.5, a * 2.5)
        _same(a_v * t_v, a * t)


def test_threads_keep_their_own_results():
    errors = []

    def work(sizes):
        try:
            a, a_v = _pair(*sizes)
            for _ in range(50):
                _same(torch.sigmoid(a_v) + a_v, torch.sigmoid(a) + a)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(sizes,)) for sizes in ((3,), (2, 5), (7, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64, torch.float16])
def test_abs_and_logical_and_launch(dtype):
    import torch_vdev

    a, a_v = _pair(6, 4, dtype=dtype)
    b, b_v = _pair(6, dtype=dtype)
    cases = [(a, a_v), (a.t(), a_v.t()), (a[:, ::2], a_v[:, ::2])]
    torch_vdev.reset_synchronizing_op_stats()
    results = [
        (torch.abs(vdev), torch.abs(cpu), torch.logical_and(vdev, b_v[: vdev.shape[-1]]),
         torch.logical_and(cpu, b[: cpu.shape[-1]]))
        for cpu, vdev in cases
    ]
    results.append((torch.logical_and(a_v, torch.tensor(True)), torch.logical_and(a, torch.tensor(True))))
    assert torch_vdev.synchronizing_op_stats() == {}
    for launched_and_cpu in results:
        for vdev_result, cpu_result in zip(launched_and_cpu[::2], launched_and_cpu[1::2]):
            _same(vdev_result, cpu_result)

