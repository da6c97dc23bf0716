"""Errors CUDA raises at the call - its host code checks a call's dtypes and arguments
before it launches a kernel - raise at the call on vdev too, although vdev's kernels run
on a stream's worker: unsupported dtypes of factories, random ops, dropout and the
foreach and fused optimizer kernels, and the errors a CPU kernel raises before it reads
or writes any data (README, Runtime semantics). Errors that depend on the data stay the
stream's, raised at the next synchronization as CUDA reports them. Each case launches
its op with dtypes no other test of this process launches it with: the check runs at a
signature's first launch, and later launches must raise again."""

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_vdev  # noqa: F401

BUSY_MS = 300


# (name, whether the call waits for the stream before it raises (the first launch of a
# kernel whose CPU kernel takes data pointers before its dtype dispatch), the call)
CASES = [
    ("linspace bool", True, lambda d: torch.linspace(0, 1, 5, dtype=torch.bool, device=d)),
    ("logspace bool", False, lambda d: torch.logspace(0, 1, 5, dtype=torch.bool, device=d)),
    ("arange complex", False, lambda d: torch.arange(0, 5, dtype=torch.complex64, device=d)),
    ("randn int32", False, lambda d: torch.randn(3, dtype=torch.int32, device=d)),
    ("rand bool", False, lambda d: torch.rand(3, dtype=torch.bool, device=d)),
    ("randint complex", False, lambda d: torch.randint(0, 3, (3,), dtype=torch.complex64, device=d)),
    ("random_ complex", False, lambda d: torch.empty(3, dtype=torch.complex64, device=d).random_()),
    ("uniform_ int16", False, lambda d: torch.empty(3, dtype=torch.int16, device=d).uniform_()),
    ("normal_ int64", False, lambda d: torch.empty(3, dtype=torch.int64, device=d).normal_()),
    ("bernoulli_ complex", False, lambda d: torch.empty(3, dtype=torch.complex128, device=d).bernoulli_(0.5)),
    ("exponential_ int8", False, lambda d: torch.empty(3, dtype=torch.int8, device=d).exponential_()),
    ("geometric_ bool", False, lambda d: torch.empty(3, dtype=torch.bool, device=d).geometric_(0.5)),
    ("log_normal_ uint8", False, lambda d: torch.empty(3, dtype=torch.uint8, device=d).log_normal_()),
    ("normal(Tensor, float) int16", False, lambda d: torch.normal(torch.zeros(3, dtype=torch.int16, device=d), 1.0)),
    # Raised by the CPU kernel before it reads data: a composite's host-side check...
    ("renorm bool", False, lambda d: torch.ones(3, 3, dtype=torch.bool, device=d).renorm(2, 0, 1.0)),
    # ... and the type promotion of the per-tensor op an in-place foreach op runs.
    ("_foreach_sqrt_ int16", False, lambda d: torch._foreach_sqrt_([torch.ones(3, dtype=torch.int16, device=d)])),
]


def _fused_adam(dtype):
    def call(device):
        lists = [[torch.ones(3, dtype=dtype, device=device)] for _ in range(4)]
        steps = [torch.zeros((), device=device)]
        torch._fused_adam_(*lists, [], steps, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                           amsgrad=False, maximize=False)
    return call


