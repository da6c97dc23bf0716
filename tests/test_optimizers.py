"""Foreach and fused optimizer kernels on vdev: native, and equal to CPU."""

import inspect

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl
EXACT = dict(rtol=0, atol=0)


def has_vdev_kernel(op_name):
    return torch._C._dispatch_has_kernel_for_dispatch_key(op_name, "PrivateUse1")


def make_params(device, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (7,), (2, 2, 2)]
    return [torch.randn(shape, generator=generator).to(device).requires_grad_() for shape in shapes]


def run_optimizer(cls, options, device, implementation, steps=4):
    """Parameters and state after `steps` steps with seeded gradients."""
    params = make_params(device)
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
    optimizer = cls(params, **options, **flags[implementation])
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator).to(device)
        optimizer.step()
    state = [
        {key: value.cpu() for key, value in optimizer.state[param].items() if torch.is_tensor(value)}
        for param in params
    ]
    return [param.detach().cpu() for param in params], state


OPTIMIZER_CASES = [
    (torch.optim.Adam, {"lr": 0.01}),
    (torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    (torch.optim.Adam, {"lr": 0.01, "maximize": True, "betas": (0.8, 0.9)}),
    (torch.optim.Adam, {"lr": torch.tensor(0.01)}),
    (torch.optim.AdamW, {"lr": 0.01}),
    (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.3, "amsgrad": True}),
    (torch.optim.AdamW, {"lr": torch.tensor(0.01)}),
    (torch.optim.SGD, {"lr": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.5, "maximize": True}),
    (torch.optim.SGD, {"lr": torch.tensor(0.1), "momentum": 0.9}),
    (torch.optim.Adagrad, {"lr": 0.1}),
    (torch.optim.Adagrad, {"lr": 0.1, "weight_decay": 0.1, "lr_decay": 0.01}),
]


def case_id(case):
    cls, options = case
    return cls.__name__ + "-" + "-".join(
        f"{key}={'tensor' if torch.is_tensor(value) else value}" for key, value in options.items()
    )


@pytest.mark.parametrize("case", OPTIMIZER_CASES, ids=[case_id(c) for c in OPTIMIZER_CASES])
def test_fused_foreach_and_for_loop_match_each_other_and_cpu(case):
    cls, options = case
    # torch takes a tensor lr with foreach only if capturable, which CPU is not.
    tensor_lr = torch.is_tensor(options["lr"])
    implementations = ("fused", "for-loop") if tensor_lr else ("fused", "foreach", "for-loop")
    results = {}
    for implementation in implementations:
        vdev_params, vdev_state = run_optimizer(cls, options, "vdev", implementation)
        cpu_params, cpu_state = run_optimizer(cls, options, "cpu", implementation)
        # The same implementation runs the same CPU kernels on both devices.
        assert_close(vdev_params, cpu_params, **EXACT)
        assert_close(vdev_state, cpu_state, **EXACT)
        results[implementation] = vdev_params, vdev_state
    # Implementations differ only in rounding.
    for implementation in implementations:
        assert_close(results[implementation], results["for-loop"])
    if tensor_lr and "capturable" in inspect.signature(cls).parameters:
        capturable = run_optimizer(cls, {**options, "capturable": True}, "vdev", "foreach")
        assert_close(capturable, results["for-loop"])


def test_fused_step_leaves_tensors_on_their_device_without_copies():
    params = make_params("vdev")
    optimizer = torch.optim.AdamW(params, lr=0.01, fused=True)
    for param in params:
        param.grad = torch.ones_like(param)
    storages = [param.untyped_storage().data_ptr() for param in params]
    optimizer.step()
    assert [param.untyped_storage().data_ptr() for param in params] == storages
    for param in params:
        state = optimizer.state[param]
        for value in (state["exp_avg"], state["exp_avg_sq"], state["step"]):
            assert value.device == param.device and is_vdev_impl(value)


class RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.name())
        return func(*args, **(kwargs or {}))


