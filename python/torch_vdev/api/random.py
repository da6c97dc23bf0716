"""Random number generation on vdev (``torch.cuda`` names). Each device has a default
generator; its state is a CPU generator's, so seeded vdev draws equal seeded CPU draws."""

from typing import Any, Iterable, Optional

import torch

from .. import _C
from ._device import _get_device_index

default_generators: tuple = _C.default_generators()


def _generator(device: Optional[Any] = None) -> torch.Generator:
    return default_generators[_get_device_index(device, optional=True)]


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a random number."""
    _generator().seed()


def seed_all() -> None:
    random_seed = _generator().seed()
    for generator in default_generators:
        generator.manual_seed(random_seed)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Optional[Any] = None) -> torch.Tensor:
    return _generator(device).get_state()


def get_rng_state_all() -> list:
    return [generator.get_state() for generator in default_generators]


def set_rng_state(new_state: torch.Tensor, device: Optional[Any] = None) -> None:
    _generator(device).set_state(new_state.clone())


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