def _fused_sgd(dtype):
    def call(device):
        params, grads = [torch.ones(3, dtype=dtype, device=device)], [torch.ones(3, dtype=dtype, device=device)]
        torch._fused_sgd_(params, grads, [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=True)
    return call


CASES += [("_fused_adam_ int32", False, _fused_adam(torch.int32)), ("_fused_sgd_ int16", False, _fused_sgd(torch.int16))]


def _cpu_error(call):
    with pytest.raises(Exception) as error:
        call("cpu")
    return error


@pytest.mark.parametrize("waits, call", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_raises_at_the_call_as_on_cpu_and_the_stream_stays_usable(waits, call):
    expected = _cpu_error(call)
    with pytest.raises(expected.type):
        call("vdev")  # its first launch of the ops building its tensors may wait
    for _ in range(2):  # every call raises, not only a signature's first
        torch.vdev._sleep(BUSY_MS)
        with pytest.raises(expected.type) as error:
            call("vdev")
        # Raised before any launch, without waiting for the stream: the sleep still runs.
        assert torch.vdev.current_stream().query() == waits
        assert str(expected.value) in str(error.value)
    torch.vdev.synchronize()  # the stream never saw the error
    assert torch.ones(2, device="vdev").add(1).sum().item() == 4


def test_dropout_takes_the_dtypes_cudas_kernel_takes():
    dropout = next(op for op in op_db if op.name == "nn.functional.dropout" and op.variant_test_name == "")
    cuda_dtypes = dropout.supported_dtypes("cuda")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.int32, torch.bool):
        values = torch.ones(64, dtype=dtype, device="vdev")
        if dtype in cuda_dtypes:
            dropped = torch.nn.functional.dropout(values, 0.5).cpu()
            assert set(dropped.unique().tolist()) <= {0.0, 2.0}
        else:
            torch.vdev._sleep(BUSY_MS)
            with pytest.raises(NotImplementedError, match="native_dropout"):
                torch.nn.functional.dropout(values, 0.5)
            assert not torch.vdev.current_stream().query()
    torch.vdev.synchronize()


def test_an_error_depending_on_the_data_stays_the_streams_at_a_first_launch():
    # CPU raises integer division by zero at the call; the check reads the divisor, so on
    # vdev, as an index out of range, it is the stream's, raised at the next synchronization.
    numerators, divisors = torch.tensor([4, 9], dtype=torch.int16), torch.tensor([2, 0], dtype=torch.int16)
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as cpu_error:
        torch.div(numerators, divisors, rounding_mode="trunc")
    quotients = torch.div(numerators.to("vdev"), divisors.to("vdev"), rounding_mode="trunc")  # queued
    with pytest.raises(RuntimeError) as error:
        torch.vdev.synchronize()
    assert "aten::div" in str(error.value) and str(cpu_error.value) in str(error.value)
    assert quotients.shape == (2,)
    torch.vdev.synchronize()  # reported once
    ones = torch.ones(2, dtype=torch.int16, device="vdev")
    halves = torch.div(ones * 7, ones * 2, rounding_mode="trunc")
    assert torch.equal(halves.cpu(), torch.full((2,), 3, dtype=torch.int16))


def test_a_graph_capture_of_a_fresh_signature_does_not_wait():
    # A wait for the stream inside a capture raises (and invalidates the capture).
    values = torch.arange(1.0, 9.0, dtype=torch.float64, device="vdev").view(2, 4)
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        result = torch.renorm(values, 2, 0, 1.0)
    graph.replay()
    torch.vdev.synchronize()
    expected = torch.arange(1.0, 9.0, dtype=torch.float64).view(2, 4).renorm(2, 0, 1.0)
    assert torch.allclose(result.cpu(), expected)


# Calls that run without error (a kernel skipping its dtype dispatch) before a call of
# the same dtypes that raises: each (first call, call that raises on CPU).
SHORTCUT_CASES = [
    # linspace/logspace of one step fill without their dispatch; the signature has the
    # output's size class, so the 5-step call is checked again.
    ("linspace one step, then five", lambda d: torch.linspace(0.0, 1.0, 1, dtype=torch.bool, device=d),
     lambda d: torch.linspace(0.0, 1.0, 5, dtype=torch.bool, device=d)),
    ("logspace one step, then five", lambda d: torch.logspace(0.0, 1.0, 1, base=3.0, dtype=torch.bool, device=d),
     lambda d: torch.logspace(0.0, 1.0, 5, base=3.0, dtype=torch.bool, device=d)),
    # An empty matrix product returns before its dispatch; the signature has its
    # operands' size classes.
    ("mm of an empty bool matrix, then 2 x 2", lambda d: torch.ones(0, 2, dtype=torch.bool, device=d).mm(
        torch.ones(2, 2, dtype=torch.bool, device=d)),
     lambda d: torch.ones(2, 2, dtype=torch.bool, device=d).mm(torch.ones(2, 2, dtype=torch.bool, device=d))),
    # index_reduce with include_self=True takes bool; with False its own dispatch, which
    # does not: the signature has bool arguments' values.
    ("index_reduce include_self, then not",
     lambda d: torch.zeros(4, 3, dtype=torch.bool, device=d).index_reduce(
         0, torch.tensor([0, 2], device=d), torch.ones(2, 3, dtype=torch.bool, device=d), "amax"),
     lambda d: torch.zeros(4, 3, dtype=torch.bool, device=d).index_reduce(
         0, torch.tensor([0, 2], device=d), torch.ones(2, 3, dtype=torch.bool, device=d), "amax",
         include_self=False)),
]


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("runs, raises", [case[1:] for case in SHORTCUT_CASES], ids=[case[0] for case in SHORTCUT_CASES])
def test_a_run_skipping_the_dtype_dispatch_does_not_prove_the_dtypes_for_other_calls(runs, raises):
    runs("cpu")
    expected = _cpu_error(raises)
    runs("vdev")
    torch.vdev.synchronize()
    with pytest.raises(expected.type) as error:
        raises("vdev")
    assert str(expected.value) in str(error.value)
    torch.vdev.synchronize()  # the stream never saw the error


def test_a_one_element_launch_waits_once_per_signature():
    # Its first launch (a new signature) waits for the kernel; the next ones queue at once.
    values = torch.ones(1, dtype=torch.int8, device="vdev")
    torch.vdev.synchronize()
    for waits in (True, False, False):
        torch.vdev._sleep(BUSY_MS)
        result = torch.bitwise_left_shift(values, values)
        assert torch.vdev.current_stream().query() == waits
    assert result.cpu().tolist() == torch.bitwise_left_shift(values.cpu(), values.cpu()).tolist()


def test_an_op_whose_meta_kernel_refuses_still_runs_what_the_cpu_runs():
    # Convolution's meta kernel refuses integers, which the CPU's kernel takes: the
    # CPU kernel, run on the calling thread, decides (and is checked at the call only
    # where it has no outputs to size, as arange's out=).
    inputs, weight = torch.arange(12, dtype=torch.int64).view(1, 2, 6), torch.ones(3, 2, 2, dtype=torch.int64)
    expected = torch.nn.functional.conv1d(inputs, weight)
    result = torch.nn.functional.conv1d(inputs.to("vdev"), weight.to("vdev"))
    assert torch.equal(result.cpu(), expected)