def optimizer_variants():
    """Every torch.optim optimizer with foreach and (where it has one) fused, each
    flag that changes which kernels run, and a tensor learning rate."""
    flags = {"amsgrad": True, "nesterov": True, "maximize": True, "weight_decay": 0.1,
             "momentum": 0.9, "centered": True, "decoupled_weight_decay": True, "capturable": True}
    for name in ("Adam", "AdamW", "SGD", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam",
                 "RMSprop", "Rprop"):
        cls = getattr(torch.optim, name)
        parameters = inspect.signature(cls).parameters
        implementations = ["foreach"] + (["fused"] if "fused" in parameters else [])
        for implementation in implementations:
            yield cls, {implementation: True}
            # torch takes a tensor lr with foreach only if capturable.
            if implementation == "fused":
                yield cls, {implementation: True, "lr": torch.tensor(0.01)}
            elif "capturable" in parameters:
                yield cls, {implementation: True, "lr": torch.tensor(0.01), "capturable": True}
            for flag, value in flags.items():
                if flag in parameters and not (flag == "capturable" and implementation == "fused"):
                    options = {implementation: True, flag: value}
                    if flag == "nesterov":
                        options["momentum"] = 0.9
                    yield cls, options


def test_kernels_used_by_optimizers_grad_scaler_and_clipping_are_native():
    recorder = RecordOps()
    with recorder:
        for cls, options in optimizer_variants():
            params = make_params("vdev")
            optimizer = cls(params, **options)
            for _ in range(2):
                for param in params:
                    param.grad = torch.ones_like(param)
                optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        torch.nn.utils.clip_grad_value_(params, 1.0, foreach=True)
        scaler = torch.amp.GradScaler("vdev")
        optimizer = torch.optim.SGD(params, lr=0.1)
        scaler.scale(sum(param.sum() for param in params)).backward()
        scaler.step(optimizer)
        scaler.update()
        model = torch.nn.Linear(3, 3).vdev()
        average = torch.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
        average.update_parameters(model)
        average.update_parameters(model)
    multi_tensor = {name for name in recorder.names if name.startswith(("aten::_foreach_", "aten::_fused_", "aten::_amp_"))}
    assert {"aten::_fused_adam_", "aten::_fused_sgd_", "aten::_foreach_add_.List",
            "aten::_amp_update_scale_"} <= multi_tensor
    assert sorted(name for name in multi_tensor if not has_vdev_kernel(name)) == []


# The foreach kernels, checked against CPU from their schemas.
FOREACH_KERNELS = sorted(
    name for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    if name.startswith("aten::_foreach_")
)


def foreach_arguments(schema, device, generator):
    shapes = [(3, 4), (5,), (2, 2, 2)]
    args = []
    for argument in schema.arguments:
        if argument.has_default_value():
            break
        kind = str(argument.type)
        if kind == "List[Tensor]":
            # Positive and away from zero: every op here is defined on it.
            args.append([(torch.rand(shape, generator=generator) + 0.5).to(device) for shape in shapes])
        elif kind == "Tensor":
            args.append(torch.tensor(0.75).to(device))
        elif kind == "number":
            args.append(0.75)
        elif kind == "List[number]":
            args.append([0.5, 0.75, 1.25])
        else:
            raise AssertionError(f"no sample for {argument}")
    return args


def test_every_registered_foreach_kernel_is_covered():
    assert len(FOREACH_KERNELS) >= 70


@pytest.mark.parametrize("name", FOREACH_KERNELS)
def test_foreach_kernel_matches_cpu(name):
    packet, _, overload = name.removeprefix("aten::").partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")
    vdev_args = foreach_arguments(op._schema, "vdev", torch.Generator().manual_seed(0))
    cpu_args = foreach_arguments(op._schema, "cpu", torch.Generator().manual_seed(0))
    vdev_result = op(*vdev_args)
    cpu_result = op(*cpu_args)
    if op._schema.returns:
        assert all(t.device.type == "vdev" and is_vdev_impl(t) for t in vdev_result)
        assert_close([t.cpu() for t in vdev_result], cpu_result, **EXACT)
    else:
        assert vdev_result is None
    # Written arguments (in-place self, copy_'s destination) changed as on CPU.
    for vdev_arg, cpu_arg in zip(vdev_args, cpu_args):
        if isinstance(vdev_arg, list) and torch.is_tensor(vdev_arg[0]):
            assert_close([t.cpu() for t in vdev_arg], cpu_arg, **EXACT)


