"""torch.compile on vdev: Dynamo's device interface, Inductor's C++ kernels on vdev
memory (Python and C++ wrappers), and AOTInductor packages run from Python and C++.

Every compiled result is compared with the same code run eagerly on vdev and on the
CPU. Compiling is slow on small machines, so graphs are small and the compiled
functions are shared within the module. Inductor's cache directory is a fresh one per
test session (conftest.py), so the results do not depend on earlier runs.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_vdev

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from models import TRAINING_STEPS  # noqa: E402
from test_cpp import _build, _results  # noqa: E402

VDEV = torch_vdev.BACKEND_NAME


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, **tolerances) -> None:
    torch.testing.assert_close(actual.cpu(), expected.cpu(), **tolerances)


def _check_against_eager(fn, *cpu_inputs, compile_options=None, **tolerances):
    """Runs `fn` compiled on vdev and eagerly on vdev and on the CPU; returns the
    compiled result after checking it against both."""
    vdev_inputs = [x.to(VDEV) for x in cpu_inputs]
    compiled = torch.compile(fn, fullgraph=True, **(compile_options or {}))(*vdev_inputs)
    assert compiled.device.type == VDEV
    _assert_close(compiled, fn(*vdev_inputs), **tolerances)
    _assert_close(compiled, fn(*cpu_inputs), **tolerances)
    return compiled


# --- Dynamo ------------------------------------------------------------------------


def test_dynamo_knows_the_vdev_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device(VDEV)
    assert interface is get_interface_for_device(f"{VDEV}:1")
    assert interface.device_count() == torch.vdev.device_count()
    assert interface.Stream is torch.vdev.Stream and interface.Event is torch.vdev.Event
    previous = interface.exchange_device(1)
    assert torch.vdev.current_device() == 1
    interface.maybe_exchange_device(previous)
    assert torch.vdev.current_device() == previous
    assert interface.get_raw_stream(0) == torch.vdev.current_stream(0).stream_id
    assert interface.get_device_properties(0).total_memory == torch.vdev.get_device_properties(0).total_memory


def test_synchronize_and_streams_inside_compiled_functions():
    def fn(x):
        torch.vdev.synchronize()
        y = x * 2
        torch.accelerator.synchronize()
        with torch.vdev.stream(torch.vdev.current_stream()):
            z = y + 1
        return z.sum(0)

    x = torch.randn(8, 4)
    compiled = torch.compile(fn)(x.to(VDEV))
    _assert_close(compiled, (x * 2 + 1).sum(0))


# --- Inductor: generated C++ kernels on vdev memory ----------------------------------


def test_pointwise_chain():
    _check_against_eager(lambda x, y: (x.sin() * y + 1).relu().exp() - y.tanh(), torch.randn(64, 33), torch.randn(64, 33))


def _row_mix(t):
    return (t.sin() + 1).sum(1) * t.cos().amax(1)


@pytest.fixture(scope="module", params=[False, True], ids=["python_wrapper", "cpp_wrapper"])
def compiled_row_mix(request):
    """_row_mix compiled with a Python or a C++ wrapper (two generated kernels)."""
    from torch._dynamo.utils import counters

    # Dynamo keeps compiled code per function code, whatever Inductor's config: the
    # other wrapper's code is forgotten, so this one is compiled.
    torch._dynamo.reset()
    compiled = torch.compile(_row_mix)
    misses = counters["inductor"]["fxgraph_cache_miss"]
    with torch._inductor.config.patch(cpp_wrapper=request.param):
        compiled(torch.zeros(64, 64, device=VDEV))  # compiles
    assert counters["inductor"]["fxgraph_cache_miss"] == misses + 1
    return compiled


def test_compiled_kernels_wait_for_work_queued_on_the_stream(compiled_row_mix):
    x = torch.zeros(64, 64, device=VDEV)
    torch.vdev.synchronize()
    torch.vdev._sleep(100)  # the copy below stays queued behind this kernel
    ones = torch.ones(64, 64)
    x.copy_(ones.to(VDEV))
    _assert_close(compiled_row_mix(x), _row_mix(ones))


# Long enough for a compiled call to return while the stream still sleeps.
BUSY_MS = 500


def _stream_busy_after(call):
    """Whether the current stream is still busy with a sleep queued before `call`, once `call` returns."""
    torch.vdev.synchronize()
    torch.vdev._sleep(BUSY_MS)
    result = call()
    busy = not torch.vdev.current_stream().query()
    return result, busy


def test_compiled_kernels_launch_on_the_stream_without_the_host_waiting(compiled_row_mix):
    x = torch.randn(64, 64)
    vdev_x = x.to(VDEV)
    result, busy = _stream_busy_after(lambda: compiled_row_mix(vdev_x))
    assert busy
    _assert_close(result, _row_mix(x))


def test_generated_kernels_are_profiled_as_vdev_kernels_of_their_operator(compiled_row_mix):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    vdev_x = x.to(VDEV)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        result = compiled_row_mix(vdev_x)
    _assert_close(result, _row_mix(x))
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and "cpp_fused" in e.name]
    assert kernels and all(k.name.startswith(f"{VDEV}_kernel[cpp_fused") for k in kernels)
    # Each is launched by a CPU operator named after the kernel, as Triton kernels are on
    # CUDA, and starts after it (queued on the stream; the profiler's CPU operator times
    # come from an approximate clock, too coarse under load to compare the ends).
    launching = {
        e.name: e for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith("cpp_fused")
    }
    for kernel in kernels:
        operator = launching[kernel.name[len(f"{VDEV}_kernel[") : -1]]
        assert [k.name for k in operator.kernels] == [kernel.name]
        assert operator.time_range.start <= kernel.time_range.start <= kernel.time_range.end


def test_reductions():
    def fn(x):
        return x.sum(1), x.amax(0), x.mean(), x.var(1), x.argmax(1)

    x = torch.randn(37, 129)
    vdev_results = torch.compile(fn)(x.to(VDEV))
    for compiled, eager_vdev, eager_cpu in zip(vdev_results, fn(x.to(VDEV)), fn(x)):
        assert compiled.device.type == VDEV
        _assert_close(compiled, eager_vdev)
        _assert_close(compiled, eager_cpu)


def test_fused_softmax():
    _check_against_eager(lambda x: torch.softmax(x * 0.5, dim=-1) * 2, torch.randn(16, 257))


def test_buffers_come_from_the_vdev_caching_allocator():
    def fn(x):
        return (x.exp() + 1).sum(0), x.cos()

    x = torch.randn(256, 64, device=VDEV)
    compiled = torch.compile(fn)
    compiled(x)  # compiles
    before = torch.vdev.memory_stats()["allocation.all.allocated"]
    total, cosine = compiled(x)
    # The outputs (and any intermediate buffer) were allocated by vdev's allocator.
    assert torch.vdev.memory_stats()["allocation.all.allocated"] - before >= 2
    assert total.device.type == cosine.device.type == VDEV
    _assert_close(cosine, x.cpu().cos())


def test_matmul_bias_activation_runs_vdev_matmul_kernel():
    calls = []

    def count_mm(*args, **kwargs):
        calls.append(1)
        return NotImplemented  # the op's own vdev kernel runs it

    def fn(x, weight, bias):
        return F.gelu(x @ weight + bias)

    inputs = torch.randn(32, 48), torch.randn(48, 24), torch.randn(24)
    with torch_vdev.kernels({torch.ops.aten.addmm: count_mm, torch.ops.aten.mm: count_mm}):
        _check_against_eager(fn, *inputs, rtol=1e-5, atol=1e-5)
    assert calls, "the compiled matmul did not reach vdev's kernel"


def test_custom_vdev_op_runs_as_an_extern_kernel():
    def fn(x, y):
        return torch.ops.vdev.scaled_add(x.relu(), y, alpha=0.5).sigmoid()

    x, y = torch.randn(10, 7), torch.randn(10, 7)
    vdev_inputs = (x.to(VDEV), y.to(VDEV))
    compiled = torch.compile(fn, fullgraph=True)(*vdev_inputs)
    _assert_close(compiled, fn(*vdev_inputs))
    _assert_close(compiled, (x.relu() + 0.5 * y).sigmoid())


@pytest.mark.parametrize("input_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("weight_format", [torch.contiguous_format, torch.channels_last])
def test_traced_convolutions_have_the_layout_vdevs_kernel_returns(input_format, weight_format):
    # Graphs plan the strides FakeTensor gives a convolution's output and gradients;
    # they must be those vdev's kernel returns (the CPU's: channels-last stays so).
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(3, 4, 8, 8).to(memory_format=input_format)
    weight = torch.randn(6, 4, 3, 3).to(memory_format=weight_format)

    def run(x, weight):
        out = torch.ops.aten.convolution(x, weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        grads = torch.ops.aten.convolution_backward(
            out, x, weight, [6], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]
        )
        return [out.stride(), grads[0].stride(), grads[1].stride()]

    fake_mode = FakeTensorMode()
    fake_x, fake_weight = fake_mode.from_tensor(x.to(VDEV)), fake_mode.from_tensor(weight.to(VDEV))
    with fake_mode:
        traced = run(fake_x, fake_weight)
    assert traced == run(x.to(VDEV), weight.to(VDEV)) == run(x, weight)


def test_convolution_graphs_get_the_cpus_layouts():
    # vdev's convolutions run the CPU's (mkldnn) kernels: Inductor plans vdev
    # convolution graphs as the CPU's, channels-last, with the same buffers.
    import re

    from torch._inductor.utils import run_and_get_code

    def fn(x, weight, bias):
        return F.conv2d(F.conv2d(x, weight, bias, padding=1).relu(), weight, bias, padding=1).sum((2, 3))

    # A training graph of small convolutions: Inductor's heuristic for other devices
    # keeps it contiguous.
    inputs = torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3), torch.randn(4)
    layouts = {}
    for device in ("cpu", VDEV):
        x, weight, bias = [t.to(device).requires_grad_() for t in inputs]
        result, codes = run_and_get_code(torch.compile(fn), x, weight, bias)
        _assert_close(result, fn(*inputs), rtol=1e-4, atol=1e-4)
        layouts[device] = re.findall(r"empty_strided_\w+\((\(.*?\)), (\(.*?\)), torch\.\w+", "".join(codes))
    assert ("(2, 4, 8, 8)", "(256, 1, 32, 4)") in layouts["cpu"]  # channels-last
    assert layouts[VDEV] == layouts["cpu"]


def test_dynamic_shapes():
    def fn(x):
        return (x * x.sum(-1, keepdim=True)).softmax(-1)

    explicit = torch.compile(fn, dynamic=True)
    automatic = torch.compile(fn)  # recompiles with dynamic sizes on the second size
    for rows, columns in ((4, 8), (9, 8), (5, 31)):
        x = torch.randn(rows, columns)
        for compiled in (explicit, automatic):
            result = compiled(x.to(VDEV))
            assert result.shape == (rows, columns) and result.device.type == VDEV
            _assert_close(result, fn(x))


def test_max_autotune_no_cudagraphs():
    _check_against_eager(
        lambda x, w: torch.relu(x @ w) + 1,
        torch.randn(16, 32),
        torch.randn(32, 8),
        compile_options={"mode": "max-autotune-no-cudagraphs"},
        rtol=1e-5,
        atol=1e-5,
    )


def test_autocast_inside_compiled_function():
    def fn(x, w):
        with torch.autocast(VDEV, dtype=torch.bfloat16):
            product = x @ w
            return product, product.float().softmax(-1)

    x, w = torch.randn(8, 16, device=VDEV), torch.randn(16, 4, device=VDEV)
    compiled = torch.compile(fn)(x, w)
    eager = fn(x, w)
    assert compiled[0].dtype == eager[0].dtype == torch.bfloat16
    for actual, expected in zip(compiled, eager):
        _assert_close(actual, expected)


def test_two_vdev_devices_and_cpu_moves():
    def fn(a, b, host):
        on_a = a.sin() + b.to(a.device) + host.to(a.device)
        return on_a, (b * 2).cos(), on_a.sum().cpu()

    a, b, host = torch.randn(6, 5), torch.randn(6, 5), torch.randn(6, 5)
    first, second, total = torch.compile(fn)(a.to(f"{VDEV}:0"), b.to(f"{VDEV}:1"), host)
    assert first.device == torch.device(VDEV, 0)
    assert second.device == torch.device(VDEV, 1)
    assert total.device.type == "cpu"
    _assert_close(first, a.sin() + b + host)
    _assert_close(second, (b * 2).cos())
    _assert_close(total, (a.sin() + b + host).sum())


def test_compiled_dropout_draws_like_compiled_cpu():
    # Inductor generates its own random numbers (not eager's); seeded alike, vdev draws
    # what the CPU draws, since a vdev generator keeps a CPU generator's state. The
    # backward pass applies the mask the forward pass drew.
    def fn(x):
        return F.dropout(x, 0.5, training=True) * 3

    x = torch.randn(64, 96)
    results, grads = {}, {}
    for device in ("cpu", VDEV):
        leaf = x.to(device).detach().requires_grad_()
        torch.manual_seed(7)
        result = torch.compile(fn)(leaf)
        result.sum().backward()  # the compiled backward graph
        results[device], grads[device] = result.detach(), leaf.grad
    kept = results["cpu"] != 0
    assert 0.3 < kept.float().mean() < 0.7
    _assert_close(results[VDEV], results["cpu"])
    _assert_close(grads[VDEV], grads["cpu"])
    _assert_close(grads["cpu"], kept * 6.0)


# --- mode="reduce-overhead": compiled graphs captured and replayed as vdev graphs ------


def _graph_counts() -> tuple:
    from torch._dynamo.utils import counters

    from torch_vdev._compiled_graphs import CAPTURES_COUNTER, REPLAYS_COUNTER

    return counters["inductor"][CAPTURES_COUNTER], counters["inductor"][REPLAYS_COUNTER]


def _skips() -> int:
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


def test_reduce_overhead_replays_a_pointwise_chain():
    def fn(x, y):
        return (x.sin() * y + 1).relu().exp() - y.tanh()

    compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
    captures, replays = _graph_counts()
    for _ in range(4):  # a warm-up run, a capture, then replays, each on new inputs
        x, y = torch.randn(64, 33), torch.randn(64, 33)
        _assert_close(compiled(x.to(VDEV), y.to(VDEV)), fn(x, y))
    assert _graph_counts() == (captures + 1, replays + 3)


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
        )

    def forward(self, x):
        return torch.log_softmax(self.layers(x), dim=-1)


def test_reduce_overhead_replays_mlp_inference_and_training_steps():
    torch.manual_seed(0)
    reference = _Mlp()
    model = _Mlp().to(VDEV)
    model.load_state_dict(reference.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (reference, model)]
    compiled = torch.compile(model, mode="reduce-overhead")
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(4)]

    with torch.no_grad():
        captures, replays = _graph_counts()
        for x, _ in batches:
            _assert_close(compiled(x.to(VDEV)), reference(x), atol=1e-5, rtol=1e-5)
        assert _graph_counts() == (captures + 1, replays + 3)

    captures, replays = _graph_counts()
    for x, target in batches:  # forward and backward graphs, each replayed twice
        losses = []
        for net, optimizer, device in zip((reference, compiled), optimizers, ("cpu", VDEV)):
            loss = F.nll_loss(net(x.to(device)), target.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach().cpu())
        _assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-5)
    assert _graph_counts() == (captures + 2, replays + 6)
    for trained, expected in zip(model.parameters(), reference.parameters()):
        _assert_close(trained, expected, atol=1e-5, rtol=1e-5)


def test_reduce_overhead_replays_random_ops_drawing_fresh_numbers():
    # Inductor's random seeds come from a random op launched on the stream: captured, a
    # replay draws new seeds, the same ones the graph-less compiled code draws.
    def fn(x):
        return F.dropout(x.sin(), 0.5, training=True) * 2

    x = torch.randn(64, 33, device=VDEV)
    without_graphs = torch.compile(fn)
    with_graphs = torch.compile(fn, mode="reduce-overhead")
    captures, replays = _graph_counts()
    results = []
    for seed in range(4):
        torch.manual_seed(seed)
        results.append(with_graphs(x).cpu())
        torch.manual_seed(seed)
        _assert_close(results[-1], without_graphs(x))
    assert _graph_counts() == (captures + 1, replays + 3)
    assert not torch.equal(results[2], results[3])


def test_reduce_overhead_runs_without_graphs_what_a_capture_refuses():
    # aten::mode has no meta function, so vdev runs it on the calling thread, which a
    # capture refuses (Inductor calls it as a fallback kernel): the graph runs compiled
    # without graphs.
    def fn(x):
        return torch.mode(x, -1).values.sin()

    x = torch.randn(2, 4, 8, device=VDEV)
    with_graphs = torch.compile(fn, mode="reduce-overhead")
    with pytest.warns(UserWarning, match=r"skipping vdev graphs due to aten::mode: "
                      r"operation not permitted when stream is capturing"):
        for _ in range(3):
            _assert_close(with_graphs(x), fn(x.cpu()))


def test_reduce_overhead_tells_why_a_graph_with_a_cpu_node_runs_without_graphs():
    def fn(x, c):
        return x.sin() + c.to(x.device).cos()

    compiled = torch.compile(fn, mode="reduce-overhead")
    x, c = torch.randn(8), torch.randn(8)
    skips = _skips()
    with pytest.warns(UserWarning, match=r"skipping vdev graphs due to cpu device \(arg1_1\)"):
        for _ in range(3):
            _assert_close(compiled(x.to(VDEV), c), fn(x, c))
    assert _skips() == skips + 1


def test_reduce_overhead_tells_why_a_graph_mutating_its_input_runs_without_graphs():
    # A replay would mutate the graph's static copy of the input, not the caller's
    # tensor: the graph runs without graphs, as Inductor skips CUDA graphs.
    def fn(x):
        x.mul_(2)
        return x.sin()

    compiled = torch.compile(fn, mode="reduce-overhead")
    skips, counts = _skips(), _graph_counts()
    with pytest.warns(UserWarning, match=r"(?s)skipping vdev graphs due to mutated inputs \(1 instances\).*x\.mul_\(2\)"):
        for _ in range(3):
            x = torch.randn(8)
            vdev_x = x.to(VDEV)
            _assert_close(compiled(vdev_x), fn(x))
            _assert_close(vdev_x, x)
    assert _skips() == skips + 1
    assert _graph_counts() == counts


def _cpp_wrapper_graphs(fn, **config):
    with torch._inductor.config.patch(cpp_wrapper=True, **config):
        compiled = torch.compile(fn, mode="reduce-overhead")
        captures, replays = _graph_counts()
        for _ in range(4):
            x = torch.randn(64, 33)
            _assert_close(compiled(x.to(VDEV)), fn(x))
    return _graph_counts()[0] - captures, _graph_counts()[1] - replays


def test_reduce_overhead_with_cpp_wrapper_replays_vdev_graphs():
    # Without graph partitions, which C++ wrappers do not support, the C++ wrapper's
    # launches are captured and replayed.
    assert _cpp_wrapper_graphs(lambda x: (x.sin() + 1).relu() * x.cos(), graph_partition=False) == (1, 3)


def test_reduce_overhead_with_cpp_wrapper_and_graph_partition_tells_why_it_runs_without_graphs(caplog):
    # Inductor turns graphs off for C++ wrappers with graph partitions, on every device,
    # and logs why.
    skips = _skips()
    with caplog.at_level("WARNING"):
        assert _cpp_wrapper_graphs(lambda x: (x.cos() - 1).relu() * x.sin(), graph_partition=True) == (0, 0)
    assert "skipping cudagraphs due to cpp-wrapper does not support graph partition yet" in caplog.text
    assert _skips() == skips + 1


# --- Training: forward, backward and optimizer step compiled --------------------------


# Smaller instances of the benchmark's models where compiling the full one is slow.
SMALL_MODELS = {"transformer": {"layers": 1}}


def _losses(step, count=3):
    return torch.stack([step().detach().cpu() for _ in range(count)])


@pytest.mark.parametrize("name", sorted(TRAINING_STEPS))
def test_compiled_training_step_matches_reference(name):
    # Random ops (dropout) draw with eager's random numbers here (fallback_random), so
    # compiled steps match eager ones; Inductor's own are checked above.
    def make_step(device):
        return TRAINING_STEPS[name](device, **SMALL_MODELS.get(name, {}))

    with torch._inductor.config.patch(fallback_random=True):
        compiled_step = torch.compile(make_step(VDEV))
        torch.manual_seed(1)  # the step's generators: vdev's here, the CPU's below
        compiled_losses = _losses(compiled_step)
    for device in (VDEV, "cpu"):
        eager_step = make_step(device)
        torch.manual_seed(1)
        _assert_close(compiled_losses, _losses(eager_step), rtol=1e-4, atol=1e-5)
    assert compiled_losses[-1] < compiled_losses[0]


def test_compiled_optimizer_step():
    def train(device, compile_step):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        step = torch.compile(optimizer.step) if compile_step else optimizer.step
        inputs = torch.randn(20, 12).to(device)
        for _ in range(3):
            optimizer.zero_grad()
            model(inputs).square().mean().backward()
            step()
        return [parameter.detach().cpu() for parameter in model.parameters()]

    compiled = train(VDEV, compile_step=True)
    for reference in (train(VDEV, compile_step=False), train("cpu", compile_step=False)):
        for actual, expected in zip(compiled, reference):
            _assert_close(actual, expected, rtol=1e-4, atol=1e-5)


# --- C++ wrapper and AOTInductor ---------------------------------------------------


class SmallNet(torch.nn.Module):
    """Matmuls, a convolution and vdev's own operator: extern kernels, around fused C++ kernels."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.linear = torch.nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        features = F.silu(self.conv(x)).flatten(1)
        logits = self.linear(features)
        return torch.ops.vdev.scaled_add(logits, logits.softmax(-1), alpha=2.0)


