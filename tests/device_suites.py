"""Shared pieces of the device-generic suites (test_opinfo.py, test_module_info.py,
test_optim_info.py): moving samples to the CPU reference, and turning the expected
failures (expected_failures.py) into PyTorch's DecorateInfo entries."""

import copy
import re
import unittest

import torch
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils._pytree import tree_flatten, tree_map

from expected_failures import EXPECTED_FAILURES

DEVICE_TYPE = torch._C._get_privateuse1_backend_name()


def device_type_named(value):
    """The device type an argument names (a torch.device or a device string), or None."""
    if isinstance(value, torch.device):
        return value.type
    if isinstance(value, str) and re.fullmatch(rf"(cpu|meta|{DEVICE_TYPE})(:\d+)?", value):
        return torch.device(value).type
    return None


def names_backend_device(value):
    return device_type_named(value) == DEVICE_TYPE


def result_device_type(tree):
    """Where an op's results belong for these arguments: the device an argument names
    (device=), else vdev if a vdev tensor is among them, else the CPU."""
    named = [device_type_named(value) for value in tree_flatten(tree)[0]]
    named = [device for device in named if device is not None]
    if named:
        return named[0]
    return DEVICE_TYPE if any(t.device.type == DEVICE_TYPE for t in tensors_in(tree)) else "cpu"


def same_layout_on(tensor, device):
    """A copy of `tensor` on `device` with the same storage layout (sizes, strides,
    offset, and what lies between its elements): ops such as as_strided, random fills
    and kernel choices depend on it."""
    if tensor.is_conj() or tensor.is_neg() or tensor.layout != torch.strided or tensor.element_size() == 0:
        return tensor.to(device, copy=True)
    storage_elements = tensor.untyped_storage().nbytes() // tensor.element_size()
    whole_storage = torch.as_strided(tensor, (storage_elements,), (1,), 0)
    return torch.as_strided(whole_storage.to(device, copy=True), tensor.shape, tensor.stride(), tensor.storage_offset())


def to_device(tree, device):
    """The same values on `device`: each tensor becomes a detached copy there, a new
    leaf that requires grad exactly when the original does, and arguments naming a
    vdev device (factories' device=) name `device`."""

    def move(value):
        if names_backend_device(value):
            return device
        if not isinstance(value, torch.Tensor):
            return value
        return same_layout_on(value.detach(), device).requires_grad_(value.requires_grad)

    return tree_map(move, tree)


def to_cpu(tree):
    return to_device(tree, "cpu")


def tensors_in(tree):
    """Every tensor in a (nested) structure, in order."""
    found = []
    tree_map(lambda value: found.append(value) if isinstance(value, torch.Tensor) else None, tree)
    return found


def entry_name(info):
    """An OpInfo's full name (name and variant), a ModuleInfo's or OptimizerInfo's name."""
    return getattr(info, "full_name", info.name)


def with_expected_failures(infos, suite):
    """Copies of suite's OpInfo, ModuleInfo or OptimizerInfo entries with its expected
    failures added to their decorators as `expectedFailure`, so an entry that starts
    passing fails the run (an unexpected success).

    They name no device type: these suites are instantiated for vdev alone, and
    PyTorch's test generator asks for the decorators of the first test it makes
    before setting up the device class, under the name "privateuse1"."""
    decorators = {}
    for (test_suite, test_name, entry, dtype), reason in EXPECTED_FAILURES.items():
        if test_suite != suite:
            continue
        assert reason.strip(), f"expected failure {(test_suite, test_name, entry, dtype)} needs a reason"
        decorators.setdefault(entry, []).append(
            DecorateInfo(
                unittest.expectedFailure,
                suite,
                test_name,
                dtypes=None if dtype is None else (getattr(torch, dtype),),
            )
        )
    marked = []
    for info in infos:
        info = copy.copy(info)
        info.decorators = (*info.decorators, *decorators.get(entry_name(info), ()))
        marked.append(info)
    return marked