def versions_after_in_place_ops(device, inference_mode):
    normal = [torch.ones(3, device=device), torch.ones(2, 2, device=device)]
    with torch.inference_mode(inference_mode):
        made_in_mode = [torch.ones(3, device=device)]
        torch._foreach_mul_(normal, 3.0)
        torch._foreach_add_(made_in_mode, normal[:1])
        normal[0].add_(1.0)
    tensors = normal + made_in_mode
    return [None if t.is_inference() else t._version for t in tensors], [t.cpu() for t in tensors]


@pytest.mark.parametrize("inference_mode", [False, True])
def test_foreach_in_place_bumps_versions_as_on_cpu(inference_mode):
    versions, values = versions_after_in_place_ops("vdev", inference_mode)
    cpu_versions, cpu_values = versions_after_in_place_ops("cpu", inference_mode)
    assert versions == cpu_versions
    assert versions[:2] == [2, 1]
    assert_close(values, cpu_values, **EXACT)


def test_foreach_in_place_keeps_storages():
    tensors = [torch.ones(3, device="vdev"), torch.ones(2, 2, device="vdev")]
    pointers = [t.data_ptr() for t in tensors]
    torch._foreach_mul_(tensors, 3.0)
    assert [t.data_ptr() for t in tensors] == pointers
    assert_close([t.cpu() for t in tensors], [torch.full((3,), 3.0), torch.full((2, 2), 3.0)])


def test_foreach_copy_reads_from_any_device():
    destination = [torch.zeros(3, device="vdev:0"), torch.zeros(2, device="vdev:0")]
    sources = [torch.arange(3.0), torch.arange(2.0, device="vdev:1")]
    torch._foreach_copy_(destination, sources)
    assert_close([t.cpu() for t in destination], [torch.arange(3.0), torch.arange(2.0)])


def test_foreach_rejects_mixed_devices_and_stays_usable():
    tensors = [torch.ones(3, device="vdev:0"), torch.ones(3, device="vdev:1")]
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*_foreach_add_"):
        torch._foreach_add_(tensors, 1.0)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*vdev:0 and cpu"):
        torch._foreach_add_([torch.ones(3, device="vdev")], [torch.ones(3)])
    with pytest.raises(RuntimeError, match="same number of tensors"):
        torch._foreach_add_([torch.ones(3, device="vdev")], [torch.ones(3, device="vdev")] * 2)
    ones = [torch.ones(3, device="vdev")]
    torch._foreach_add_(ones, 1.0)
    assert_close(ones[0].cpu(), torch.full((3,), 2.0))


def test_fused_optimizer_rejects_mixed_devices():
    params = [torch.zeros(3, device="vdev:0", requires_grad=True), torch.zeros(3, device="vdev:1", requires_grad=True)]
    grads = [torch.ones(3, device="vdev:0"), torch.ones(3, device="vdev:0")]
    state = [[torch.zeros(3, device="vdev:0") for _ in params] for _ in range(2)]
    steps = [torch.zeros((), device="vdev:0") for _ in params]
    with pytest.raises(RuntimeError, match=r"same device.*_fused_adam_"):
        torch._fused_adam_(params, grads, *state, [], steps, lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


def test_fused_optimizer_over_two_devices_matches_cpu():
    cpu_params = make_params("cpu")
    vdev_params = [p.detach().to(f"vdev:{i % 2}").requires_grad_() for i, p in enumerate(cpu_params)]
    optimizers = [torch.optim.Adam(cpu_params, lr=0.01, fused=True), torch.optim.Adam(vdev_params, lr=0.01, fused=True)]
    for step in range(3):
        for cpu_param, vdev_param in zip(cpu_params, vdev_params):
            cpu_param.grad = torch.full_like(cpu_param, step + 1.0)
            vdev_param.grad = cpu_param.grad.to(vdev_param.device)
        for optimizer in optimizers:
            optimizer.step()
    assert [p.device.index for p in vdev_params] == [0, 1, 0]
    assert_close([p.detach().cpu() for p in vdev_params], [p.detach() for p in cpu_params], **EXACT)
