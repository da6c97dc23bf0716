"""Every OptimizerInfo in PyTorch's optim_db on vdev, against the CPU.

For each optimizer and each of its configurations (optim_inputs_func), vdev runs a few
steps with the for-loop implementation, with foreach kernels and, where the optimizer
has them, fused kernels; the CPU runs the for-loop implementation on the same
parameters and gradients. Parameters and optimizer state must agree after every step.
Expected failures are data (expected_failures.py).
"""

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import optim_db, optims
from torch.testing._internal.common_utils import TestCase, run_tests

from device_suites import DEVICE_TYPE, to_device, with_expected_failures

STEPS = 3


def implementations(optim_info):
    """The implementation flags vdev runs: for-loop, foreach, and fused where the
    optimizer has CPU fused kernels (vdev runs them on its memory). The first is the
    CPU reference's."""
    if "foreach" not in optim_info.supported_impls:
        return [{}]  # a single implementation
    flags = [{"foreach": False}, {"foreach": True}]
    if "fused" in optim_info.supported_impls and "cpu" in optim_info.supports_fused_on:
        flags.append({"fused": True})
    return flags


def make_params(dtype):
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (1, 3), (2, 2)]  # 2-D: Muon takes nothing else
    return [torch.nn.Parameter(torch.randn(shape, dtype=dtype, generator=generator)) for shape in shapes]


def gradient_like(param, step, sparse):
    generator = torch.Generator().manual_seed(100 + step)
    grad = torch.randn(param.shape, dtype=param.dtype, generator=generator)
    return grad.to_sparse() if sparse else grad


class TestOptimInfo(TestCase):
    def run_steps(self, optim_info, params, kwargs, sparse):
        optimizer = optim_info.optim_cls(params, **kwargs)
        history = []
        for step in range(STEPS):

            def closure():
                optimizer.zero_grad()
                for param in params:
                    param.grad = gradient_like(param, step, sparse).to(param.device)
                return sum((param.detach() ** 2).sum() for param in params).to(params[0].device)

            if optim_info.step_requires_closure:
                optimizer.step(closure)
            else:
                closure()
                optimizer.step()
            history.append(([param.detach().clone() for param in params], copy.deepcopy(optimizer.state_dict()["state"])))
        return history

    @optims(with_expected_failures(optim_db, "TestOptimInfo"), dtypes=[torch.float32])
    def test_steps_match_cpu(self, device, dtype, optim_info):
        sparse = optim_info.only_supports_sparse_grads
        reference_flags, *_ = flags_to_test = implementations(optim_info)
        for optim_input in optim_info.optim_inputs_func(device="cpu"):
            expected = self.run_steps(optim_info, make_params(dtype), {**optim_input.kwargs, **reference_flags}, sparse)
            for flags in flags_to_test:
                params = [torch.nn.Parameter(p) for p in to_device(make_params(dtype), device)]
                try:
                    actual = self.run_steps(optim_info, params, {**optim_input.kwargs, **flags}, sparse)
                    for step, ((actual_params, actual_state), (expected_params, expected_state)) in enumerate(
                        zip(actual, expected)
                    ):
                        self.assertTrue(all(p.device.type == DEVICE_TYPE for p in actual_params))
                        self.assertEqual(actual_params, expected_params, exact_device=False, msg=f"parameters, step {step + 1}")
                        self.assertEqual(actual_state, expected_state, exact_device=False, msg=f"state, step {step + 1}")
                except Exception as error:
                    error.add_note(f"config: {optim_input.desc}, {flags}")
                    raise

instantiate_device_type_tests(TestOptimInfo, globals(), only_for=DEVICE_TYPE)

if __name__ == "__main__":
    run_tests()
