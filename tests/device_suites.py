"""Shared pieces of the device-generic suites (test_opinfo.py, test_module_info.py,
test_optim_info.py): moving samples to the CPU reference, and turning the expected
failures (expected_failures.py) into PyTorch's DecorateInfo entries."""

import copy
import unittest

import torch
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils._pytree import tree_map

from expected_failures import EXPECTED_FAILURES

DEVICE_TYPE = torch._C._get_privateuse1_backend_name()


def to_device(tree, device):
    """The same values on `device`: each tensor becomes a detached copy there, a new
    leaf that requires grad exactly when the original does."""

    def move(value):
        if not isinstance(value, torch.Tensor):
            return value
        return value.detach().to(device, copy=True).requires_grad_(value.requires_grad)

    return tree_map(move, tree)


def to_cpu(tree):
    return to_device(tree, "cpu")


def tensors_in(tree):
    """Every tensor in a (nested) structure, in order."""
    found = []
    tree_map(lambda value: found.append(value) if isinstance(value, torch.Tensor) else None, tree)
    return found


def expected_failure_decorators(suite):
    """{entry name: [DecorateInfo]} marking suite's expected failures `expectedFailure`,
    so an entry that starts passing fails the run (an unexpected success)."""
    overrides = {}
    for (test_suite, test_name, entry, dtype), reason in EXPECTED_FAILURES.items():
        if test_suite != suite:
            continue
        assert reason.strip(), f"expected failure {(test_suite, test_name, entry, dtype)} needs a reason"
        overrides.setdefault(entry, []).append(
            DecorateInfo(
                unittest.expectedFailure,
                suite,
                test_name,
                device_type=DEVICE_TYPE,
                dtypes=None if dtype is None else (getattr(torch, dtype),),
            )
        )
    return overrides


def with_expected_failures(infos, suite):
    """Copies of ModuleInfo or OptimizerInfo entries with suite's expected failures
    added to their decorators, keyed by entry name."""
    overrides = expected_failure_decorators(suite)
    marked = []
    for info in infos:
        info = copy.copy(info)
        info.decorators = (*info.decorators, *overrides.get(info.name, ()))
        marked.append(info)
    return marked
