"""Graph capture and replay on vdev (torch.accelerator.Graph, torch.vdev.graph and
friends), checked against eager results on the CPU: work captured on a stream is
recorded, not run; each replay runs it again on the same memory; allocations during
capture come from the graph's private pool and return on reset(); what cannot be
captured raises CUDA's "operation not permitted when stream is capturing" and leaves
the process usable.

Every op launched on a stream is capturable, random ops included; ops that still run on
the calling thread (Python kernels, ops without a meta kernel) are refused."""

import gc
import re
import threading

import pytest
import torch
from torch.testing import assert_close

import torch_vdev  # noqa: F401

NOT_PERMITTED = "operation not permitted when stream is capturing"


def _chain(tensors, others):
    """A pointwise chain of in-place foreach ops (queued, hence capturable)."""
    torch._foreach_mul_(tensors, 1.5)
    torch._foreach_add_(tensors, others, alpha=0.25)
    torch._foreach_addcmul_(tensors, others, others, value=-0.5)
    torch._foreach_clamp_max_(tensors, 4.0)
    torch._foreach_abs_(tensors)
    torch._foreach_sqrt_(tensors)
    torch._foreach_add_(tensors, 0.5)
    torch._foreach_reciprocal_(tensors)
    torch._foreach_lerp_(tensors, others, 0.3)
    torch._foreach_neg_(tensors)
    torch._foreach_maximum_(tensors, -1.0)


def _inputs(device, seed=0, count=3, size=64):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(size, generator=generator).to(device) for _ in range(count)]


