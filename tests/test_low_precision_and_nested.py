"""float8 tensors, quantized tensors' refusal, and nested tensors on vdev, against the CPU."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

DEVICE = torch._C._get_privateuse1_backend_name()
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu)


def bits(t):
    return t.cpu().view(torch.uint8)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_copies_casts_and_views_match_cpu(dtype):
    source = torch.randn(8, 6, generator=torch.Generator().manual_seed(0)).abs() * 4
    cpu = source.to(dtype)
    assert torch.equal(bits(source.to(DEVICE).to(dtype)), cpu.view(torch.uint8))  # cast on the device
    moved = cpu.to(DEVICE)
    assert moved.dtype == dtype and torch.equal(bits(moved), cpu.view(torch.uint8))  # copy
    assert torch.equal(moved.float().cpu(), cpu.float())  # cast back
    assert torch.equal(bits(moved.t().contiguous()), cpu.t().contiguous().view(torch.uint8))
    assert torch.equal(moved.view(torch.uint8).cpu(), cpu.view(torch.uint8))  # views
    assert torch.equal(bits(cpu.view(torch.uint8).to(DEVICE).view(dtype)), cpu.view(torch.uint8))
    assert torch.equal(bits(moved[1:5, ::2]), cpu[1:5, ::2].contiguous().view(torch.uint8))


@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32), ids=str)
def test_scaled_mm_matches_cpu(out_dtype):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(16, 32, generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32, generator=generator).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.tensor(0.5), torch.tensor(2.0)
    expected = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    on_device = [t.to(DEVICE) for t in (a, b, scale_a, scale_b)]
    actual = torch._scaled_mm(*on_device, out_dtype=out_dtype)
    assert actual.device.type == DEVICE and actual.dtype == out_dtype
    assert_close(actual.cpu(), expected)


def test_quantized_tensors_are_refused_with_the_reason():
    quantized = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors: they are deprecated in PyTorch 2.13"):
        quantized.to(DEVICE)
    assert torch.ones(2, device=DEVICE).sum().item() == 2  # still usable
    assert_close(quantized.dequantize().to(DEVICE).cpu(), quantized.dequantize())


SEQUENCES = [torch.randn(2, 4), torch.randn(3, 4), torch.randn(1, 4)]


def nested(device, layout=torch.jagged, requires_grad=False):
    return torch.nested.nested_tensor(
        [s.to(device) for s in SEQUENCES], layout=layout, device=device, requires_grad=requires_grad
    )


def assert_same_components(actual, expected):
    assert actual.is_nested and actual.device.type == DEVICE
    for got, want in zip(actual.unbind(), expected.unbind(), strict=True):
        assert_close(got.cpu(), want)


def test_jagged_constructors_pointwise_padding_and_unbind_match_cpu():
    on_device = nested(DEVICE)
    assert on_device.device.type == DEVICE and on_device.layout == torch.jagged
    as_nested = torch.nested.as_nested_tensor([s.to(DEVICE) for s in SEQUENCES], layout=torch.jagged)
    assert_same_components(as_nested, nested("cpu"))
    on_cpu = nested("cpu")
    assert_same_components(on_device.sin() * 2 + on_device, on_cpu.sin() * 2 + on_cpu)
    padded = torch.nested.to_padded_tensor(on_device, -1.0)
    assert padded.device.type == DEVICE
    assert_close(padded.cpu(), torch.nested.to_padded_tensor(nested("cpu"), -1.0))


def test_jagged_linear_layer_and_its_gradients_match_cpu():
    def run(device):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 5).to(device)
        inputs = nested(device, requires_grad=True)
        out = F.gelu(layer(inputs))
        out.values().square().sum().backward()
        return out, layer.weight.grad, inputs.grad

    (out, weight_grad, input_grad), (cpu_out, cpu_weight_grad, cpu_input_grad) = run(DEVICE), run("cpu")
    assert_same_components(out, cpu_out)
    assert_close(weight_grad.cpu(), cpu_weight_grad)
    assert_same_components(input_grad, cpu_input_grad)


def attend(device, requires_grad):
    generator = torch.Generator().manual_seed(0)
    heads = [torch.randn(length, 2, 8, generator=generator) for length in (3, 5)]
    inputs = torch.nested.nested_tensor(
        [h.to(device) for h in heads], layout=torch.jagged, device=device, requires_grad=requires_grad
    )
    q = inputs.transpose(1, 2)
    return inputs, F.scaled_dot_product_attention(q, q, q).transpose(1, 2)


def test_jagged_scaled_dot_product_attention_matches_cpu():
    assert_same_components(attend(DEVICE, False)[1], attend("cpu", False)[1])


def jagged_attention_gradients_match_cpu():
    def gradient(device):
        inputs, out = attend(device, True)
        out.values().square().sum().backward()
        return inputs.grad

    assert_same_components(gradient(DEVICE), gradient("cpu"))


def test_strided_nested_tensors_match_cpu():
    on_device, on_cpu = nested(DEVICE, torch.strided), nested("cpu", torch.strided)
    assert on_device.device.type == DEVICE and on_device.layout == torch.strided
    assert_same_components(on_device.sin() * 2 + on_device, on_cpu.sin() * 2 + on_cpu)
    assert_close(torch.nested.to_padded_tensor(on_device, 0.0).cpu(), torch.nested.to_padded_tensor(on_cpu, 0.0))
    as_nested = torch.nested.as_nested_tensor([s.to(DEVICE) for s in SEQUENCES])
    assert_same_components(as_nested, on_cpu)


def test_strided_nested_linear_layer_and_its_gradients_match_cpu():
    def run(device):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 5).to(device)
        inputs = nested(device, torch.strided, requires_grad=True)
        out = layer(inputs)
        torch.nested.to_padded_tensor(out, 0.0).square().sum().backward()
        return out, layer.weight.grad

    (out, weight_grad), (cpu_out, cpu_weight_grad) = run(DEVICE), run("cpu")
    assert_same_components(out, cpu_out)
    assert_close(weight_grad.cpu(), cpu_weight_grad)


def test_strided_nested_metadata_stays_on_the_cpu_as_on_cuda():
    on_device = nested(DEVICE, torch.strided)
    for metadata in (
        on_device._nested_tensor_size(),
        on_device._nested_tensor_strides(),
        on_device._nested_tensor_storage_offsets(),
    ):
        assert metadata.device.type == "cpu"
    assert torch.equal(on_device._nested_tensor_size(), nested("cpu", torch.strided)._nested_tensor_size())


def strided_nested_matmul_gradients_match_cpu():
    """The path of scaled_dot_product_attention's math backend for nested inputs."""

    def run(device):
        generator = torch.Generator().manual_seed(0)
        parts = [torch.randn(2, length, 4, generator=generator) for length in (3, 5)]
        inputs = torch.nested.nested_tensor([p.to(device) for p in parts], device=device, requires_grad=True)
        scores = torch.matmul(inputs, inputs.transpose(-2, -1)).softmax(-1)
        out = torch.matmul(scores, inputs)
        torch.nested.to_padded_tensor(out, 0.0).square().sum().backward()
        return out, inputs.grad

    (out, grad), (cpu_out, cpu_grad) = run(DEVICE), run("cpu")
    assert_same_components(out, cpu_out)
    assert_same_components(grad, cpu_grad)


def test_nested_gradients_match_cpu_with_launches_blocking(run_in_subprocess):
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})\n"
        "import test_low_precision_and_nested as t\n"
        "t.jagged_attention_gradients_match_cpu()\n"
        "t.strided_nested_matmul_gradients_match_cpu()\n"
        "print('matched')\n"
    )
    finished = run_in_subprocess(code, env={"VDEV_LAUNCH_BLOCKING": "1"})
    assert "matched" in finished.stdout, finished.stderr[-3000:]


def test_jagged_scaled_dot_product_attention_gradients_match_cpu():
    jagged_attention_gradients_match_cpu()


def test_strided_nested_matmul_gradients_match_cpu():
    strided_nested_matmul_gradients_match_cpu()
