"""Python kernels: implementing and overriding vdev ops in Python."""

import gc
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import torch_vdev
from torch_vdev import python_kernels

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _remove_leftover_kernels():
    yield
    for registration in list(python_kernels._active):
        registration.remove()


def numpy_sin(x):
    return torch.from_numpy(np.sin(x.numpy()))


# Registration and precedence


@pytest.mark.parametrize("op", ["aten::special_i0e", aten.special_i0e, aten.special_i0e.default])
def test_kernel_runs_for_vdev_tensors_given_any_op_form(op):
    seen = []

    @torch_vdev.kernel(op)
    def i0e(x):
        seen.append(x.device)
        return torch.from_numpy(np.exp(-np.abs(x.numpy())) * np.i0(x.numpy()))

    source = torch.randn(50, dtype=torch.float64)
    result = torch.special.i0e(source.to("vdev"))
    assert seen == [torch.device("cpu")]
    assert result.device == torch.device("vdev:0") and torch_vdev._C.is_vdev_tensor_impl(result)
    assert_close(result.cpu(), torch.special.i0e(source))
    i0e.remove()


def test_kernel_takes_precedence_over_the_fallback_and_removal_restores_it():
    calls = []

    @torch_vdev.kernel("aten::special_i0e")
    def i0e(x):
        calls.append(1)
        return torch.zeros_like(x)

    source = torch.randn(8)
    assert torch.equal(torch.special.i0e(source.to("vdev")).cpu(), torch.zeros(8))
    i0e.remove()
    assert_close(torch.special.i0e(source.to("vdev")).cpu(), torch.special.i0e(source))
    assert len(calls) == 1


def test_kernel_takes_precedence_over_a_native_kernel_and_removal_restores_it():
    @torch_vdev.kernel(aten.fill_.Scalar)
    def fill_(x, value):
        x.numpy()[...] = value + 1
        return x

    tensor = torch.empty(4, device="vdev")
    assert tensor.fill_(2.0) is tensor
    assert torch.equal(tensor.cpu(), torch.full((4,), 3.0))
    fill_.remove()
    tensor.fill_(2.0)
    assert torch.equal(tensor.cpu(), torch.full((4,), 2.0))


def test_kernel_replaces_a_native_kernel_result():
    @torch_vdev.kernel(aten._local_scalar_dense.default)
    def local_scalar(x):
        return x.item() + 100

    assert torch.tensor(2.0, device="vdev").item() == 102.0
    local_scalar.remove()
    assert torch.tensor(2.0, device="vdev").item() == 2.0


def test_cpu_tensors_are_not_affected():
    with torch_vdev.kernels({aten.sin.default: lambda x: torch.zeros_like(x)}):
        source = torch.randn(5)
        assert_close(source.sin(), torch.from_numpy(np.sin(source.numpy())))
        assert torch.equal(source.to("vdev").sin().cpu(), torch.zeros(5))


def test_packet_registers_every_overload():
    seen = []

    def add(a, b, *, alpha=1, out=None):
        seen.append(out is not None)
        result = torch.from_numpy(np.add(a.numpy(), alpha * np.asarray(b)))
        if out is None:
            return result
        out.resize_(result.shape).copy_(result)
        return out

    with torch_vdev.kernels({aten.add: add}) as registration:
        # aten::add's other overloads (add.int, add.str, ...) are TorchScript-only.
        assert set(registration.ops) == {aten.add.Tensor, aten.add.Scalar, aten.add.out, aten.add.Scalar_out}
        a, b = torch.randn(3), torch.randn(3)
        assert_close((a.to("vdev") + b.to("vdev")).cpu(), a + b)
        out = torch.empty(0, device="vdev")
        torch.add(a.to("vdev"), b.to("vdev"), alpha=2, out=out)
        assert_close(out.cpu(), a + 2 * b)
    assert seen == [False, True]


