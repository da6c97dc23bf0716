"""End-to-end training on vdev (the examples' CNN and language model) equals CPU."""

import gc
import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)

import train_cnn  # noqa: E402
import train_lm  # noqa: E402

MODELS = {"cnn": train_cnn, "lm": train_lm}


@pytest.mark.parametrize("name", MODELS)
def test_20_steps_equal_cpu_and_memory_returns_to_baseline(name):
    gc.collect()
    baseline = torch.vdev.memory_allocated()
    losses = MODELS[name].run("vdev", steps=20)
    gc.collect()
    assert torch.vdev.memory_allocated() == baseline
    # The same kernels on the same data: the same losses, step by step.
    assert_close(losses, MODELS[name].run("cpu", steps=20))
    assert sum(losses[-5:]) < sum(losses[:5]) * 0.6


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
@pytest.mark.parametrize("name", MODELS)
def test_mixed_precision_tracks_full_precision(name, amp):
    gc.collect()
    baseline = torch.vdev.memory_allocated()
    mixed = MODELS[name].run("vdev", steps=12, amp=amp)
    gc.collect()
    assert torch.vdev.memory_allocated() == baseline
    full = MODELS[name].run("vdev", steps=12)
    # Lower precision changes rounding, not the course of training.
    assert_close(mixed, full, rtol=0.05, atol=0.02)


@pytest.mark.parametrize("name", MODELS)
def test_example_script_shows_progress_and_the_final_loss_of_the_cpu_run(name):
    script = os.path.join(EXAMPLES, f"train_{name}.py")
    process = subprocess.run(
        [sys.executable, script, "--steps", "3"], capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert "3/3 [" in process.stderr and "loss=" in process.stderr  # tqdm's bar
    final = [line.split()[2] for line in process.stdout.splitlines() if line.startswith("final loss")]
    assert final == [f"{MODELS[name].run('cpu', steps=3)[-1]:.6f}"]
