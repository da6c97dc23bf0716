"""Random ops launched on streams: the host checks the arguments and returns once the
kernel is queued (behind `torch.vdev._sleep`, the stream has not run it yet), and the
kernel draws from the generator's CPU state when it runs, so seeded results equal the
CPU's. Host access to a generator's state waits for the draws queued before it."""

import pytest
import torch
import torch.nn.functional as F

import torch_vdev

BUSY_MS = 200


def _probabilities(device):
    return torch.linspace(0, 1, 24, device=device).reshape(4, 6)


# name: (inputs(device) made before the stream is busy, op(inputs, device, generator)).
# generator=None draws from the default generator.
CASES = {
    "rand": (lambda d: (), lambda x, d, g: torch.rand(5, 7, device=d, generator=g)),
    "randn": (lambda d: (), lambda x, d, g: torch.randn(33, device=d, generator=g)),
    "randint": (lambda d: (), lambda x, d, g: torch.randint(-5, 9, (40,), device=d, generator=g)),
    "rand complex": (lambda d: (), lambda x, d, g: torch.rand(6, dtype=torch.complex64, device=d, generator=g)),
    "uniform_": (lambda d: (torch.empty(3, 4, device=d),), lambda x, d, g: x[0].uniform_(-2, 5, generator=g)),
    "uniform_ half": (
        lambda d: (torch.empty(9, dtype=torch.half, device=d),),
        lambda x, d, g: x[0].uniform_(generator=g),
    ),
    "normal_": (lambda d: (torch.empty(10, device=d),), lambda x, d, g: x[0].normal_(1.5, 3.0, generator=g)),
    "normal_ transposed": (
        lambda d: (torch.empty(4, 5, device=d).t(),),
        lambda x, d, g: x[0].normal_(generator=g),
    ),
    "normal(Tensor, float)": (
        lambda d: (torch.arange(12.0, device=d).reshape(3, 4),),
        lambda x, d, g: torch.normal(x[0], 2.0, generator=g),
    ),
    "normal(float, float, size)": (
        lambda d: (),
        lambda x, d, g: torch.normal(0.5, 2.0, size=(3, 3), device=d, generator=g),
    ),
    "bernoulli_(float)": (
        lambda d: (torch.empty(30, device=d),),
        lambda x, d, g: x[0].bernoulli_(0.3, generator=g),
    ),
    "bernoulli_(Tensor)": (
        lambda d: (torch.empty(4, 6, dtype=torch.int64, device=d), _probabilities(d)),
        lambda x, d, g: x[0].bernoulli_(x[1], generator=g),
    ),
    "bernoulli_(broadcast Tensor)": (
        lambda d: (torch.empty(5, 6, device=d), torch.linspace(0, 1, 6, device=d)),
        lambda x, d, g: x[0].bernoulli_(x[1], generator=g),
    ),
    "bernoulli": (lambda d: (_probabilities(d),), lambda x, d, g: torch.bernoulli(x[0], generator=g)),
    "bernoulli(p)": (
        lambda d: (torch.empty(20, device=d),),
        lambda x, d, g: torch.bernoulli(x[0], 0.7, generator=g),
    ),
    "random_": (
        lambda d: (torch.empty(20, dtype=torch.int64, device=d),),
        lambda x, d, g: x[0].random_(generator=g),
    ),
    "random_(to)": (
        lambda d: (torch.empty(20, dtype=torch.int16, device=d),),
        lambda x, d, g: x[0].random_(7, generator=g),
    ),
    "random_(from, to) float": (
        lambda d: (torch.empty(20, device=d),),
        lambda x, d, g: x[0].random_(-3, 100, generator=g),
    ),
    "exponential_": (
        lambda d: (torch.empty(15, dtype=torch.double, device=d),),
        lambda x, d, g: x[0].exponential_(2.5, generator=g),
    ),
    "geometric_": (
        lambda d: (torch.empty(15, device=d),),
        lambda x, d, g: x[0].geometric_(0.25, generator=g),
    ),
    "log_normal_": (
        lambda d: (torch.empty(15, device=d),),
        lambda x, d, g: x[0].log_normal_(0.5, 1.5, generator=g),
    ),
    "cauchy_": (
        lambda d: (torch.empty(15, device=d),),
        lambda x, d, g: x[0].cauchy_(1.0, 2.0, generator=g),
    ),
}

# Dropout draws from the default generator only.
DROPOUT_CASES = {
    "dropout": (lambda d: (torch.randn(8, 16, generator=torch.Generator().manual_seed(0)).to(d),),
                lambda x, d, g: F.dropout(x[0], 0.3)),
    "dropout transposed half": (
        lambda d: (torch.randn(8, 16, generator=torch.Generator().manual_seed(0)).to(d, torch.half).t(),),
        lambda x, d, g: F.dropout(x[0], 0.6),
    ),
    "native_dropout mask": (
        lambda d: (torch.ones(40, device=d),),
        lambda x, d, g: torch.native_dropout(x[0], 0.5, True)[1],
    ),
}