def test_stacked_kernels_unwind_in_any_order():
    source = torch.randn(4)
    first = torch_vdev.kernel(aten.sin.default)(lambda x: torch.full_like(x, 1.0))
    second = torch_vdev.kernel(aten.sin.default)(lambda x: torch.full_like(x, 2.0))
    assert torch.equal(source.to("vdev").sin().cpu(), torch.full((4,), 2.0))
    first.remove()
    assert torch.equal(source.to("vdev").sin().cpu(), torch.full((4,), 2.0))
    second.remove()
    assert_close(source.to("vdev").sin().cpu(), source.sin())


def test_context_manager_removes_kernels_even_on_error():
    source = torch.randn(4)
    with pytest.raises(KeyError):
        table = {aten.sin.default: lambda x: torch.zeros_like(x), aten.cos.default: lambda x: torch.ones_like(x)}
        with torch_vdev.kernels(table):
            assert torch.equal(source.to("vdev").sin().cpu(), torch.zeros(4))
            assert torch.equal(source.to("vdev").cos().cpu(), torch.ones(4))
            raise KeyError("leave the block")
    assert_close(source.to("vdev").sin().cpu(), source.sin())
    assert_close(source.to("vdev").cos().cpu(), source.cos())


def test_registration_lasts_until_removed_without_a_reference():
    reference = weakref.ref(torch_vdev.kernels({aten.sin.default: lambda x: torch.zeros_like(x)}))
    gc.collect()
    assert torch.equal(torch.ones(2, device="vdev").sin().cpu(), torch.zeros(2))
    reference().remove()
    gc.collect()
    assert reference() is None
    assert_close(torch.ones(2, device="vdev").sin().cpu(), torch.ones(2).sin())


def test_removing_twice_is_harmless():
    registration = torch_vdev.kernels({aten.sin.default: lambda x: torch.zeros_like(x)})
    registration.remove()
    registration.remove()
    assert_close(torch.ones(2, device="vdev").sin().cpu(), torch.ones(2).sin())


def test_decorated_function_stays_callable():
    assert_close(torch_vdev.kernel(aten.sin.default)(numpy_sin)(torch.ones(3)), torch.ones(3).sin())


# Calling convention and zero copy


def test_arguments_are_zero_copy_aliases_and_fresh_results_are_adopted():
    seen = {}

    @torch_vdev.kernel(aten.sin.default)
    def sin(x):
        seen["argument"] = x.data_ptr()
        result = torch.sin(x)
        seen["result"] = result.data_ptr()
        return result

    tensor = torch.randn(1000, device="vdev")
    result = tensor.sin()
    assert seen["argument"] == tensor.data_ptr()
    assert result.data_ptr() == seen["result"]
    assert_close(result.cpu(), tensor.cpu().sin())


def test_numpy_results_are_copied_into_device_memory():
    arrays = []

    @torch_vdev.kernel(aten.sin.default)
    def sin(x):
        arrays.append(np.sin(x.numpy()))
        return torch.from_numpy(arrays[-1])

    source = torch.randn(64)
    tensor = source.to("vdev")
    before = torch.vdev.memory_allocated()
    result = tensor.sin()
    assert result.data_ptr() != arrays[0].ctypes.data
    assert torch.vdev.memory_allocated() >= before + result.nbytes
    arrays[0][:] = 0
    assert_close(result.cpu(), source.sin())


def test_result_sharing_an_argument_of_a_non_view_op_is_copied():
    @torch_vdev.kernel(aten.clone.default)
    def clone(x, *, memory_format=None):
        return x

    tensor = torch.randn(6, device="vdev")
    copy = tensor.clone()
    assert copy.data_ptr() != tensor.data_ptr()
    assert torch.equal(copy.cpu(), tensor.cpu())


