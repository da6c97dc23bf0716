"""The kernel temporary cache: CPU memory that CPU kernels allocate for themselves while
they run on a stream's worker (convolution's and batch norm's temporaries) is kept for
reuse, so replays and eager steps do not fault their pages in again; CPU allocations on
other threads are the CPU allocator's as before. Results are checked against the same
work on CPU tensors."""

import gc

import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_vdev

stats = torch_vdev.kernel_temporary_cache_stats


def _conv_bn_step(device, generator_seed=0):
    """A convolution, batch norm and their backward: kernels whose CPU kernels
    allocate temporaries (oneDNN reorders and results, batch norm statistics)."""
    generator = torch.Generator().manual_seed(generator_seed)
    x = torch.randn(4, 3, 16, 16, generator=generator).to(device)
    weight = torch.randn(8, 3, 3, 3, generator=generator).to(device).requires_grad_()
    bn_weight = torch.rand(8, generator=generator).to(device).requires_grad_()
    bn_bias = torch.randn(8, generator=generator).to(device).requires_grad_()

    def step():
        for parameter in (weight, bn_weight, bn_bias):
            parameter.grad = None
        y = F.batch_norm(F.conv2d(x, weight, padding=1), None, None, bn_weight, bn_bias, training=True)
        loss = y.relu().square().mean()
        loss.backward()
        return [loss.detach(), weight.grad, bn_weight.grad, bn_bias.grad]

    return step


def _check_against_cpu(results, cpu_results):
    for result, expected in zip(results, cpu_results):
        assert_close(result.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_worker_temporaries_are_reused_across_eager_steps():
    step, cpu_step = _conv_bn_step("vdev"), _conv_bn_step("cpu")
    step()
    torch.vdev.synchronize()
    before = stats()
    results = step()
    torch.vdev.synchronize()
    after = stats()
    allocated = after["allocations"] - before["allocations"]
    assert allocated > 0, "the step's kernels allocated no temporaries on the worker"
    # The same step asks for the same sizes: every block comes from the cache.
    assert after["reuses"] - before["reuses"] == allocated
    assert after["cached_blocks"] == before["cached_blocks"]
    _check_against_cpu(results, cpu_step())


def test_replays_reuse_temporaries_and_match_eager_cpu():
    step = _conv_bn_step("vdev")
    side = torch.vdev.Stream()
    side.wait_stream(torch.vdev.current_stream())
    with torch.vdev.stream(side):
        step()
    torch.vdev.current_stream().wait_stream(side)
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        static_results = step()
    graph.replay()
    torch.vdev.synchronize()
    before = stats()
    for _ in range(3):
        graph.replay()
    torch.vdev.synchronize()
    after = stats()
    allocated = after["allocations"] - before["allocations"]
    assert allocated > 0
    assert after["reuses"] - before["reuses"] == allocated
    cpu_step = _conv_bn_step("cpu")
    _check_against_cpu(static_results, cpu_step())


def test_empty_cache_frees_the_cached_temporaries():
    step, cpu_step = _conv_bn_step("vdev"), _conv_bn_step("cpu")
    step()
    torch.vdev.synchronize()
    assert stats()["cached_bytes"] > 0
    torch.vdev.empty_cache()
    emptied = stats()
    assert emptied["cached_bytes"] == 0 and emptied["cached_blocks"] == 0
    # The next step allocates its temporaries afresh, with the same results.
    results = step()
    torch.vdev.synchronize()
    after = stats()
    assert after["allocations"] > emptied["allocations"]
    assert after["reuses"] - emptied["reuses"] < after["allocations"] - emptied["allocations"]
    _check_against_cpu(results, cpu_step())


def test_cpu_work_on_the_calling_thread_does_not_use_the_cache():
    torch.vdev.synchronize()
    before = stats()
    cpu_results = _conv_bn_step("cpu")()
    big = torch.empty(1 << 20)
    big.fill_(1.0)
    after = stats()
    assert after["allocations"] == before["allocations"]
    assert after["in_use_blocks"] == before["in_use_blocks"]
    assert big.sum().item() == 1 << 20
    assert all(torch.isfinite(result).all() for result in cpu_results)


def test_block_made_on_the_worker_freed_on_the_calling_thread():
    torch.vdev.synchronize()
    before = stats()
    made = torch_vdev._C.cpu_tensor_made_on_worker(1000)
    assert made.device == torch.device("cpu")
    assert_close(made, torch.arange(1000, dtype=torch.float32))
    held = stats()
    assert held["allocations"] == before["allocations"] + 1
    assert held["in_use_blocks"] == before["in_use_blocks"] + 1
    del made
    gc.collect()
    freed = stats()
    assert freed["in_use_blocks"] == before["in_use_blocks"]
    assert freed["cached_blocks"] == held["cached_blocks"] + 1
    # The block serves the worker's next allocation of its size.
    again = torch_vdev._C.cpu_tensor_made_on_worker(1000)
    assert_close(again, torch.arange(1000, dtype=torch.float32))
    assert stats()["reuses"] == freed["reuses"] + 1
