"""Random numbers on vdev: default generators per device, seeding, states, fork_rng,
torch.Generator('vdev'); a seeded vdev run draws exactly what a seeded CPU run draws."""

import pytest
import torch
from torch.testing import assert_close

RANDOM_OPS = {
    "randn": lambda device, g: torch.randn(40, device=device, generator=g),
    "rand": lambda device, g: torch.rand(3, 5, device=device, generator=g),
    "randint": lambda device, g: torch.randint(-5, 50, (17,), device=device, generator=g),
    "randperm": lambda device, g: torch.randperm(23, device=device, generator=g),
    "normal_": lambda device, g: torch.empty(9, device=device).normal_(2.0, 0.5, generator=g),
    "uniform_": lambda device, g: torch.empty(9, device=device).uniform_(-1, 3, generator=g),
    "exponential_": lambda device, g: torch.empty(9, device=device).exponential_(generator=g),
    "bernoulli": lambda device, g: torch.bernoulli(torch.full((30,), 0.3, device=device), generator=g),
    "multinomial": lambda device, g: torch.multinomial(
        torch.tensor([0.1, 0.5, 0.4], device=device), 12, replacement=True, generator=g
    ),
    "normal": lambda device, g: torch.normal(torch.zeros(6, device=device), torch.ones(6, device=device), generator=g),
}


def _draw(name, device, generator=None):
    return RANDOM_OPS[name](device, generator).cpu()


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_seeded_default_generator_matches_cpu(name):
    torch.manual_seed(1234)
    expected = _draw(name, "cpu")
    torch.manual_seed(1234)
    assert_close(_draw(name, "vdev"), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_vdev_generator_argument_matches_cpu_generator(name):
    expected = _draw(name, "cpu", torch.Generator().manual_seed(99))
    generator = torch.Generator("vdev").manual_seed(99)
    assert generator.device == torch.device("vdev", 0)
    assert_close(_draw(name, "vdev", generator), expected, rtol=0, atol=0)


def test_dropout_in_a_seeded_model_matches_cpu():
    inputs = torch.randn(8, 16)
    torch.manual_seed(5)
    expected = torch.nn.functional.dropout(inputs, 0.4)
    torch.manual_seed(5)
    assert_close(torch.nn.functional.dropout(inputs.to("vdev"), 0.4).cpu(), expected, rtol=0, atol=0)


def _same_bits(actual, expected):
    """Equal values, dtypes and strides, zeros with the same sign (dropout scales zeros too)."""
    actual = actual.cpu()
    assert actual.dtype == expected.dtype and actual.stride() == expected.stride()
    assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    if expected.is_floating_point():
        assert torch.equal(torch.signbit(actual), torch.signbit(expected))


DROPOUT_INPUTS = {
    "float32": lambda: torch.randn(64, 33),
    "float64": lambda: torch.randn(5, 7, dtype=torch.float64),
    "bfloat16": lambda: torch.randn(6, 9).bfloat16(),
    "transposed": lambda: torch.randn(12, 10).t(),
    "empty": lambda: torch.randn(0, 4),
    "with nan and inf": lambda: torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 3.0]),
}


@pytest.mark.parametrize("train", [True, None, False])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("case", sorted(DROPOUT_INPUTS))
def test_native_dropout_and_backward_match_cpu(case, p, train):
    inputs = DROPOUT_INPUTS[case]()
    grad = torch.randn(inputs.shape).to(inputs.dtype)
    torch.manual_seed(11)
    expected_output, expected_mask = torch.native_dropout(inputs, p, train)
    torch.manual_seed(11)
    output, mask = torch.native_dropout(inputs.to("vdev"), p, train)
    _same_bits(output, expected_output)
    _same_bits(mask, expected_mask)
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    if expected_mask.dtype == torch.bool:
        _same_bits(
            torch.ops.aten.native_dropout_backward(grad.to("vdev"), mask, scale),
            torch.ops.aten.native_dropout_backward(grad, expected_mask, scale),
        )


def test_native_dropout_backward_rejects_a_cpu_mask():
    grad = torch.randn(4, 4, device="vdev")
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.aten.native_dropout_backward(grad, torch.ones(4, 4, dtype=torch.bool), 2.0)


def test_torch_manual_seed_seeds_every_device():
    torch.manual_seed(77)
    expected = torch.randn(10)
    torch.manual_seed(77)
    for index in range(torch.vdev.device_count()):
        assert torch.vdev.default_generators[index].initial_seed() == 77
        assert_close(torch.randn(10, device=f"vdev:{index}").cpu(), expected, rtol=0, atol=0)


