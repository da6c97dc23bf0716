"""vdev in FakeTensor's convolution rule (``torch._subclasses.fake_impls``).

The fake kernel of a convolution gives its output the memory format of the backend
``torch._C._select_conv_backend`` picks for the inputs' device. For a PrivateUse1
device that is the "overrideable" backend, with contiguous outputs; but vdev's
convolution runs the CPU's kernel on aliases of the same memory, so its backend and
its output layout (channels-last for channels-last inputs, through mkldnn) are those
the CPU picks. Traced graphs (torch.compile, torch.export) must plan the strides the
kernel returns, so for vdev inputs the backend is picked as for CPU tensors with the
same sizes and strides.
"""

import torch

from . import BACKEND_NAME


def _as_cpu(tensor):
    if isinstance(tensor, torch.Tensor) and tensor.device.type == BACKEND_NAME:
        # Under FakeTensorMode (where it matters) this allocates nothing.
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu")
    return tensor


def register() -> None:
    select_conv_backend = torch._C._select_conv_backend

    def select_conv_backend_of_the_kernel_vdev_runs(input, weight, *args, **kwargs):
        if input.device.type == BACKEND_NAME:
            input, weight = _as_cpu(input), _as_cpu(weight)
            args = tuple(_as_cpu(arg) for arg in args)
            kwargs = {name: _as_cpu(value) for name, value in kwargs.items()}
        return select_conv_backend(input, weight, *args, **kwargs)

    torch._C._select_conv_backend = select_conv_backend_of_the_kernel_vdev_runs
