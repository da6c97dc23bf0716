"""Every ModuleInfo in PyTorch's module_db on vdev, against the CPU.

Each module is built on the CPU under a fixed seed and copied to vdev; both run the
same forward inputs (in train and eval mode where they differ) and the same backward
(random output gradients), and the outputs, input gradients and parameter gradients
must agree. float32 and float64. Expected failures are data (expected_failures.py).
"""

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

from device_suites import DEVICE_TYPE, tensors_in, to_cpu, to_device, with_expected_failures

SEED = 1234


class TestModuleInfo(TestCase):
    def forward_and_backward(self, module, args, kwargs):
        """(outputs, gradients of the inputs and parameters) for random output gradients."""
        torch.manual_seed(SEED)
        outputs = module(*args, **kwargs)
        differentiable_outputs = [t for t in tensors_in(outputs) if t.requires_grad]
        inputs = [t for t in tensors_in((args, kwargs)) if t.requires_grad] + list(module.parameters())
        inputs = [t for t in inputs if t.requires_grad]
        if not differentiable_outputs or not inputs:
            return outputs, []
        generator = torch.Generator().manual_seed(SEED)
        grad_outputs = [
            torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in differentiable_outputs
        ]
        return outputs, torch.autograd.grad(differentiable_outputs, inputs, grad_outputs, allow_unused=True)

    @modules(with_expected_failures(module_db, "TestModuleInfo"), allowed_dtypes=(torch.float32, torch.float64))
    def test_forward_backward(self, device, dtype, module_info, training):
        for module_input in module_info.module_inputs_func(
            module_info, device="cpu", dtype=dtype, requires_grad=True, training=training
        ):
            if module_input.forward_input is None:
                continue
            try:
                constructor = module_input.constructor_input
                torch.manual_seed(SEED)
                cpu_module = module_info.module_cls(*constructor.args, **constructor.kwargs).to(dtype)
                cpu_module.train(training)
                device_module = copy.deepcopy(cpu_module).to(device)

                forward = module_input.forward_input
                cpu_args, cpu_kwargs = to_cpu((forward.args, forward.kwargs))
                device_args, device_kwargs = to_device((forward.args, forward.kwargs), device)
                expected = self.forward_and_backward(cpu_module, cpu_args, cpu_kwargs)
                actual = self.forward_and_backward(device_module, device_args, device_kwargs)
                for tensor in tensors_in(actual):
                    self.assertEqual(tensor.device.type, DEVICE_TYPE)
                self.assertEqual(actual, expected, exact_device=False)
                self.assertEqual(device_module.state_dict(), cpu_module.state_dict(), exact_device=False)
            except Exception as error:
                error.add_note(f"module input: {module_input.desc}")
                raise


instantiate_device_type_tests(TestModuleInfo, globals(), only_for=DEVICE_TYPE)

if __name__ == "__main__":
    run_tests()