def test_vdev_manual_seed_seeds_only_the_current_device():
    torch.vdev.manual_seed_all(1)
    with torch.vdev.device(1):
        torch.vdev.manual_seed(2)
    assert torch.vdev.initial_seed() == 1
    with torch.vdev.device(1):
        assert torch.vdev.initial_seed() == 2
    torch.vdev.manual_seed_all(3)
    assert [g.initial_seed() for g in torch.vdev.default_generators] == [3, 3]


def test_seed_and_seed_all_pick_random_seeds():
    torch.vdev.seed()
    first = torch.vdev.initial_seed()
    torch.vdev.seed()
    assert torch.vdev.initial_seed() != first
    torch.vdev.seed_all()
    seeds = {g.initial_seed() for g in torch.vdev.default_generators}
    assert len(seeds) == 1 and first not in seeds


def test_same_seed_same_numbers_different_seed_different_numbers():
    torch.vdev.manual_seed(10)
    first = torch.rand(100, device="vdev").cpu()
    torch.vdev.manual_seed(10)
    assert_close(torch.rand(100, device="vdev").cpu(), first, rtol=0, atol=0)
    torch.vdev.manual_seed(11)
    assert not torch.equal(torch.rand(100, device="vdev").cpu(), first)


def test_rng_state_round_trip_per_device():
    torch.vdev.manual_seed_all(21)
    state = torch.vdev.get_rng_state("vdev:1")
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    first = torch.randn(20, device="vdev:1").cpu()
    other_device = torch.randn(20, device="vdev:0").cpu()
    torch.vdev.set_rng_state(state, 1)
    assert_close(torch.randn(20, device="vdev:1").cpu(), first, rtol=0, atol=0)
    # A vdev state is a CPU generator's state: it continues the CPU stream exactly.
    cpu = torch.Generator()
    cpu.set_state(state)
    assert_close(torch.randn(20, generator=cpu), first, rtol=0, atol=0)
    assert not torch.equal(other_device, torch.randn(20, device="vdev:0").cpu())


def test_rng_state_all_round_trip():
    torch.vdev.manual_seed_all(8)
    states = torch.vdev.get_rng_state_all()
    assert len(states) == torch.vdev.device_count()
    first = [torch.rand(5, device=f"vdev:{i}").cpu() for i in range(2)]
    torch.vdev.set_rng_state_all(states)
    for index in range(2):
        assert_close(torch.rand(5, device=f"vdev:{index}").cpu(), first[index], rtol=0, atol=0)


def test_set_rng_state_copies_the_state():
    state = torch.vdev.get_rng_state()
    torch.vdev.set_rng_state(state)
    state.zero_()  # changing the caller's tensor afterwards must not change the generator
    assert not torch.equal(torch.vdev.get_rng_state(), state)


# torch warns that fork_rng saves every device's state whenever there are several.
@pytest.mark.filterwarnings("ignore:VDEV reports that you have")
def test_fork_rng_restores_vdev_generators():
    torch.manual_seed(3)
    reference = [torch.randn(6, device=f"vdev:{i}").cpu() for i in range(2)]
    torch.manual_seed(3)
    with torch.random.fork_rng(device_type="vdev"):
        torch.randn(100, device="vdev:0")
        torch.randn(100, device="vdev:1")
    for index in range(2):
        assert_close(torch.randn(6, device=f"vdev:{index}").cpu(), reference[index], rtol=0, atol=0)


def test_fork_rng_restores_only_the_listed_devices():
    torch.manual_seed(4)
    reference = torch.randn(6, device="vdev:0").cpu()
    torch.manual_seed(4)
    with torch.random.fork_rng(devices=[1], device_type="vdev"):
        torch.randn(100, device="vdev:0")
    assert not torch.equal(torch.randn(6, device="vdev:0").cpu(), reference)


def test_generator_state_and_clone():
    generator = torch.Generator("vdev:1").manual_seed(6)
    assert generator.device == torch.device("vdev", 1)
    state = generator.get_state()
    first = torch.randn(8, device="vdev:1", generator=generator).cpu()
    generator.set_state(state)
    assert_close(torch.randn(8, device="vdev:1", generator=generator).cpu(), first, rtol=0, atol=0)
    copy = generator.clone_state()
    assert_close(
        torch.randn(8, device="vdev:1", generator=copy).cpu(),
        torch.randn(8, device="vdev:1", generator=generator).cpu(),
        rtol=0,
        atol=0,
    )


def test_generator_of_another_device_type_is_rejected():
    with pytest.raises(RuntimeError, match="Expected a 'vdev' device type for generator but found 'cpu'"):
        torch.randn(3, device="vdev", generator=torch.Generator())
    assert torch.randn(3, device="vdev").device.type == "vdev"