def test_view_result_aliases_its_argument():
    @torch_vdev.kernel(aten.unfold.default)
    def unfold(x, dimension, size, step):
        return x.unfold(dimension, size, step)

    base = torch.arange(12.0, device="vdev")
    view = base.unfold(0, 3, 3)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(view.cpu(), torch.arange(12.0).unfold(0, 3, 3))


def test_defaults_are_omitted_and_dtypes_are_torch_dtypes():
    calls = []

    @torch_vdev.kernel(aten.sum.dim_IntList)
    def total(*args, **kwargs):
        calls.append((args[1:], kwargs))
        return NotImplemented

    tensor = torch.ones(2, 3, device="vdev")
    tensor.sum(1)
    tensor.sum(1, keepdim=True, dtype=torch.float64)
    assert calls == [(([1],), {}), (([1], True), {"dtype": torch.float64})]


def test_not_implemented_hands_the_call_to_the_cpu_kernel():
    handled = []

    @torch_vdev.kernel(aten.sin.default)
    def sin(x):
        if x.dtype != torch.float64:
            return NotImplemented
        handled.append(x.dtype)
        return numpy_sin(x)

    for dtype in (torch.float32, torch.float64):
        source = torch.randn(9, dtype=dtype)
        result = source.to("vdev").sin()
        assert result.dtype == dtype
        assert_close(result.cpu(), source.sin())
    assert handled == [torch.float64]


def test_device_arguments_reach_the_kernel_as_cpu():
    devices = []

    @torch_vdev.kernel(aten.ones.default)
    def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
        devices.append(device)
        return torch.full(size, 7.0, dtype=dtype, device=device)

    result = torch.ones(2, 2, device="vdev:1")
    assert devices == [torch.device("cpu")]
    assert result.device == torch.device("vdev:1")
    assert torch.equal(result.cpu(), torch.full((2, 2), 7.0))


# In-place and out= ops


def test_in_place_kernel_writes_the_argument():
    @torch_vdev.kernel(aten.sin_.default)
    def sin_(x):
        np.sin(x.numpy(), out=x.numpy())

    source = torch.randn(10)
    tensor = source.to("vdev")
    version = tensor._version
    assert tensor.sin_() is tensor
    assert tensor._version > version
    assert_close(tensor.cpu(), source.sin())


def test_out_kernel_resizes_and_writes_out():
    @torch_vdev.kernel(aten.sin.out)
    def sin_out(x, *, out):
        out.resize_(x.shape)
        np.sin(x.numpy(), out=out.numpy())
        return out

    source = torch.randn(3, 4)
    out = torch.empty(0, device="vdev")
    assert torch.sin(source.to("vdev"), out=out) is out
    assert out.shape == (3, 4) and out.device.type == "vdev"
    assert_close(out.cpu(), source.sin())
    assert torch.vdev.memory_allocated() >= out.nbytes


def test_out_kernel_serves_the_functional_and_in_place_variants_until_removed():
    # As through PyTorch's composite for structured ops, which vdev otherwise bypasses.
    calls = []

    @torch_vdev.kernel(aten.heaviside.out)
    def heaviside_out(x, values, *, out):
        calls.append(1)
        out.resize_(x.shape)
        np.heaviside(x.numpy(), values.numpy(), out=out.numpy())
        return out

    a, b = torch.randn(5), torch.randn(5)
    assert_close(torch.heaviside(a.to("vdev"), b.to("vdev")).cpu(), torch.heaviside(a, b))
    assert_close(a.to("vdev").heaviside_(b.to("vdev")).cpu(), torch.heaviside(a, b))
    assert calls == [1, 1]
    heaviside_out.remove()
    torch_vdev.reset_fallback_stats()
    assert_close(torch.heaviside(a.to("vdev"), b.to("vdev")).cpu(), torch.heaviside(a, b))
    assert calls == [1, 1]
    assert torch_vdev.fallback_stats() == {"aten::heaviside": 1}


