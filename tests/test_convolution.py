"""Convolutions on vdev run ATen's CPU convolution on aliases: equal to CPU."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl

CASES = {
    "conv1d": (F.conv1d, (2, 4, 9), (6, 4, 3), {"stride": 2, "padding": 1}),
    "conv2d": (F.conv2d, (2, 4, 7, 6), (6, 2, 3, 3), {"groups": 2, "dilation": 2}),
    "conv2d-same": (F.conv2d, (1, 3, 6, 6), (4, 3, 3, 3), {"padding": "same"}),
    "conv3d": (F.conv3d, (1, 2, 5, 5, 5), (3, 2, 2, 2, 2), {"stride": (1, 2, 1)}),
    "conv_transpose1d": (F.conv_transpose1d, (2, 4, 5), (4, 3, 3), {"stride": 2, "output_padding": 1}),
    "conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 5), (4, 2, 3, 3), {"groups": 2, "padding": 1}),
    "conv_transpose3d": (F.conv_transpose3d, (1, 2, 3, 3, 3), (2, 3, 2, 2, 2), {}),
}


def inputs(case, device, dtype=torch.float32):
    fn, input_shape, weight_shape, options = CASES[case]
    generator = torch.Generator().manual_seed(0)
    out_channels = weight_shape[1] * options.get("groups", 1) if "transpose" in case else weight_shape[0]
    tensors = [torch.randn(shape, generator=generator, dtype=dtype) for shape in (input_shape, weight_shape, (out_channels,))]
    return fn, [t.to(device).requires_grad_() for t in tensors], options


@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_equal_cpu(case):
    fn, (x, weight, bias), options = inputs(case, "vdev")
    _, (x_cpu, weight_cpu, bias_cpu), _ = inputs(case, "cpu")
    result = fn(x, weight, bias, **options)
    expected = fn(x_cpu, weight_cpu, bias_cpu, **options)
    assert result.device.type == "vdev" and is_vdev_impl(result)
    assert_close(result.cpu(), expected)
    grad = torch.randn(expected.shape)
    result.backward(grad.vdev())
    expected.backward(grad)
    for tensor, tensor_cpu in ((x, x_cpu), (weight, weight_cpu), (bias, bias_cpu)):
        assert_close(tensor.grad.cpu(), tensor_cpu.grad)


@pytest.mark.parametrize("case", ["conv1d", "conv2d", "conv_transpose2d"])
def test_gradcheck_and_gradgradcheck(case):
    fn, tensors, options = inputs(case, "vdev", torch.float64)
    assert torch.autograd.gradcheck(lambda *args: fn(*args, **options), tensors)
    assert torch.autograd.gradgradcheck(lambda *args: fn(*args, **options), tensors)


def test_without_bias_and_module_on_second_device():
    torch.manual_seed(0)
    module = torch.nn.Conv2d(3, 5, 3, bias=False)
    x = torch.randn(2, 3, 8, 8)
    expected = module(x)
    module.to("vdev:1")
    result = module(x.to("vdev:1"))
    assert result.device == torch.device("vdev:1")
    assert_close(result.cpu(), expected)


def test_convolution_entry_points_have_vdev_kernels():
    # ATen's generic convolution sends backends it does not know to these two.
    for name in ("aten::convolution_overrideable", "aten::convolution_backward_overrideable"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name


def test_mixed_devices_are_rejected():
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*convolution"):
        F.conv2d(torch.randn(1, 1, 4, 4, device="vdev"), torch.randn(1, 1, 3, 3))