def _queued(op, inputs, device, generator):
    """Runs `op` behind a busy stream: it must be queued, not run, and wait for nothing."""
    stream = torch.vdev.current_stream()
    torch_vdev.reset_synchronizing_op_stats()
    torch.vdev._sleep(BUSY_MS)
    result = op(inputs, device, generator)
    assert not stream.query(), "the host waited for the stream"
    assert torch_vdev.synchronizing_op_stats() == {}
    return result.cpu()


@pytest.mark.parametrize("case", list(CASES) + list(DROPOUT_CASES))
def test_seeded_random_op_is_queued_and_equals_cpu(case):
    make_inputs, op = {**CASES, **DROPOUT_CASES}[case]
    inputs = make_inputs("vdev")
    torch.manual_seed(2024)
    queued = _queued(op, inputs, "vdev", None)
    torch.manual_seed(2024)
    expected = op(make_inputs("cpu"), "cpu", None)
    assert queued.dtype == expected.dtype and queued.stride() == expected.stride()
    assert torch.equal(queued, expected)
    # The written tensor of an in-place op is the result, as on CPU.
    if case.endswith("_") or "_(" in case or case.startswith(("uniform_", "normal_ ")):
        assert torch.equal(inputs[0].cpu(), expected)


@pytest.mark.parametrize("case", list(CASES))
def test_user_generator_draws_equal_a_cpu_generator_and_leave_the_default_alone(case):
    make_inputs, op = CASES[case]
    inputs = make_inputs("vdev")
    default_state = torch.vdev.get_rng_state()
    generator = torch.Generator("vdev").manual_seed(77)
    first = _queued(op, inputs, "vdev", generator)
    second = op(inputs, "vdev", generator).cpu()
    cpu_generator = torch.Generator().manual_seed(77)
    cpu_inputs = make_inputs("cpu")
    assert torch.equal(first, op(cpu_inputs, "cpu", cpu_generator))
    assert torch.equal(second, op(cpu_inputs, "cpu", cpu_generator))
    assert torch.equal(torch.vdev.get_rng_state(), default_state)


def test_state_read_while_draws_are_queued_includes_them():
    torch.manual_seed(5)
    torch.vdev._sleep(BUSY_MS)
    torch.rand(1000, device="vdev")
    state = torch.vdev.get_rng_state()
    torch.manual_seed(5)
    torch.rand(1000)
    assert torch.equal(state, torch.get_rng_state())


def test_state_set_while_draws_are_queued_applies_after_them():
    torch.manual_seed(6)
    saved = torch.vdev.get_rng_state()
    torch.vdev._sleep(BUSY_MS)
    before = torch.randn(50, device="vdev")
    torch.vdev.set_rng_state(saved)
    after = torch.randn(50, device="vdev")
    torch.manual_seed(6)
    expected = torch.randn(50)
    assert torch.equal(before.cpu(), expected)
    assert torch.equal(after.cpu(), expected)


def test_seeding_while_draws_are_queued_applies_after_them():
    torch.manual_seed(1)
    torch.vdev._sleep(BUSY_MS)
    first = torch.rand(20, device="vdev")
    torch.manual_seed(2)
    second = torch.rand(20, device="vdev")
    torch.manual_seed(1)
    assert torch.equal(first.cpu(), torch.rand(20))
    torch.manual_seed(2)
    assert torch.equal(second.cpu(), torch.rand(20))


def test_user_generator_state_clone_and_graphsafe_state_wait_for_queued_draws():
    generator = torch.Generator("vdev").manual_seed(9)
    reference = torch.Generator().manual_seed(9)
    torch.vdev._sleep(BUSY_MS)
    torch.rand(100, device="vdev", generator=generator)
    torch.rand(100, generator=reference)
    assert torch.equal(generator.get_state(), reference.get_state())
    assert generator.initial_seed() == 9

    torch.vdev._sleep(BUSY_MS)
    torch.rand(10, device="vdev", generator=generator)
    torch.rand(10, generator=reference)
    clone = generator.clone_state()
    assert torch.equal(clone.get_state(), reference.get_state())

    # A graph-safe state shares the generator's state: draws through either continue it.
    shared = torch.Generator("vdev")
    shared.graphsafe_set_state(generator.graphsafe_get_state())
    torch.vdev._sleep(BUSY_MS)
    a = torch.rand(10, device="vdev", generator=generator)
    b = torch.rand(10, device="vdev", generator=shared)
    assert torch.equal(a.cpu(), torch.rand(10, generator=reference))
    assert torch.equal(b.cpu(), torch.rand(10, generator=reference))