def test_out_kernel_with_several_outputs_may_return_none():
    @torch_vdev.kernel(aten.aminmax.out)
    def aminmax_out(x, *, dim=None, keepdim=False, min, max):
        min.resize_(()).fill_(x.min())
        max.resize_(()).fill_(x.max())

    source = torch.randn(7)
    low, high = torch.empty(0, device="vdev"), torch.empty(0, device="vdev")
    result = torch.aminmax(source.to("vdev"), out=(low, high))
    assert result.min is low and result.max is high
    assert low.item() == source.min().item() and high.item() == source.max().item()


def test_in_place_kernel_returning_a_new_tensor_is_an_error():
    @torch_vdev.kernel(aten.sin_.default)
    def sin_(x):
        return torch.sin(x)

    tensor = torch.randn(3, device="vdev")
    message = r"aten::sin_ returned a new tensor for its in-place or out= argument 'self'"
    with pytest.raises(RuntimeError, match=message):
        tensor.sin_()


# Autograd


def test_autograd_uses_the_ops_derivative_formula():
    calls = []

    @torch_vdev.kernel(aten.sin.default)
    def sin(x):
        calls.append(1)
        return numpy_sin(x)

    source = torch.randn(6, dtype=torch.float64)
    tensor = source.to("vdev").requires_grad_()
    tensor.sin().sum().backward()
    assert calls
    assert_close(tensor.grad.cpu(), source.cos())
    assert torch.autograd.gradcheck(torch.sin, (source.to("vdev").requires_grad_(),))


def test_kernels_run_on_the_autograd_engine_thread():
    threads = []

    @torch_vdev.kernel(aten.mul.Tensor)
    def mul(a, b):
        threads.append(threading.get_ident())
        return torch.from_numpy(np.multiply(a.numpy(), b.numpy()))

    source = torch.randn(5)
    tensor = source.to("vdev").requires_grad_()
    (tensor * tensor).sum().backward()
    assert_close(tensor.grad.cpu(), 2 * source)
    assert len(threads) == 3 and threads[-1] != threading.get_ident()


def test_composite_op_kernel_warns_that_gradients_cannot_flow():
    with pytest.warns(UserWarning, match="gradients cannot flow through aten::linear"):
        torch_vdev.kernel(aten.linear.default)(lambda x, w, b=None: x @ w.T)


# Errors


def test_exception_keeps_its_type_and_names_the_op():
    @torch_vdev.kernel(aten.sin.default)
    def sin(x):
        raise ValueError("no sine today")

    with pytest.raises(ValueError, match="no sine today") as caught:
        torch.ones(2, device="vdev").sin()
    assert caught.value.__notes__ == ["raised by the Python kernel for aten::sin on vdev"]
    sin.remove()
    assert_close(torch.ones(2, device="vdev").sin().cpu(), torch.ones(2).sin())


def test_exception_in_backward_reaches_the_caller():
    @torch_vdev.kernel(aten.cos.default)
    def cos(x):
        raise ArithmeticError("no cosine in backward")

    tensor = torch.randn(3, device="vdev", requires_grad=True)
    with pytest.raises(ArithmeticError, match="no cosine in backward"):
        tensor.sin().sum().backward()


@pytest.mark.parametrize(
    "result, error, message",
    [
        (
            lambda x: np.sin(x.numpy()),
            TypeError,
            r"aten::sin returned a value of type ndarray where its schema returns Tensor \(torch.from_numpy",
        ),
        (lambda x: (x, x), TypeError, r"aten::sin returned a value of type tuple where its schema returns Tensor"),
        (
            lambda x: x.sin().to("vdev"),
            RuntimeError,
            r"aten::sin returned a tensor on vdev:0: it receives CPU tensors and must return CPU tensors",
        ),
    ],
    ids=["numpy", "tuple", "device"],
)
def test_wrong_results_are_clear_errors(result, error, message):
    with torch_vdev.kernels({aten.sin.default: result}):
        with pytest.raises(error, match=message):
            torch.ones(2, device="vdev").sin()
    assert_close(torch.ones(2, device="vdev").sin().cpu(), torch.ones(2).sin())