@pytest.fixture(scope="module")
def small_net():
    torch.manual_seed(3)
    model = SmallNet().eval()
    inputs = torch.randn(5, 2, 6, 6)
    with torch.no_grad():
        expected = model(inputs)
    return model, inputs, expected


def test_cpp_wrapper(small_net):
    model, inputs, expected = small_net
    vdev_model = SmallNet().to(VDEV).eval()
    vdev_model.load_state_dict(model.state_dict())
    with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=True):
        result = torch.compile(vdev_model)(inputs.to(VDEV))
        eager = vdev_model(inputs.to(VDEV))
    assert result.device.type == VDEV
    _assert_close(result, eager, rtol=1e-5, atol=1e-5)
    _assert_close(result, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def aoti_package(small_net, tmp_path_factory):
    model, inputs, _ = small_net
    vdev_model = SmallNet().to(VDEV).eval()
    vdev_model.load_state_dict(model.state_dict())
    exported = torch.export.export(vdev_model, (inputs.to(VDEV),))
    path = tmp_path_factory.mktemp("aoti") / "small_net.pt2"
    return torch._inductor.aoti_compile_and_package(
        exported,
        package_path=str(path),
        inductor_configs={"aot_inductor.package_constants_in_so": False},
    )


def _weights(package, model: torch.nn.Module, device: str) -> dict:
    state = model.state_dict()
    return {name: state[name].to(device) for name in package.get_constant_fqns()}


def test_aoti_package_runs_on_vdev_from_python(small_net, aoti_package):
    model, inputs, expected = small_net
    loaded = torch._inductor.aoti_load_package(aoti_package)
    loaded.load_constants(_weights(loaded, model, VDEV), check_full_update=True, user_managed=True)
    # Its kernels are launched on the stream as cpp_wrapper's are (the same C++ wrapper
    # code); the host waits here anyway, for the convolution, which runs on the calling thread.
    result = loaded(inputs.to(VDEV))
    assert result.device == torch.device(VDEV, 0)
    _assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_aoti_refuses_to_package_vdev_weights_with_a_clear_error(small_net):
    model, inputs, _ = small_net
    vdev_model = SmallNet().to(VDEV).eval()
    exported = torch.export.export(vdev_model, (inputs.to(VDEV),))
    with pytest.raises(Exception, match=r"package_constants_in_so': False"):
        torch._inductor.aoti_compile_and_package(exported)


def test_aoti_package_runs_on_vdev_from_cpp(small_net, aoti_package, tmp_path_factory):
    model, inputs, expected = small_net
    loaded = torch._inductor.aoti_load_package(aoti_package)
    data = tmp_path_factory.mktemp("aoti_data")
    tensors = dict(_weights(loaded, model, "cpu"), input=inputs)
    with open(data / "tensors.txt", "w") as listing:
        for name, tensor in tensors.items():
            listing.write(" ".join([name, str(tensor.dim()), *map(str, tensor.shape)]) + "\n")
            tensor.contiguous().numpy().tofile(data / f"{name}.bin")
    program = _build(ROOT / "examples" / "aoti", tmp_path_factory.mktemp("aoti_example")) / "run_package"
    result = subprocess.run([str(program), aoti_package, str(data)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    output = _results(result.stdout)
    assert output["device"] == "vdev:0"
    assert int(output["output_allocated_bytes"]) >= int(output["output_nbytes"]) > 0
    values = torch.tensor([float(value) for value in output["output"].split(",")])
    _assert_close(values, expected.flatten(), rtol=1e-4, atol=1e-5)


def test_inductor_cache_keys_on_torch_vdevs_generated_code():
    # A graph cached by another torch_vdev (other wrappers or C shim) is compiled
    # again, not replayed: vdev's codegen config is part of Inductor's cache key.
    from torch._dynamo.utils import counters

    from torch_vdev import _inductor_config

    def compile_and_run(x):
        torch._dynamo.reset()  # forgets compiled code in memory, not Inductor's cache
        counters.clear()
        result = torch.compile(lambda t: t.cos() * 3 - 1)(x)
        _assert_close(result, x.cpu().cos() * 3 - 1)
        return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]

    x = torch.randn(7, 3, device=VDEV)
    compile_and_run(x)
    assert compile_and_run(x) == (1, 0)
    with _inductor_config.patch(backend_version="0.0.0-other"):
        assert compile_and_run(x) == (0, 1)
    # The sources' hash is keyed on alike (a third compile would show it again).
    from torch._inductor.codegen.common import custom_backend_codegen_configs

    assert custom_backend_codegen_configs[VDEV].save_config_portable(ignore_private_configs=False) == {
        "backend_version": torch_vdev.__version__,
        "codegen_sources_sha256": _inductor_config.codegen_sources_sha256,
    }
