"""torch.func on vdev tensors (grad, vjp, jvp, vmap, jacrev, jacfwd, hessian,
functional_call, model ensembling) and custom autograd.Functions under torch.func,
equal to CPU."""

import torch
import torch.func
from torch.autograd import Function
from torch.testing import assert_close

DEVICES = ("cpu", "vdev")


def on_each_device(compute, *sources):
    """compute(*sources moved to device) for CPU and vdev; vdev's outputs, checked to be
    vdev tensors, are compared with CPU's."""
    results = {}
    for device in DEVICES:
        results[device] = compute(*(source.to(device) for source in sources))
    device_leaves = torch.utils._pytree.tree_leaves(results["vdev"])
    cpu_leaves = torch.utils._pytree.tree_leaves(results["cpu"])
    assert len(device_leaves) == len(cpu_leaves) > 0
    for device_result, cpu_result in zip(device_leaves, cpu_leaves):
        assert device_result.device.type == "vdev"
        assert_close(device_result.cpu(), cpu_result)


def loss(weight, x):
    return (x @ weight).tanh().pow(2).sum() + weight.sin().sum()


def vector_function(x):
    return torch.stack([x.sin().sum(), (x * x.roll(1)).sum(), x.exp().mean()])


def test_grad_and_grad_and_value():
    weight, x = torch.randn(4, 3, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    on_each_device(lambda w, x: torch.func.grad(loss, argnums=(0, 1))(w, x), weight, x)
    on_each_device(lambda w, x: torch.func.grad_and_value(loss)(w, x), weight, x)


def test_vjp_and_jvp():
    x, cotangent = torch.randn(6, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    tangent = torch.randn(6, dtype=torch.float64)

    def vjp(x, cotangent):
        output, pullback = torch.func.vjp(vector_function, x)
        return output, pullback(cotangent)

    on_each_device(vjp, x, cotangent)
    on_each_device(lambda x, t: torch.func.jvp(vector_function, (x,), (t,)), x, tangent)


def test_vmap_with_in_dims_out_dims_and_nesting():
    batch, other = torch.randn(3, 4, 5), torch.randn(5, 4)
    on_each_device(lambda b, o: torch.func.vmap(torch.mv, in_dims=(0, None))(b, o[:, 0]), batch, other)
    on_each_device(lambda b, o: torch.func.vmap(lambda m: m @ o, out_dims=1)(b), batch, other)
    on_each_device(lambda b: torch.func.vmap(torch.func.vmap(torch.dot))(b, b), batch)


def test_vmap_randomness_follows_the_seed_like_cpu():
    def sample(x):
        torch.manual_seed(7)
        return torch.func.vmap(lambda row: row + torch.randn(4, device=row.device),
                               randomness="different")(x)

    on_each_device(sample, torch.zeros(3, 4))


def test_jacrev_jacfwd_hessian():
    x = torch.randn(6, dtype=torch.float64)
    on_each_device(torch.func.jacrev(vector_function), x)
    on_each_device(torch.func.jacfwd(vector_function), x)
    on_each_device(torch.func.hessian(lambda x: vector_function(x).sum()), x)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))


def test_functional_call_with_parameters_and_buffers():
    x = torch.randn(5, 4)

    def run(x):
        model = make_model(0).to(x.device)
        replacement = {name: value * 0.5 for name, value in model.state_dict().items()
                       if value.is_floating_point()}
        output = torch.func.functional_call(model, replacement, (x,))  # updates running stats
        model.eval()  # a grad transform may not mutate captured buffers
        grads = torch.func.grad(
            lambda params: torch.func.functional_call(model, params, (x,)).sum())(
                dict(model.named_parameters()))
        return output, grads, model.state_dict()

    on_each_device(run, x)


def test_model_ensembling_with_stack_module_state_and_vmap():
    x = torch.randn(6, 4)

    def run(x):
        models = [make_model(seed).eval().to(x.device) for seed in range(3)]
        params, buffers = torch.func.stack_module_state(models)
        base = make_model(0).eval().to("meta")

        def one_model(params, buffers):
            return torch.func.functional_call(base, (params, buffers), (x,))

        return torch.func.vmap(one_model)(params, buffers)

    on_each_device(run, x)


class ScaledExp(Function):
    """The torch.func-compatible form: forward without ctx, setup_context, a vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale):
        return torch.exp(x) * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        return grad_output * output, None

    @staticmethod
    def jvp(ctx, x_tangent, _):
        (output,) = ctx.saved_tensors
        return x_tangent * output


def test_custom_function_under_torch_func_transforms():
    x = torch.randn(3, 4, dtype=torch.float64)
    scaled = lambda x: ScaledExp.apply(x, 2.0)
    on_each_device(lambda x: torch.func.grad(lambda x: scaled(x).sum())(x), x)
    on_each_device(lambda x: torch.func.vmap(scaled)(x), x)
    on_each_device(lambda x: torch.func.jacrev(scaled)(x[0]), x)
    on_each_device(lambda x: torch.func.jacfwd(scaled)(x[0]), x)
    on_each_device(lambda x: torch.func.vmap(torch.func.grad(lambda r: scaled(r).sum()))(x), x)