def test_wrong_number_of_results_is_a_clear_error():
    with torch_vdev.kernels({aten.aminmax.default: lambda x, **kwargs: x.min()}):
        message = r"aten::aminmax returned a value of type Tensor; .* returns a tuple of 2"
        with pytest.raises(TypeError, match=message):
            torch.aminmax(torch.ones(3, device="vdev"))


@pytest.mark.parametrize(
    "op, error, message",
    [
        ("sin", ValueError, "needs a namespace, as in 'aten::sin'"),
        ("aten::no_such_op", ValueError, "unknown op 'aten::no_such_op'"),
        (
            "aten::add",
            ValueError,
            r"aten::add has no overload 'default' \(it has .*Tensor.*\); torch.ops.aten.add names all",
        ),
        ("aten::add.nope", ValueError, "aten::add has no overload 'nope'"),
        (aten.add.int, ValueError, "aten::add.int is a TorchScript operator"),
        (aten.copy_.default, ValueError, "aten::copy_ copies between devices"),
        (42, TypeError, "expected an op name such as 'aten::gelu'.*got int"),
    ],
)
def test_bad_ops_are_rejected(op, error, message):
    with pytest.raises(error, match=message):
        torch_vdev.kernel(op)


def test_non_callable_kernel_is_rejected():
    with pytest.raises(TypeError, match="a kernel must be callable, got str"):
        torch_vdev.kernels({aten.sin.default: "sin"})
    assert not python_kernels._active


# Threads


def test_kernels_called_from_several_threads():
    calls = []

    @torch_vdev.kernel(aten.mul.Tensor)
    def mul(a, b):
        calls.append(1)
        return torch.from_numpy(np.multiply(a.numpy(), b.numpy()))

    failures = []

    def work(seed):
        generator = torch.Generator().manual_seed(seed)
        try:
            for _ in range(100):
                a, b = torch.randn(32, generator=generator), torch.randn(32, generator=generator)
                assert_close((a.to("vdev") * b.to("vdev")).cpu(), a * b)
        except Exception as error:  # reported below: pytest does not see other threads
            failures.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(calls) == 400


# The table form and decompositions


def test_backend_environment_registers_a_table_and_decorated_ops():
    environment = torch_vdev.BackendEnvironment({aten.sin.default: numpy_sin})

    @environment.register_op(aten.cos.default)
    def cos(x):
        return torch.from_numpy(np.cos(x.numpy()) + 1)

    source = torch.randn(5)
    with environment.install() as registration:
        assert set(registration.ops) == {aten.sin.default, aten.cos.default}
        assert_close(source.to("vdev").sin().cpu(), source.sin())
        assert_close(source.to("vdev").cos().cpu(), source.cos() + 1)
    assert_close(source.to("vdev").cos().cpu(), source.cos())


def test_decompositions_reach_the_tables_kernels():
    from torch._decomp import get_decompositions

    calls = []

    def mul(a, b):
        calls.append("mul")
        return torch.from_numpy(np.multiply(a.numpy(), np.asarray(b)))

    # huber_loss has no vdev kernel (it runs through the fallback) and decomposes into mul.
    environment = torch_vdev.BackendEnvironment({aten.mul.Tensor: mul})
    environment.register_default_decompositions(get_decompositions([aten.huber_loss]))
    a, b = torch.randn(4), torch.randn(4)
    with environment.install() as registration:
        assert aten.huber_loss.default in registration.ops
        result = torch.nn.functional.huber_loss(a.to("vdev"), b.to("vdev"), delta=0.5)
    assert "mul" in calls
    assert_close(result.cpu(), torch.nn.functional.huber_loss(a, b, delta=0.5))


