"""torch.amp.GradScaler('vdev'): inf/nan skipping and the scale schedule, as on CPU and CUDA."""

import math

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl
EXACT = dict(rtol=0, atol=0)


def documented_schedule(init_scale, growth_factor, backoff_factor, growth_interval, found_infs):
    """The scale after each step, as GradScaler's documentation describes it: a step
    with inf/nan gradients multiplies the scale by backoff_factor and restarts the
    count; growth_interval clean steps in a row multiply it by growth_factor."""
    scale, clean_steps, scales = init_scale, 0, []
    for found_inf in found_infs:
        if found_inf:
            scale, clean_steps = scale * backoff_factor, 0
        else:
            clean_steps += 1
            if clean_steps == growth_interval:
                scale, clean_steps = scale * growth_factor, 0
        scales.append(scale)
    return scales


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("poison", [None, math.inf, -math.inf, math.nan], ids=str)
def test_unscale_and_non_finite_check_match_cpu(dtype, poison):
    generator = torch.Generator().manual_seed(0)
    grads_cpu = [(torch.randn(shape, generator=generator) * 1024).to(dtype) for shape in [(4, 3), (5,), (2, 2, 2)]]
    if poison is not None:
        grads_cpu[1][3] = poison
    grads = [g.vdev() for g in grads_cpu]
    found_inf_cpu, found_inf = torch.zeros(()), torch.zeros((), device="vdev")
    inv_scale_cpu = torch.tensor(1 / 1024)
    torch._amp_foreach_non_finite_check_and_unscale_(grads_cpu, found_inf_cpu, inv_scale_cpu)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale_cpu.vdev())
    assert found_inf.item() == (0.0 if poison is None else 1.0) == found_inf_cpu.item()
    assert_close([g.cpu() for g in grads], grads_cpu, equal_nan=True, **EXACT)


def test_update_scale_follows_the_documented_schedule():
    found_infs = [False, False, False, True, False, False, True, True, False, False, False, False, False]
    expected = documented_schedule(256.0, 2.0, 0.25, 3, found_infs)
    scale = torch.tensor(256.0, device="vdev")
    growth_tracker = torch.zeros((), dtype=torch.int32, device="vdev")
    for found_inf, expected_scale in zip(found_infs, expected):
        result = torch._amp_update_scale_(
            scale, growth_tracker, torch.tensor(float(found_inf), device="vdev"), 2.0, 0.25, 3)
        assert result is scale
        assert scale.item() == expected_scale


def make_model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)


def train_with_scaler(device, optimizer_options, poisoned_steps, steps=9):
    """Scaled training steps; on `poisoned_steps` one gradient holds an inf. Returns
    the scale after each step, whether each step changed the parameters, and the
    final parameters."""
    model = make_model(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, **optimizer_options)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    generator = torch.Generator().manual_seed(1)
    scales, stepped = [], []
    for step in range(steps):
        x = torch.randn(4, 6, generator=generator).to(device)
        y = torch.randn(4, 3, generator=generator).to(device)
        optimizer.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
        if step in poisoned_steps:
            next(model.parameters()).grad[0, 0] = math.inf
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        stepped.append(any(not torch.equal(b, p) for b, p in zip(before, model.parameters())))
    return scales, stepped, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("optimizer_options", [{}, {"foreach": True}, {"fused": True}], ids=str)
def test_training_skips_non_finite_steps_and_matches_cpu(optimizer_options):
    poisoned = {2, 5, 6}
    scales, stepped, params = train_with_scaler("vdev", optimizer_options, poisoned)
    cpu_scales, cpu_stepped, cpu_params = train_with_scaler("cpu", optimizer_options, poisoned)
    assert stepped == [step not in poisoned for step in range(9)]
    assert scales == documented_schedule(2.0**10, 2.0, 0.5, 2, [step in poisoned for step in range(9)])
    assert (scales, stepped) == (cpu_scales, cpu_stepped)
    assert_close(params, cpu_params, **EXACT)


def test_fused_and_unfused_steps_agree_under_scaling():
    # The fused kernels unscale inside the step (GradScaler hands them the scale).
    assert torch.optim.Adam([torch.zeros(1, device="vdev", requires_grad=True)], fused=True)._step_supports_amp_scaling
    fused = train_with_scaler("vdev", {"fused": True}, poisoned_steps={3})
    unfused = train_with_scaler("vdev", {"foreach": False}, poisoned_steps={3})
    assert fused[:2] == unfused[:2]
    assert_close(fused[2], unfused[2])


def test_unscale_then_clip_sees_true_gradients():
    model = make_model("vdev")
    reference = make_model("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("vdev", init_scale=2.0**12)
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    scaler.scale(torch.nn.functional.mse_loss(model(x.vdev()), y.vdev())).backward()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    scaler.unscale_(optimizer)
    for p, p_cpu in zip(model.parameters(), reference.parameters()):
        assert_close(p.grad.cpu(), p_cpu.grad)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    norm_cpu = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
    assert_close(norm.cpu(), norm_cpu)
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2.0**12


def test_scaler_state_lives_on_the_device():
    scaler = torch.amp.GradScaler("vdev")
    assert scaler.is_enabled()
    loss = torch.ones((), device="vdev:1", requires_grad=True)
    scaled = scaler.scale(loss)
    assert scaled.device == torch.device("vdev:1")
    assert scaler._scale.device == torch.device("vdev:1") and is_vdev_impl(scaler._scale)
    assert scaler._growth_tracker.dtype == torch.int32