def test_draws_on_another_device_are_waited_for():
    if torch.vdev.device_count() < 2:
        pytest.skip("needs two vdev devices (VDEV_DEVICE_COUNT)")
    torch.manual_seed(3)
    with torch.vdev.device(1):
        torch.vdev._sleep(BUSY_MS)
    values = torch.rand(30, device="vdev:1")
    state = torch.vdev.get_rng_state(1)
    torch.manual_seed(3)
    expected = torch.rand(30)
    assert torch.equal(values.cpu(), expected)
    assert torch.equal(state, torch.get_rng_state())


ERRORS = {
    "bernoulli_ p > 1": lambda d: torch.empty(3, device=d).bernoulli_(1.5),
    "bernoulli_ p tensor shape": lambda d: torch.empty(3, device=d).bernoulli_(torch.full((4,), 0.5, device=d)),
    "bernoulli_ complex": lambda d: torch.empty(3, dtype=torch.complex64, device=d).bernoulli_(0.5),
    "random_ from >= to": lambda d: torch.empty(3, device=d).random_(5, 2),
    "random_ out of dtype bounds": lambda d: torch.empty(3, dtype=torch.int8, device=d).random_(0, 1000),
    "uniform_ from > to": lambda d: torch.empty(3, device=d).uniform_(3, 1),
    "uniform_ integer": lambda d: torch.empty(3, dtype=torch.int64, device=d).uniform_(),
    "normal_ std < 0": lambda d: torch.empty(3, device=d).normal_(0, -1),
    "normal_ integer": lambda d: torch.empty(3, dtype=torch.int32, device=d).normal_(),
    "normal(Tensor) std < 0": lambda d: torch.normal(torch.zeros(3, device=d), -2.0),
    "exponential_ lambda <= 0": lambda d: torch.empty(3, device=d).exponential_(-1),
    "exponential_ integer": lambda d: torch.empty(3, dtype=torch.int64, device=d).exponential_(),
    "geometric_ p >= 1": lambda d: torch.empty(3, device=d).geometric_(1.5),
    "log_normal_ std <= 0": lambda d: torch.empty(3, device=d).log_normal_(0, 0),
    "cauchy_ sigma <= 0": lambda d: torch.empty(3, device=d).cauchy_(0, -1),
    "cauchy_ integer": lambda d: torch.empty(3, dtype=torch.int64, device=d).cauchy_(),
    "native_dropout p > 1": lambda d: torch.native_dropout(torch.ones(3, device=d), 1.5, True),
    "randint low >= high": lambda d: torch.randint(5, 5, (3,), device=d),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_argument_errors_raise_at_the_call_as_on_cpu(case):
    make = ERRORS[case]
    with pytest.raises(Exception) as expected:
        make("cpu")
    # A first launch of each dtype signature waits for the stream (the dtype check):
    # a first call warms the case's other ops, so only the refused one is timed.
    with pytest.raises(type(expected.value)):
        make("vdev")
    stream = torch.vdev.current_stream()
    stream.synchronize()
    torch.vdev._sleep(BUSY_MS)
    with pytest.raises(type(expected.value)) as raised:
        make("vdev")
    # Raised on the host, without waiting for the stream.
    assert not stream.query()
    assert str(raised.value).split("\n")[0] == str(expected.value).split("\n")[0]
    stream.synchronize()
    assert torch.rand(2, device="vdev").shape == (2,)


def test_under_launch_blocking_random_ops_run_at_the_launch_and_equal_cpu(run_in_subprocess):
    script = """
import torch, torch_vdev
torch.manual_seed(11)
stream = torch.vdev.current_stream()
torch.vdev._sleep(100)
values = torch.randn(64, device='vdev')
assert stream.query()
mask = torch.native_dropout(torch.ones(64, device='vdev'), 0.4, True)[1]
state = torch.vdev.get_rng_state()
torch.manual_seed(11)
assert torch.equal(values.cpu(), torch.randn(64))
assert torch.equal(mask.cpu(), torch.native_dropout(torch.ones(64), 0.4, True)[1])
assert torch.equal(state, torch.get_rng_state())
try:
    torch.empty(3, device='vdev').bernoulli_(2.0)
except RuntimeError as error:
    print('raised:', error)
print('ok')
"""
    result = run_in_subprocess(script, env={"VDEV_LAUNCH_BLOCKING": "1"})
    assert result.returncode == 0, result.stderr
    assert "raised: bernoulli_ expects p to be in [0, 1]" in result.stdout
    assert "ok" in result.stdout