def test_default_decompositions_leave_vdevs_own_kernels_composites_and_views():
    environment = torch_vdev.BackendEnvironment({aten.addcmul.default: lambda *args, **kw: NotImplemented})
    environment.register_default_decompositions()
    with environment.install() as registration:
        decomposed = set(registration.ops)
        # Ops without a vdev kernel get their decompositions; vdev's native kernels stay.
        assert aten.huber_loss.default in decomposed and aten.hardshrink.default in decomposed
        assert aten.fill_.Scalar not in decomposed and aten.hardswish.default not in decomposed
        assert aten.linear.default not in decomposed  # decomposes before reaching vdev
        assert aten.t.default not in decomposed and aten.detach.default not in decomposed  # views
        assert torch_vdev._C.has_vdev_kernel("aten::hardshrink", "")
    assert not torch_vdev._C.has_vdev_kernel("aten::hardshrink", "")


@pytest.mark.parametrize(
    "run",
    [
        lambda t, u: torch.nn.functional.hardswish(t),
        lambda t, u: torch.nn.functional.silu(t.clone(), inplace=True),
        lambda t, u: torch.lerp(t, u, 0.3),
        lambda t, u: torch.logaddexp(t, u),
        lambda t, u: torch.nn.functional.mse_loss(t, u),
        lambda t, u: torch.xlogy(t.abs(), u.abs(), out=torch.empty(0, device=t.device)),
        lambda t, u: torch.roll(t, 2, 0),
        lambda t, u: torch.tril(t.reshape(4, 4), -1),
        lambda t, u: torch.stack([t, u]),
        lambda t, u: torch.logsumexp(t.reshape(4, 4), 1),
        lambda t, u: torch.nan_to_num(t / 0.0),
    ],
    ids=[
        "hardswish", "silu_", "lerp", "logaddexp", "mse_loss", "xlogy_out",
        "roll", "tril", "stack", "logsumexp", "nan_to_num",
    ],
)
def test_default_decompositions_match_cpu(run):
    environment = torch_vdev.BackendEnvironment()
    environment.register_default_decompositions()
    first, second = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    with environment.install():
        result = run(first.to("vdev"), second.to("vdev"))
    assert result.device.type == "vdev"
    assert_close(result.cpu(), run(first, second))


def test_decomposition_returning_not_implemented_runs_the_cpu_kernel():
    calls = []

    def decline(x):
        calls.append(x.device)
        return NotImplemented

    environment = torch_vdev.BackendEnvironment()
    environment.register_default_decompositions({aten.special_i0e.default: decline})
    source = torch.randn(8)
    with environment.install():
        result = torch.special.i0e(source.to("vdev"))
    assert calls == [torch.device("vdev:0")]
    assert_close(result.cpu(), torch.special.i0e(source))


@pytest.mark.parametrize(
    "loss",
    [
        lambda x: torch.nn.functional.hardswish(x).sum(),
        # nll_loss_backward receives its absent weight as an undefined tensor.
        lambda x: torch.nn.functional.nll_loss(
            x.reshape(5, 2).log_softmax(1), torch.tensor([0, 1, 1, 0, 1]).to(x.device)
        ),
    ],
    ids=["hardswish", "nll_loss"],
)
def test_decomposition_autograd_matches_cpu(loss):
    environment = torch_vdev.BackendEnvironment()
    environment.register_default_decompositions()
    source = torch.randn(10, dtype=torch.float64)
    tensor = source.to("vdev").requires_grad_()
    with environment.install():
        loss(tensor).backward()
    expected = source.clone().requires_grad_()
    loss(expected).backward()
    assert_close(tensor.grad.cpu(), expected.grad)


def test_example_checks_its_kernels_against_cpu(run_in_subprocess):
    example = Path(__file__).resolve().parents[1] / "examples" / "python_kernels.py"
    finished = run_in_subprocess(example.read_text())
    assert finished.returncode == 0, finished.stderr
    assert "matches CPU" in finished.stdout and "kernel calls while training" in finished.stdout