def test_captured_work_is_recorded_not_run_and_replays_rerun_it():
    static = torch.zeros(8, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        assert torch.vdev.is_current_stream_capturing()
        assert torch.accelerator.current_stream().is_capturing()
        assert not torch.vdev.default_stream().is_capturing()
        torch._foreach_add_([static], 1.0)
    assert not torch.vdev.is_current_stream_capturing()
    assert not torch.accelerator.current_stream().is_capturing()
    assert_close(static.cpu(), torch.zeros(8))  # recorded, not run
    for replays in range(1, 4):
        graph.replay()
        assert_close(static.cpu(), torch.full((8,), float(replays)))


def test_replayed_pointwise_chain_equals_eager_cpu_on_new_inputs():
    static = _inputs("vdev", seed=0)
    others = _inputs("vdev", seed=1)
    result = [torch.empty_like(t) for t in static]
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        work = [torch.empty_like(t) for t in static]
        for w, s in zip(work, static):
            w.copy_(s)
        _chain(work, others)
        for r, w in zip(result, work):
            r.copy_(w)
    for seed in (2, 3, 4):
        fresh = _inputs("cpu", seed=seed)
        for s, f in zip(static, fresh):
            s.copy_(f.to("vdev"))
        graph.replay()
        expected = [f.clone() for f in fresh]
        _chain(expected, [o.cpu() for o in others])
        for r, e in zip(result, expected):
            assert_close(r.cpu(), e)


def test_replay_is_queued_on_the_current_stream():
    static = torch.zeros(4, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        torch.vdev._sleep(300)
        torch._foreach_add_([static], 1.0)
    stream = torch.vdev.current_stream()
    graph.replay()  # on the default stream, which capture did not use
    assert not stream.query()
    stream.synchronize()
    assert_close(static.cpu(), torch.ones(4))


def test_launches_of_one_graph_on_two_streams_run_in_launch_order():
    # As CUDA orders the launches of one graph exec: the second launch, on a stream
    # that is free, waits for the first, held up behind 300 ms of work on its stream,
    # and the two never overlap. Each launch is x = 2 * x + y in two steps through a
    # temporary, so overlapping or reordered launches change the result.
    generator = torch.Generator().manual_seed(0)
    start, y = torch.randn(64, generator=generator), torch.randn(64, generator=generator)
    x, y_static = start.to("vdev"), y.to("vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        doubled = x * 2
        x.copy_(doubled + y_static)
    busy, free = torch.vdev.Stream(), torch.vdev.Stream()
    busy.wait_stream(torch.vdev.current_stream())
    free.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(busy):
        torch.vdev._sleep(300)
        graph.replay()
    with torch.vdev.stream(free):
        graph.replay()
        after_both = x.clone()
    free.synchronize()  # not busy: the order of the launches is the runtime's
    expected = start.clone()
    for _ in range(2):
        expected = expected * 2 + y
    assert_close(after_both.cpu(), expected)


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
def test_captured_fused_optimizer_step_equals_eager_cpu_steps(optimizer):
    generator = torch.Generator().manual_seed(0)
    cpu_params = [torch.randn(shape, generator=generator) for shape in [(16, 8), (8,), (4, 16)]]
    grads = [[torch.randn(p.shape, generator=generator) for p in cpu_params] for _ in range(4)]
    vdev_params = [p.to("vdev").requires_grad_() for p in cpu_params]
    cpu_params = [p.clone().requires_grad_() for p in cpu_params]
    options = dict(lr=0.01, weight_decay=0.1, fused=True)
    cpu_opt = getattr(torch.optim, optimizer)(cpu_params, **options)
    vdev_opt = getattr(torch.optim, optimizer)(vdev_params, **options)
    static_grads = [torch.zeros_like(p) for p in vdev_params]
    for p, g in zip(vdev_params, static_grads):
        p.grad = g
    # The first step creates the optimizer state (eagerly, as with CUDA graphs).
    for p, g in zip(cpu_params, grads[0]):
        p.grad = g.clone()
    cpu_opt.step()
    for s, g in zip(static_grads, grads[0]):
        s.copy_(g.to("vdev"))
    vdev_opt.step()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        vdev_opt.step()
    for step_grads in grads[1:]:
        for p, g in zip(cpu_params, step_grads):
            p.grad = g.clone()
        cpu_opt.step()
        for s, g in zip(static_grads, step_grads):
            s.copy_(g.to("vdev"))
        graph.replay()
    for v, c in zip(vdev_params, cpu_params):
        assert_close(v.detach().cpu(), c.detach())
    assert_close(vdev_opt.state[vdev_params[0]]["step"].cpu(), cpu_opt.state[cpu_params[0]]["step"])


def test_work_forked_to_another_stream_and_joined_is_captured():
    a = torch.zeros(8, device="vdev")
    b = torch.zeros(8, device="vdev")
    side = torch.vdev.Stream()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        capture_stream = torch.vdev.current_stream()
        torch._foreach_add_([a], 1.0)
        side.wait_stream(capture_stream)
        with torch.vdev.stream(side):
            assert torch.vdev.is_current_stream_capturing()
            b.copy_(a)
            torch._foreach_mul_([b], 10.0)
        capture_stream.wait_stream(side)
        torch._foreach_add_([a], [b])
    assert not torch.vdev.is_current_stream_capturing()
    graph.replay()
    assert_close(b.cpu(), torch.full((8,), 10.0))
    assert_close(a.cpu(), torch.full((8,), 11.0))


def test_an_unjoined_fork_fails_the_capture():
    a = torch.zeros(8, device="vdev")
    side = torch.vdev.Stream()
    graph = torch.vdev.VDEVGraph()
    with pytest.raises(RuntimeError, match="unjoined"):
        with torch.vdev.graph(graph):
            side.wait_stream(torch.vdev.current_stream())
            with torch.vdev.stream(side):
                torch._foreach_add_([a], 1.0)
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()
    _check_usable()


def _check_usable():
    """Eager work and a new capture work after a failed capture."""
    x = torch.arange(4.0, device="vdev")
    assert_close((x + 1).cpu(), torch.arange(4.0) + 1)
    torch.vdev.synchronize()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        torch._foreach_add_([x], 1.0)
    graph.replay()
    assert_close(x.cpu(), torch.arange(4.0) + 1)


# What each refusal names: the op (its name, or the copy's kind, as in profiler traces).
COPY_OUT = r"aten::copy_|Memcpy DtoH"
COPY_IN = r"aten::copy_|Memcpy HtoD"
REFUSED = {
    ".item()": (lambda x: x[0].item(), r"aten::_local_scalar_dense"),
    "reduction .item()": (lambda x: x.sum().item(), r"aten::sum|aten::_local_scalar_dense"),
    ".cpu()": (lambda x: x.cpu(), COPY_OUT),
    "copy to pageable CPU": (lambda x: torch.empty(4).copy_(x), COPY_OUT),
    "copy from pageable CPU": (lambda x: x.copy_(torch.ones(4)), COPY_IN),
    "torch.vdev.synchronize()": (lambda x: torch.vdev.synchronize(), "vdrtDeviceSynchronize"),
    "stream.synchronize()": (lambda x: torch.vdev.current_stream().synchronize(), "vdrtStreamSynchronize"),
    "stream.query()": (lambda x: torch.vdev.current_stream().query(), "vdrtStreamQuery"),
    "nonzero": (lambda x: torch.nonzero(x), "aten::nonzero"),
    "masked_select": (lambda x: torch.masked_select(x, x > 0), "aten::"),
    "unique": (lambda x: torch.unique(x), "aten::_unique2"),
    # CUDA too reads the standard deviations on the host (all >= 0).
    "normal with a tensor std": (lambda x: torch.normal(x, x), "aten::normal"),
    "a Python kernel": (lambda x: _with_python_relu(x), "aten::relu"),
    "the CPU fallback": (lambda x: torch.ops.aten._adaptive_avg_pool3d(x.view(1, 1, 1, 2, 2), [1, 1, 1]), "aten::_adaptive_avg_pool3d"),
}


def _with_python_relu(x):
    with torch_vdev.kernels({torch.ops.aten.relu.default: lambda t: t.clamp(min=0)}):
        return torch.relu(x)


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_be_captured_raises_and_invalidates_the_capture(name):
    forbidden, op_name = REFUSED[name]
    x = torch.ones(4, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.stream(torch.vdev.Stream()):
        graph.capture_begin()
        try:
            with pytest.raises(RuntimeError, match=NOT_PERMITTED) as raised:
                forbidden(x)
        finally:
            with pytest.raises(RuntimeError, match="previous error during capture"):
                graph.capture_end()
    assert re.search(op_name, str(raised.value))
    assert not torch.vdev.is_current_stream_capturing()
    # The context manager lets the block's own error through.
    with pytest.raises(RuntimeError, match=NOT_PERMITTED):
        with torch.vdev.graph(torch.vdev.VDEVGraph()):
            forbidden(x)
    _check_usable()


def test_a_kernel_failing_in_a_replay_raises_at_the_next_synchronization():
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        torch_vdev._C._fail_in_kernel("index 7 is out of bounds")
    graph.replay()
    with pytest.raises(RuntimeError, match="vdev::_fail_in_kernel: index 7 is out of bounds"):
        torch.vdev.synchronize()
    _check_usable()


def _launch_from_thread(stream, tensor):
    errors = []

    def work():
        try:
            with torch.vdev.stream(stream):
                torch._foreach_add_([tensor], 1.0)
            stream.synchronize()
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return errors


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_capture_error_modes(mode):
    other_stream = torch.vdev.Stream()
    other = torch.zeros(4, device="vdev")
    captured = torch.zeros(4, device="vdev")
    # The zeros are queued on the default stream; the other streams must see them written.
    torch.vdev.synchronize()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.stream(torch.vdev.Stream()):
        graph.capture_begin(capture_error_mode=mode)
        torch._foreach_add_([captured], 1.0)
        errors = _launch_from_thread(other_stream, other)
        if mode == "global":
            assert errors and "global mode" in errors[0] and "not permitted" in errors[0]
        else:
            assert not errors
        # This thread's work on a stream that is not capturing.
        if mode == "relaxed":
            with torch.vdev.stream(other_stream):
                torch._foreach_add_([other], 1.0)
            graph.capture_end()
        else:
            if mode == "thread_local":
                with pytest.raises(RuntimeError, match="not permitted"):
                    with torch.vdev.stream(other_stream):
                        torch._foreach_add_([other], 1.0)
            with pytest.raises(RuntimeError, match="previous error during capture"):
                graph.capture_end()
    if mode == "relaxed":
        graph.replay()
        other_stream.synchronize()
        assert_close(captured.cpu(), torch.ones(4))
        assert_close(other.cpu(), torch.full((4,), 2.0))
    _check_usable()


def _memory():
    gc.collect()
    torch.vdev.synchronize()
    torch.vdev.empty_cache()
    return torch.vdev.memory_allocated(), torch.vdev.memory_reserved()


def test_capture_allocates_from_the_private_pool_and_reset_returns_it():
    source = torch.arange(4096.0, device="vdev")
    allocated_before, reserved_before = _memory()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        temporary = torch.empty_like(source)
        temporary.copy_(source)
        output = torch.empty_like(source)
        output.copy_(temporary)
        torch._foreach_mul_([output], 2.0)
        del temporary
    output_address = output.data_ptr()
    stats = torch.vdev.memory_stats()
    # The pool is counted: both blocks stay reserved (a replay writes the temporary).
    assert torch.vdev.memory_reserved() >= reserved_before + 2 * source.nbytes
    assert stats["allocated_bytes.all.current"] >= allocated_before + source.nbytes
    source.fill_(1.0)
    for _ in range(2):
        graph.replay()
        assert output.data_ptr() == output_address
        assert_close(output.cpu(), torch.full((4096,), 2.0))
    # Empting the cache keeps the graph's memory.
    torch.vdev.empty_cache()
    assert torch.vdev.memory_reserved() >= reserved_before + 2 * source.nbytes
    expected = output.cpu()
    del output
    graph.reset()
    assert _memory() == (allocated_before, reserved_before)
    del expected


def test_deleting_a_graph_returns_its_memory_once_its_outputs_are_gone():
    source = torch.ones(4096, device="vdev")
    before = _memory()
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        output = torch.empty_like(source)
        output.copy_(source)
    del graph
    assert _memory() != before  # the output still holds its block
    del output
    assert _memory() == before


def test_blocks_freed_during_capture_are_reused_only_inside_the_pool():
    source = torch.ones(1024, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        first = torch.empty_like(source)
        first.copy_(source)
        freed_address = first.data_ptr()
        del first
        second = torch.empty_like(source)  # reuses the freed block inside the capture
        assert second.data_ptr() == freed_address
        second.copy_(source)
        third = torch.empty_like(source)
        third.copy_(second)
        del second
    # Outside the capture the pool's free block is not handed out.
    eager = [torch.empty_like(source) for _ in range(4)]
    assert freed_address not in {t.data_ptr() for t in eager}
    graph.replay()
    assert_close(third.cpu(), torch.ones(1024))
    del third, eager
    graph.reset()


@pytest.mark.parametrize("share", ["graph.pool()", "graph_pool_handle()"])
def test_graphs_share_a_pool(share):
    source = torch.arange(2048.0, device="vdev")
    before = _memory()
    first = torch.vdev.VDEVGraph()
    pool = torch.vdev.graph_pool_handle() if share == "graph_pool_handle()" else None
    with torch.vdev.graph(first, pool=pool):
        temporary = torch.empty_like(source)
        temporary.copy_(source)
        out_first = torch.empty_like(source)
        out_first.copy_(temporary)
        freed_address = temporary.data_ptr()
        del temporary
    pool = first.pool() if pool is None else pool
    assert first.pool() == pool
    second = torch.vdev.VDEVGraph()
    with torch.vdev.graph(second, pool=pool):
        out_second = torch.empty_like(source)  # the first graph's freed block
        out_second.copy_(out_first)
        torch._foreach_add_([out_second], 1.0)
    assert out_second.data_ptr() == freed_address
    assert second.pool() == pool
    source.fill_(3.0)
    first.replay()
    second.replay()
    assert_close(out_second.cpu(), torch.full((2048,), 4.0))
    del out_first, out_second
    first.reset()
    assert _memory() != before  # the second graph still uses the pool
    second.reset()
    assert _memory() == before


def test_torch_accelerator_graph_on_vdev(tmp_path):
    x = torch.zeros(4, device="vdev")
    stream = torch.Stream("vdev")
    graph = torch.accelerator.Graph()
    with stream, graph:
        torch._foreach_add_([x], 2.0)
    graph.replay()
    graph.replay()
    assert_close(x.cpu(), torch.full((4,), 4.0))
    assert isinstance(graph.pool(), tuple)
    graph.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()
    # keep_graph: instantiated explicitly (or at the first replay), dumpable.
    kept = torch.accelerator.Graph(keep_graph=True, capture_error_mode="relaxed")
    kept.enable_debug_mode()
    with stream, kept:
        torch._foreach_mul_([x], 0.5)
        torch._foreach_add_([x], 1.0)
    kept.instantiate()
    kept.replay()
    assert_close(x.cpu(), torch.full((4,), 3.0))
    dump = tmp_path / "graph.dot"
    kept.debug_dump(str(dump))
    text = dump.read_text()
    assert "aten::_foreach_mul_" in text and "aten::_foreach_add_" in text and "n0 -> n1" in text


def test_capture_needs_a_non_default_stream_and_one_capture_per_graph():
    graph = torch.vdev.VDEVGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        graph.capture_begin()
    x = torch.zeros(2, device="vdev")
    with torch.vdev.graph(graph):
        torch._foreach_add_([x], 1.0)
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with torch.vdev.graph(graph):
            pass
    with pytest.raises(ValueError, match="capture_error_mode"):
        torch.vdev.VDEVGraph().capture_begin(capture_error_mode="loose")
    graph.reset()
    with torch.vdev.graph(graph):  # captures again after reset()
        torch._foreach_add_([x], 5.0)
    graph.replay()
    assert_close(x.cpu(), torch.full((2,), 5.0))


class _QueuedScale(torch.autograd.Function):
    """out = x * w, forward and backward written with queued kernels only (copies and
    in-place foreach ops), so both are capturable today."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        out = torch.empty_like(x)
        out.copy_(x)
        torch._foreach_mul_([out], [w])
        return out

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad_x = torch.empty_like(grad)
        grad_x.copy_(grad)
        torch._foreach_mul_([grad_x], [w])
        grad_w = torch.empty_like(grad)
        grad_w.copy_(grad)
        torch._foreach_mul_([grad_w], [x])
        return grad_x, grad_w


class _ScaleModule(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 2.0, size))

    def forward(self, x):
        return _QueuedScale.apply(x, self.weight)


def test_make_graphed_callables_replays_forward_and_backward():
    size = 16
    module = _ScaleModule(size).to("vdev")
    reference = _ScaleModule(size)
    sample = torch.randn(size, device="vdev", requires_grad=True)
    graphed = torch.vdev.make_graphed_callables(module, (sample,))
    assert graphed is module
    weight_grads = []
    for seed in range(3):
        inputs = torch.randn(size, generator=torch.Generator().manual_seed(seed))
        vdev_inputs = inputs.to("vdev").requires_grad_()
        cpu_inputs = inputs.clone().requires_grad_()
        output = graphed(vdev_inputs)
        expected = reference(cpu_inputs)
        assert_close(output.detach().cpu(), expected.detach())
        upstream = torch.linspace(-1.0, 1.0, size)
        output.backward(upstream.to("vdev"))
        expected.backward(upstream)
        assert_close(vdev_inputs.grad.cpu(), cpu_inputs.grad)
        weight_grads.append(module.weight.grad.cpu().clone())
        module.weight.grad = None
        assert_close(weight_grads[-1], reference.weight.grad)
        reference.weight.grad = None
    # Out of training mode, the module's own forward runs.
    module.eval()
    assert_close(module(sample).detach().cpu(), reference(sample.detach().cpu()).detach())


def test_make_graphed_callables_functions_share_a_pool():
    weight = torch.linspace(1.0, 2.0, 8, device="vdev")
    first, second = torch.vdev.make_graphed_callables(
        (lambda x: _QueuedScale.apply(x, weight), lambda y: _QueuedScale.apply(y, weight)),
        ((torch.randn(8, device="vdev", requires_grad=True),),
         (torch.randn(8, device="vdev", requires_grad=True),)),
    )
    x = torch.randn(8)
    vdev_x = x.to("vdev").requires_grad_()
    out = second(first(vdev_x))
    out.backward(torch.ones(8, device="vdev"))
    assert_close(out.detach().cpu(), x * weight.cpu() ** 2)
    assert_close(vdev_x.grad.cpu(), weight.cpu() ** 2)
    with pytest.raises(TypeError, match="structure of its sample_args"):
        first(vdev_x, vdev_x)


# ---- native kernels launched on streams ----


def test_replayed_pointwise_ops_equal_eager():
    x = torch.randn(256, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        y = (x * 2 + 1).sin().tanh()
    for _ in range(2):
        x.copy_(torch.randn(256).to("vdev"))
        graph.replay()
        assert_close(y.cpu(), (x.cpu() * 2 + 1).sin().tanh())


def _prepared_ops(a, b, c, ints, halves, out64, transposed):
    """Ops a replay runs on the TensorIterator built at its first replay (ReplayKernel.cpp),
    in the cases that make their CPU loops change it: a CPU scalar operand dropped
    (bfloat16 times a Python number), an output written through a temporary of the
    common dtype (float32 results into a float64 out=), integer promotion, broadcasting,
    a transposed input and in-place ops."""
    results = [
        a + b * 0.5, a - b, a * 3.0, a / (b * b + 1), torch.addcmul(a, b, c, value=0.25),
        torch.addcdiv(a, b, c * c + 1, value=-0.5), a.clamp_max(0.3), a.clamp_min(-0.2),
        torch.maximum(a, b), torch.minimum(a, c), torch.lerp(a, b, 0.3), a.exp(), (a * a).sqrt(),
        (a * a + 1).rsqrt(), -a, a.sigmoid(), a.tanh(), torch.nn.functional.silu(a),
        torch.nn.functional.gelu(a, approximate="tanh"), torch.nn.functional.gelu(b),
        torch.ops.aten.threshold_backward(b, a, 0.0), torch.ops.aten.silu_backward(b, a),
        torch.ops.aten.gelu_backward(b, a, approximate="tanh"), torch.ops.aten.sigmoid_backward(b, a),
        torch.ops.aten.tanh_backward(b, a), ints * 1.5 + ints, halves * 0.75, a + b[:1], transposed * 2 + a,
    ]
    torch.add(a, b, out=out64)
    in_place = a.clone()
    in_place.mul_(b).add_(c, alpha=2).sub_(0.5).clamp_max_(1.0).addcmul_(b, c).neg_()
    return results + [out64, in_place]


def test_replayed_prepared_pointwise_ops_equal_eager_cpu_on_new_inputs():
    def inputs(seed, device):
        generator = torch.Generator().manual_seed(seed)
        a, b, c = (torch.randn(8, 8, generator=generator) for _ in range(3))
        ints = torch.randint(-5, 5, (8, 8), generator=generator)
        return [t.to(device) for t in (a, b, c, ints, a.to(torch.bfloat16))]

    static = inputs(0, "vdev")
    transposed = torch.empty(8, 8, device="vdev").t()
    out64 = torch.empty(8, 8, dtype=torch.float64, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        transposed.copy_(static[1].t())
        results = _prepared_ops(*static, out64, transposed)
    for seed in (1, 2, 3):
        fresh = inputs(seed, "cpu")
        for s, f in zip(static, fresh):
            s.copy_(f.to("vdev"))
        graph.replay()
        expected = _prepared_ops(*fresh, torch.empty(8, 8, dtype=torch.float64), fresh[1].t())
        for result, want in zip(results, expected):
            assert result.dtype == want.dtype
            assert_close(result.cpu(), want)


def test_random_ops_draw_fresh_numbers_each_replay_and_seeded_replays_repeat():
    graph = torch.vdev.VDEVGraph()
    static_input = torch.ones(16, device="vdev")
    with torch.vdev.graph(graph):
        sample = torch.rand(16, device="vdev")
        noise = torch.randn(16, device="vdev")
        dropped = torch.nn.functional.dropout(static_input, 0.5)

    def replays():
        values = []
        for _ in range(3):
            graph.replay()
            values.append((sample.cpu(), noise.cpu(), dropped.cpu()))
        return values

    torch.manual_seed(1)
    first = replays()
    assert not torch.equal(first[0][0], first[1][0]) and not torch.equal(first[1][0], first[2][0])
    # Each replay draws what the same ops draw from a CPU generator continuing the seed.
    torch.manual_seed(1)
    for replayed in first:
        expected = (
            torch.rand(16),
            torch.randn(16),
            torch.nn.functional.dropout(torch.ones(16), 0.5),
        )
        for got, want in zip(replayed, expected):
            assert torch.equal(got, want)
    torch.manual_seed(1)
    for replayed, again in zip(first, replays()):
        assert all(torch.equal(a, b) for a, b in zip(replayed, again))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)
    )


def test_replayed_mlp_forward_equals_eager():
    model = _mlp().to("vdev")
    static_input = torch.randn(16, 32, device="vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.no_grad(), torch.vdev.graph(graph):
        static_output = model(static_input)
    for _ in range(2):
        new_input = torch.randn(16, 32)
        static_input.copy_(new_input.to("vdev"))
        graph.replay()
        assert_close(static_output.cpu(), _mlp()(new_input).detach())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "capturable-foreach"])
def test_replayed_training_step_equals_eager(fused):
    model = _mlp().to("vdev")
    reference = _mlp()
    options = dict(lr=0.01, capturable=not fused, foreach=not fused, fused=fused or None)
    optimizer = torch.optim.Adam(model.parameters(), **options)
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    static_input = torch.randn(16, 32, device="vdev")
    static_target = torch.randn(16, 8, device="vdev")

    def step(net, opt, inputs, target):
        opt.zero_grad(set_to_none=False)
        ((net(inputs) - target) ** 2).mean().backward()
        opt.step()

    warm_up = torch.vdev.Stream()
    warm_up.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(warm_up):
        step(model, optimizer, static_input, static_target)
    torch.vdev.current_stream().wait_stream(warm_up)
    step(reference, reference_optimizer, static_input.cpu(), static_target.cpu())
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        step(model, optimizer, static_input, static_target)
    for _ in range(3):
        inputs, target = torch.randn(16, 32), torch.randn(16, 8)
        static_input.copy_(inputs.to("vdev"))
        static_target.copy_(target.to("vdev"))
        graph.replay()
        step(reference, reference_optimizer, inputs, target)
    for p, r in zip(model.parameters(), reference.parameters()):
        assert_close(p.detach().cpu(), r.detach(), rtol=1e-4, atol=1e-5)


def test_make_graphed_callables_module_with_autograd():
    model = _mlp().to("vdev")
    reference = _mlp()
    sample = torch.randn(16, 32, device="vdev", requires_grad=True)
    graphed = torch.vdev.make_graphed_callables(model, (sample,))
    for _ in range(2):
        inputs = torch.randn(16, 32)
        vdev_inputs = inputs.to("vdev").requires_grad_()
        cpu_inputs = inputs.clone().requires_grad_()
        graphed(vdev_inputs).square().sum().backward()
        reference(cpu_inputs).square().sum().backward()
        assert_close(vdev_inputs.grad.cpu(), cpu_inputs.grad, rtol=1e-4, atol=1e-5)
        for p, r in zip(model.parameters(), reference.parameters()):
            assert_close(p.grad.cpu(), r.grad, rtol=1e-4, atol=1e-5)
            p.grad = None
            r.grad = None


def _benchmark_steps():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import models

    return models


@pytest.mark.parametrize(
    "name, options",
    [
        ("mlp", {"dropout": 0.0}),
        ("mlp", {}),
        ("cnn", {"capturable": True}),
        ("transformer", {"dropout": 0.0, "capturable": True}),
        ("transformer", {"capturable": True}),
    ],
    ids=["mlp_without_dropout", "mlp_with_dropout", "cnn", "transformer_without_dropout", "transformer_with_dropout"],
)
def test_replayed_model_training_steps_equal_eager_vdev_and_cpu(name, options):
    """benchmarks/models.py's steps (ReLU, GELU, dropout, convolution, batch and layer
    norm, embeddings, flash and math attention; SGD, capturable foreach Adam and AdamW):
    replays continue the sequence of eager vdev and eager CPU steps, dropout's random
    numbers included when the generators are seeded alike."""
    make = _benchmark_steps().TRAINING_STEPS[name]
    replayed, eager = make("vdev", **options), make("vdev", **options)
    # The CPU's optimizers are not capturable; their arithmetic is the same.
    cpu = make("cpu", **{key: value for key, value in options.items() if key != "capturable"})
    # Dropout draws from the vdev generator, which both vdev steps share: the replayed
    # steps run first, then the eager ones from the same seed.
    torch.manual_seed(1)
    side = torch.vdev.Stream()
    side.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(side):
        for _ in range(3):
            replayed().detach()
    torch.vdev.current_stream().wait_stream(side)
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        static_loss = replayed()
    losses = {"replay": [], "vdev": [], "cpu": []}
    for _ in range(3):
        graph.replay()
        losses["replay"].append(static_loss.detach().cpu())
    torch.manual_seed(1)
    for step in range(6):  # the replayed model's warm-up steps (the capture ran none), then its replays
        vdev_loss, cpu_loss = eager().detach().cpu(), cpu().detach()
        if step >= 3:
            losses["vdev"].append(vdev_loss)
            losses["cpu"].append(cpu_loss)
    assert_close(losses["replay"], losses["vdev"], rtol=1e-4, atol=1e-5)
    assert_close(losses["replay"], losses["cpu"], rtol=1e-4, atol=1e-5)


def test_capturing_a_launch_of_dtypes_not_seen_yet_records_it():
    # The first launch of an op with new dtypes waits for its kernel, but not in a capture.
    a = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float64)
    b = torch.tensor([0.5, 4.0, -1.0], dtype=torch.float64)
    static_a, static_b = a.to("vdev"), b.to("vdev")
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        static_out = torch.logaddexp2(static_a, static_b)
    graph.replay()
    assert_close(static_out.cpu(), torch.logaddexp2(a, b))
