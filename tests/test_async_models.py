"""The ops models use that have no ATen C++ meta kernel (relu, where, index_select,
index_put_ and indexing's backward (`_index_put_impl_`), embedding backward, layer and batch norm, convolution and their backward, dropout's
backward, the CPU's flash attention and its backward; the foreach sqrt/pow optimizers
call) are launched on the stream like every other op: their
results equal the CPU's, the host returns while a `torch.vdev._sleep` kernel still holds
the stream, bad arguments raise at the call, and the training steps of
benchmarks/models.py run without an op on the calling thread (the mixture-of-experts step
with only its data-dependent ones)."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_vdev

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import models  # noqa: E402

BUSY_MS = 200


def _inputs(*shapes, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]


def _to_vdev(values):
    return [value.to("vdev") if isinstance(value, torch.Tensor) else value for value in values]


def _flat(result):
    if isinstance(result, torch.Tensor):
        return [result]
    return [tensor for item in result for tensor in _flat(item)]


# Each case: (function of tensors, CPU inputs). Inputs of floating dtype get gradients.
INDEX = torch.tensor([3, 0, 5, 5, 1])
TOKENS = torch.tensor([[1, 2, 2], [0, 9, 1]])

CASES = {
    "relu": (F.relu, _inputs((64, 33))),
    "relu_in_place": (lambda x: F.relu(x.clone(), inplace=True), _inputs((64, 33))),
    "where": (lambda x, y: torch.where(x > 0, x, y), _inputs((16, 8), (8,))),
    "where_scalar": (lambda x: torch.where(x > 0, x, 0.5), _inputs((16, 8))),
    "safe_softmax_where_out": (lambda x: torch.ops.aten._safe_softmax(x, -1), _inputs((4, 6, 7))),
    "index_select": (lambda x, i: torch.index_select(x, 1, i), [*_inputs((4, 7, 3)), INDEX]),
    "embedding": (lambda w, t: F.embedding(t, w), [*_inputs((10, 6)), TOKENS]),
    "embedding_padding_scaled": (
        lambda w, t: F.embedding(t, w, padding_idx=2, scale_grad_by_freq=True),
        [*_inputs((10, 6)), TOKENS],
    ),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), _inputs((3, 4, 5), (5,), (5,))),
    "layer_norm_2d_no_affine": (lambda x: F.layer_norm(x, (4, 5)), _inputs((3, 4, 5))),
    "batch_norm_train": (
        lambda x, w, b: F.batch_norm(x, torch.zeros(3, device=x.device), torch.ones(3, device=x.device), w, b, True),
        _inputs((4, 3, 5, 5), (3,), (3,)),
    ),
    "batch_norm_eval": (
        lambda x, w, b: F.batch_norm(
            x, torch.full((3,), 0.1, device=x.device), torch.full((3,), 2.0, device=x.device), w, b, False
        ),
        _inputs((4, 3, 5, 5), (3,), (3,)),
    ),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), _inputs((2, 3, 8, 8), (4, 3, 3, 3), (4,))),
    "conv2d_strided_groups_no_bias": (
        lambda x, w: F.conv2d(x, w, stride=2, dilation=2, groups=2), _inputs((2, 4, 9, 9), (6, 2, 3, 3))
    ),
    "conv2d_channels_last": (
        lambda x, w, b: F.conv2d(x.to(memory_format=torch.channels_last), w, b),
        _inputs((2, 3, 6, 6), (4, 3, 3, 3), (4,)),
    ),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=2), _inputs((2, 3, 10), (5, 3, 4), (5,))),
    "conv_transpose2d": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, output_padding=1),
        _inputs((2, 4, 5, 5), (4, 3, 3, 3), (3,)),
    ),
    "attention_flash": (F.scaled_dot_product_attention, _inputs((2, 4, 8, 16), (2, 4, 6, 16), (2, 4, 6, 16))),
    "attention_flash_transposed_query": (
        lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)),
        _inputs(*[(2, 8, 4, 16)] * 3)
    ),
    "attention_flash_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), _inputs(*[(2, 4, 8, 16)] * 3)
    ),
    "attention_flash_float_mask": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m.detach()),
        _inputs((2, 4, 8, 16), (2, 4, 6, 16), (2, 4, 6, 16), (8, 6)),
    ),
    "attention_flash_bool_mask_broadcast": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [*_inputs(*[(2, 4, 8, 16)] * 3), torch.ones(8, 8, dtype=torch.bool).tril()[None, None].expand(2, 1, 8, 8)],
    ),
    # Dropout's backward of a gradient its fused kernel does not take (not contiguous).
    "dropout_backward_strided": (
        lambda g, m: torch.ops.aten.native_dropout_backward(g.t(), m, 1.25),
        [*_inputs((7, 5)), torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) > 0.2],
    ),
    "dropout_backward_bfloat16": (
        lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 1 / 0.7),
        [*_inputs((6, 9), dtype=torch.bfloat16), torch.rand(6, 9, generator=torch.Generator().manual_seed(2)) > 0.3],
    ),
    # _index_put_impl_: index_put_, `tensor[idx] = v` and indexing's backward. Values that
    # a bool mask indexes are detached: their gradient (grad[mask]) depends on data.
    "index_put": (lambda x, i, v: x.clone().index_put_((i,), v), [*_inputs((6, 4)), torch.tensor([4, 0, 2]), *_inputs((3, 4))]),
    "index_put_int32_broadcast_values": (
        lambda x, i, v: x.clone().index_put_((i,), v), [*_inputs((6, 4)), torch.tensor([5, 1], dtype=torch.int32), *_inputs((4,))]
    ),
    "index_put_two_indices_broadcast": (
        lambda x, i, j, v: x.clone().index_put_((i[:, None], j[None, :]), v),
        [*_inputs((5, 6, 3)), torch.tensor([0, 4]), torch.tensor([1, 5, 2]), *_inputs((3,))],
    ),
    "index_put_non_adjacent_indices": (
        lambda x, i, j, v: torch.ops.aten.index_put_(x.clone(), [i, None, j], v),
        [*_inputs((4, 5, 6)), torch.tensor([3, 0]), torch.tensor([-1, 2]), *_inputs((2, 5))],
    ),
    "index_put_accumulate_duplicates": (
        lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True),
        [*_inputs((6, 4)), torch.tensor([1, 1, 3, 1]), *_inputs((4, 4))],
    ),
    "index_put_negative_indices": (
        lambda x, i, v: x.clone().index_put_((i,), v), [*_inputs((6, 4)), torch.tensor([-1, -6, 2]), *_inputs((3, 4))]
    ),
    "index_put_non_contiguous_self": (
        lambda x, i, v: x.clone()[:, ::2].index_put_((i,), v), [*_inputs((6, 8)), torch.tensor([5, 0]), *_inputs((2, 4))]
    ),
    "index_put_transposed_self_accumulate": (
        lambda x, i, v: x.clone().t().index_put_((i,), v, accumulate=True),
        [*_inputs((4, 6)), torch.tensor([2, 2, 0]), *_inputs((3, 4))],
    ),
    "index_put_bool_mask_rows": (
        lambda x, m, v: x.clone().index_put_((m,), v.detach()), [*_inputs((6, 4)), torch.tensor([1, 0, 1, 1, 0, 1]).bool(), *_inputs((4,))]
    ),
    "index_put_bool_mask_fill": (
        lambda x, v: x.clone().index_put_((x.detach() > 0,), v.detach()), _inputs((6, 4), ())
    ),
    "index_put_bool_mask_accumulate": (
        lambda x, v: x.clone().index_put_((x.detach() > 0,), v.detach(), accumulate=True), _inputs((6, 4), ())
    ),
    "index_put_2d_mask_of_3d": (
        lambda x, v: x.clone().index_put_((x.detach()[..., 0] > 0,), v.detach()), _inputs((3, 4, 5), (5,))
    ),
    "index_put_mask_after_a_slice": (
        lambda x, m, v: torch.ops.aten.index_put_(x.clone(), [None, m], v.detach()),
        [*_inputs((3, 4)), torch.tensor([0, 1, 1, 0]).bool(), *_inputs((3, 1))],
    ),
    "index_backward": (lambda x, i: x[i] * 2, [*_inputs((6, 4)), torch.tensor([[1, 5], [1, 0]])]),
    "index_backward_two_indices": (
        lambda x, i, j: x[i, :, j], [*_inputs((4, 3, 5)), torch.tensor([0, 3, 3]), torch.tensor([4, 4, 1])]
    ),
    "foreach_sqrt": (lambda x, y: torch._foreach_sqrt([x.exp(), y.exp()]), _inputs((5,), (3, 2))),
    "foreach_pow_scalar_and_tensor": (lambda x, y: torch._foreach_pow(0.9, [x, y]), _inputs((5,), (3, 2))),
    "foreach_pow_list": (lambda x, y: torch._foreach_pow([x.exp(), y.exp()], [y.detach().flatten()[:5], x.detach()[:3, None] * 2]), _inputs((5,), (3, 2))),
}


@pytest.mark.parametrize("case", CASES)
def test_results_and_gradients_equal_cpu_without_a_calling_thread_op(case):
    function, cpu_inputs = CASES[case]
    cpu_inputs = [value.detach().requires_grad_(value.is_floating_point()) for value in cpu_inputs]
    vdev_inputs = [value.detach().to("vdev").requires_grad_(value.is_floating_point()) for value in cpu_inputs]
    expected = _flat(function(*cpu_inputs))
    generator = torch.Generator().manual_seed(1)
    grads = [torch.randn(r.shape, generator=generator) for r in expected if r.requires_grad]
    vdev_grads = _to_vdev(grads)  # copies from pageable memory wait for the stream
    torch.vdev.synchronize()
    torch_vdev.reset_synchronizing_op_stats()
    results = _flat(function(*vdev_inputs))
    differentiable = [r for r in results if r.requires_grad]
    if differentiable:
        torch.autograd.backward(differentiable, vdev_grads)
    torch.vdev.synchronize()
    assert torch_vdev.synchronizing_op_stats() == {}
    for result, reference in zip(results, expected):
        assert result.device.type == "vdev"
        assert result.stride() == reference.stride()
        assert_close(result.cpu(), reference.detach())
    if grads:
        torch.autograd.backward([r for r in expected if r.requires_grad], grads)
        for vdev_input, cpu_input in zip(vdev_inputs, cpu_inputs):
            if cpu_input.grad is not None:
                assert_close(vdev_input.grad.cpu(), cpu_input.grad)


@pytest.mark.parametrize("case", CASES)
def test_the_host_returns_while_the_op_is_queued(case):
    function, cpu_inputs = CASES[case]
    vdev_inputs = _to_vdev(cpu_inputs)
    stream = torch.vdev.current_stream()
    torch.vdev.synchronize()
    torch.vdev._sleep(BUSY_MS)
    with torch.no_grad():
        results = _flat(function(*vdev_inputs))
    assert not stream.query()  # the op waits behind the sleep: the host went on
    with torch.no_grad():
        for result, reference in zip(results, _flat(function(*cpu_inputs))):
            assert_close(result.cpu(), reference)


def test_batch_norm_running_statistics_are_updated_by_the_launched_kernel():
    x = _inputs((4, 3, 5, 5))[0]
    stats = {device: (torch.zeros(3, device=device), torch.ones(3, device=device)) for device in ("cpu", "vdev")}
    for device, (mean, var) in stats.items():
        for _ in range(2):
            F.batch_norm(x.to(device), mean, var, training=True, momentum=0.3)
    assert_close(stats["vdev"][0].cpu(), stats["cpu"][0])
    assert_close(stats["vdev"][1].cpu(), stats["cpu"][1])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: F.relu(torch.ones(3, dtype=torch.bool, device="vdev")), "Boolean inputs not supported for relu"),
        (
            lambda: torch.where(torch.ones(3, device="vdev"), torch.ones(3, device="vdev"), 0.0),
            "where expected condition to be a boolean tensor",
        ),
        (
            lambda: torch.index_select(torch.ones(3, device="vdev"), 0, torch.ones(2, device="vdev")),
            "index_select\\(\\): Expected dtype int32 or int64 for index",
        ),
        (
            lambda: F.layer_norm(torch.ones(2, 3, device="vdev"), (4,)),
            "Given normalized_shape=\\[4\\], expected input with shape",
        ),
        (
            lambda: F.conv2d(torch.ones(1, 3, 5, 5, device="vdev"), torch.ones(2, 4, 3, 3, device="vdev")),
            "expected input\\[1, 3, 5, 5\\] to have 4 channels",
        ),
        (
            lambda: F.batch_norm(torch.ones(2, 3, device="vdev"), torch.zeros(4, device="vdev"), torch.ones(4, device="vdev")),
            "running_mean should contain 3 elements not 4",
        ),
        (
            lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*[torch.ones(1, 2, 3, 4, device="vdev")] * 3, 0.5),
            "Currently do not support dropout > 0",
        ),
        (
            lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                torch.ones(1, 2, 3, 4, device="vdev"), torch.ones(1, 2, 3, 4, device="vdev"), torch.ones(1, 2, 3, 5, device="vdev")
            ),
            "Q/K/V should have the same head size",
        ),
        (
            lambda: torch.ops.aten.native_dropout_backward(
                torch.ones(3, 4, device="vdev"), torch.ones(5, dtype=torch.bool, device="vdev"), 2.0
            ),
            "The size of tensor a \\(4\\) must match the size of tensor b \\(5\\)",
        ),
    ],
    ids=[
        "relu_bool", "where_float_condition", "index_select_float_index", "layer_norm_shape", "conv_channels",
        "batch_norm_stats", "flash_attention_dropout", "flash_attention_head_sizes", "dropout_backward_sizes",
    ],
)
def test_bad_arguments_raise_at_the_call_as_on_cpu(call, message):
    torch.vdev._sleep(BUSY_MS)
    with pytest.raises(RuntimeError, match=message):
        call()
    torch.vdev.synchronize()
    assert torch.ones(2, device="vdev").sum().item() == 2


def test_an_index_out_of_range_raises_at_the_next_synchronization():
    x = torch.ones(4, 3, device="vdev")
    result = torch.index_select(x, 0, torch.tensor([0, 7], device="vdev"))
    assert result.shape == (2, 3)
    with pytest.raises(RuntimeError, match="index_select"):
        torch.vdev.synchronize()
    assert torch.ones(2, device="vdev").sum().item() == 2


# Each: arguments of index_put_ on a device (self, indices, values, accumulate).
INDEX_PUT_ERRORS = {
    "too_many_indices": lambda d: (torch.zeros(3, device=d), (torch.tensor([0], device=d),) * 2, torch.ones(1, device=d)),
    "float_index": lambda d: (torch.zeros(3, device=d), (torch.ones(1, device=d),), torch.ones(1, device=d)),
    "mask_shape": lambda d: (
        torch.zeros(3, 2, device=d), (torch.ones(4, dtype=torch.bool, device=d),), torch.ones(2, device=d)
    ),
    "indices_do_not_broadcast": lambda d: (
        torch.zeros(4, 4, device=d), (torch.tensor([0, 1], device=d), torch.tensor([0, 1, 2], device=d)), torch.ones(1, device=d)
    ),
    "values_do_not_broadcast": lambda d: (
        torch.zeros(4, 3, device=d), (torch.tensor([0, 1], device=d),), torch.ones(3, 3, device=d)
    ),
    "values_dtype": lambda d: (
        torch.zeros(4, 3, device=d), (torch.tensor([0, 1], device=d),), torch.ones(2, 3, dtype=torch.float64, device=d)
    ),
    # The count a mask selects decides; vdev waits for it on the calling thread as CUDA does.
    "values_do_not_match_the_mask_count": lambda d: (
        torch.zeros(4, 3, device=d), (torch.tensor([True, False, True, True], device=d),), torch.ones(2, 3, device=d)
    ),
    "index_into_an_empty_dimension": lambda d: (
        torch.zeros(0, 3, device=d), (torch.tensor([0], device=d),), torch.ones(3, device=d)
    ),
}


@pytest.mark.parametrize("case", INDEX_PUT_ERRORS)
@pytest.mark.parametrize("accumulate", [False, True], ids=["", "accumulate"])
def test_index_put_bad_arguments_raise_at_the_call_as_on_cpu(case, accumulate):
    self, indices, values = INDEX_PUT_ERRORS[case]("cpu")
    with pytest.raises(Exception) as expected:
        self.index_put_(indices, values, accumulate)
    self, indices, values = INDEX_PUT_ERRORS[case]("vdev")
    torch.vdev.synchronize()
    torch.vdev._sleep(BUSY_MS)
    with pytest.raises(expected.type) as raised:
        self.index_put_(indices, values, accumulate)
    assert str(raised.value) == str(expected.value)
    torch.vdev.synchronize()
    assert torch.ones(2, device="vdev").sum().item() == 2


@pytest.mark.parametrize("accumulate", [False, True], ids=["", "accumulate"])
def test_an_index_put_index_out_of_range_raises_at_the_next_synchronization(accumulate):
    x = torch.zeros(4, 3, device="vdev")
    index, values = torch.tensor([0, 7], device="vdev"), torch.ones(2, 3, device="vdev")
    torch.vdev.synchronize()
    torch.vdev._sleep(BUSY_MS)
    x.index_put_((index,), values, accumulate)
    assert not torch.vdev.current_stream().query()  # queued behind the sleep
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 0 with size 4"):
        torch.vdev.synchronize()
    assert torch.ones(2, device="vdev").sum().item() == 2


def test_the_mixture_of_experts_step_waits_only_for_its_data():
    step = models.moe_step("vdev")
    step()
    torch.vdev.synchronize()
    torch_vdev.reset_synchronizing_op_stats()
    step()
    torch.vdev.synchronize()
    # Per expert a `load[expert] == 0` (.item()) and torch.where's nonzero, and histc of
    # integers (no C++ kernel vdev launches); indexing's backward launches.
    assert set(torch_vdev.synchronizing_op_stats()) <= {"aten::_local_scalar_dense", "aten::nonzero", "aten::histc"}


@pytest.mark.parametrize("make", [F.conv2d, F.layer_norm, F.batch_norm], ids=["conv2d", "layer_norm", "batch_norm"])
def test_gradcheck(make):
    generator = torch.Generator().manual_seed(0)
    if make is F.conv2d:
        shapes, call = [(1, 2, 4, 4), (3, 2, 2, 2), (3,)], lambda x, w, b: F.conv2d(x, w, b, padding=1)
    elif make is F.layer_norm:
        shapes, call = [(2, 3, 4), (4,), (4,)], lambda x, w, b: F.layer_norm(x, (4,), w, b)
    else:
        shapes, call = [(3, 2, 4), (2,), (2,)], lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)
    inputs = [
        torch.randn(shape, generator=generator, dtype=torch.float64).to("vdev").requires_grad_() for shape in shapes
    ]
    assert torch.autograd.gradcheck(call, inputs)


def _losses(make, device, steps=3):
    step = make(device)
    # Dropout draws from the generator of the step's device: seeded alike on both.
    torch.manual_seed(1)
    return torch.stack([step().detach().cpu() for _ in range(steps)])


@pytest.mark.parametrize("name", models.TRAINING_STEPS)
def test_training_steps_run_every_op_launched_and_equal_cpu(name):
    make = models.TRAINING_STEPS[name]
    step = make("vdev")
    step()
    torch.vdev.synchronize()
    torch_vdev.reset_synchronizing_op_stats()
    step()
    torch.vdev.synchronize()
    assert torch_vdev.synchronizing_op_stats() == {}
    assert_close(_losses(make, "vdev"), _losses(make, "cpu"))


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
@pytest.mark.parametrize("capturable", [False, True], ids=["", "capturable"])
def test_adam_steps_run_every_op_launched_and_equal_cpu(fused, capturable):
    if fused and capturable:
        pytest.skip("fused Adam takes no capturable flag of its own (it always is)")
    parameters = {}
    for device in ("cpu", "vdev"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(device)
        # The CPU's Adam is not capturable; its arithmetic is the same.
        kwargs = {"fused": True} if fused else {"foreach": True, "capturable": capturable and device == "vdev"}
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, **kwargs)
        data = torch.randn(5, 8, generator=torch.Generator().manual_seed(1)).to(device)
        for step in range(3):
            if device == "vdev" and step == 2:
                torch.vdev.synchronize()
                torch_vdev.reset_synchronizing_op_stats()
            optimizer.zero_grad()
            model(data).square().mean().backward()
            optimizer.step()
        if device == "vdev":
            torch.vdev.synchronize()
            assert torch_vdev.synchronizing_op_stats() == {}
        parameters[device] = [p.detach().cpu() for p in model.parameters()]
    assert_close(parameters["vdev"], parameters["cpu"])


def test_under_launch_blocking(run_in_subprocess):
    script = f"""
import sys
sys.path.insert(0, {os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")!r})
import torch, torch_vdev, models
from torch.testing import assert_close
for name, make in models.TRAINING_STEPS.items():
    step = make("vdev")
    step()
    torch_vdev.reset_synchronizing_op_stats()
    step()
    assert torch_vdev.synchronizing_op_stats() == {{}}, torch_vdev.synchronizing_op_stats()
    losses = {{}}
    for device in ("vdev", "cpu"):
        step = make(device)
        torch.manual_seed(1)
        losses[device] = torch.stack([step().detach().cpu() for _ in range(2)])
    assert_close(losses["vdev"], losses["cpu"])
    print(name, "ok")
try:
    torch.ones(4, 3, device="vdev").index_select(0, torch.tensor([0, 7], device="vdev"))
except RuntimeError as error:
    print("raised at launch:", "index" in str(error))
"""
    result = run_in_subprocess(script, env={"VDEV_LAUNCH_BLOCKING": "1"})
    assert result.returncode == 0, result.stderr
    for name in models.TRAINING_STEPS:
        assert f"{name} ok" in result.stdout
    assert "raised at launch: True" in result.stdout
