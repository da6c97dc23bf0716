"""The caching allocator: statistics, caching, capacity and out-of-memory errors."""

import gc

import pytest
import torch

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _clean_cache():
    gc.collect()
    torch.vdev.empty_cache()
    yield


def test_allocated_returns_to_baseline_after_del():
    baseline = torch.vdev.memory_allocated()
    tensor = torch.empty(1024, 1024, device="vdev")  # 4 MiB
    assert torch.vdev.memory_allocated() >= baseline + 4 * MiB
    assert torch.vdev.max_memory_allocated() >= baseline + 4 * MiB
    result = (tensor.fill_(1.0) * 2).sum()
    assert result.item() == 2 * 1024 * 1024
    del tensor, result
    assert torch.vdev.memory_allocated() == baseline


def test_a_tensor_that_lets_go_of_its_memory_frees_it_after_ops_ran_on_it():
    # Every op keeps a CPU alias with the tensor for its next op: that alias must not
    # keep the memory alive once the tensor moves to other memory.
    tensor = torch.ones(1024, 1024, device="vdev")  # 4 MiB
    (tensor + 1).sum()
    torch.logaddexp(tensor, tensor)  # through the fallback too
    baseline = torch.vdev.memory_allocated()
    tensor.set_()
    assert torch.vdev.memory_allocated() == baseline - 4 * MiB
    tensor.data = torch.full((3,), 2.0, device="vdev")
    assert (tensor * 3).tolist() == [6.0, 6.0, 6.0]


def test_ops_see_a_tensor_that_moved_to_new_memory():
    tensor = torch.arange(4.0, device="vdev")
    assert (tensor * 2).tolist() == [0.0, 2.0, 4.0, 6.0]
    tensor.resize_(1 << 16)  # reallocates: the kept alias's data pointer is stale
    tensor[4:].fill_(1.0)
    expected = torch.arange(4.0).sum() + (1 << 16) - 4
    assert (tensor * 1).sum().item() == expected.item()


def test_memory_is_per_device():
    before = [torch.vdev.memory_allocated(i) for i in range(2)]
    tensor = torch.empty(MiB, dtype=torch.uint8, device="vdev:1")
    assert torch.vdev.memory_allocated(0) == before[0]
    assert torch.vdev.memory_allocated("vdev:1") >= before[1] + MiB
    del tensor


def test_freed_blocks_are_cached_and_reused():
    tensor = torch.empty(2 * MiB, dtype=torch.uint8, device="vdev")
    address = tensor.data_ptr()
    reserved = torch.vdev.memory_reserved()
    del tensor
    assert torch.vdev.memory_reserved() == reserved  # kept in the cache
    again = torch.empty(2 * MiB, dtype=torch.uint8, device="vdev")
    assert again.data_ptr() == address
    del again
    torch.vdev.empty_cache()
    assert torch.vdev.memory_reserved() < reserved


def test_memory_stats_keys_follow_cuda():
    tensor = torch.empty(3 * MiB, dtype=torch.uint8, device="vdev")
    small = torch.empty(10, device="vdev")
    stats = torch.vdev.memory_stats()
    for prefix in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "allocation", "segment"):
        for pool in ("all", "large_pool", "small_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                assert f"{prefix}.{pool}.{metric}" in stats
    assert stats["num_alloc_retries"] >= 0 and stats["num_ooms"] >= 0
    assert stats["allocated_bytes.large_pool.current"] >= 3 * MiB
    assert stats["allocated_bytes.small_pool.current"] >= 40
    assert stats["requested_bytes.all.current"] <= stats["allocated_bytes.all.current"]
    assert stats == torch.accelerator.memory_stats()
    del tensor, small


def test_peak_reset():
    tensor = torch.empty(4 * MiB, dtype=torch.uint8, device="vdev")
    del tensor
    assert torch.vdev.max_memory_allocated() >= 4 * MiB
    torch.vdev.reset_peak_memory_stats()
    assert torch.vdev.max_memory_allocated() == torch.vdev.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    assert torch.vdev.max_memory_reserved() >= torch.vdev.memory_reserved()
    torch.vdev.reset_accumulated_memory_stats()
    assert torch.vdev.memory_stats()["allocated_bytes.all.freed"] == 0


def test_fallback_results_are_counted():
    source = torch.randn(256, 256, device="vdev")
    before = torch.vdev.memory_allocated()
    result = torch.special.i0e(source)  # no native kernel: runs through the fallback
    assert torch.vdev.memory_allocated() >= before + source.nbytes
    del result
    assert torch.vdev.memory_allocated() == before


OOM_SCRIPT = """
import torch, torch_vdev
MiB = 1 << 20
keep = torch.empty(10 * MiB, dtype=torch.uint8, device='vdev')
try:
    torch.empty(8 * MiB, dtype=torch.uint8, device='vdev')
except torch.OutOfMemoryError as error:
    print('OOM:', error)
stats = torch.vdev.memory_stats()
print('num_ooms', stats['num_ooms'])
del keep
again = torch.empty(8 * MiB, dtype=torch.uint8, device='vdev').fill_(3)
print('after', int(again[-1]), again.shape[0])
del again
cached = torch.empty(6 * MiB, dtype=torch.uint8, device='vdev'); del cached
other = torch.empty(9 * MiB, dtype=torch.uint8, device='vdev')  # needs the cache freed
print('retries', torch.vdev.memory_stats()['num_alloc_retries'])
print('info', *torch.vdev.mem_get_info())
"""


def test_out_of_memory_is_raised_and_recoverable(run_in_subprocess):
    result = run_in_subprocess(OOM_SCRIPT, env={"VDEV_MEMORY_LIMIT": str(16 * (1 << 20))})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "OOM: vdev out of memory. Tried to allocate 8.00 MiB (8388608 bytes) on vdev:0" in out
    assert "capacity of 16.00 MiB (16777216 bytes)" in out
    assert "is free" in out and "VDEV_MEMORY_LIMIT" in out
    assert "num_ooms 1" in out
    assert f"after 3 {8 * (1 << 20)}" in out
    assert "retries 2" in out  # the cache was freed once for `again`, once for `other`
    assert f"info {7 * (1 << 20)} {16 * (1 << 20)}" in out


def test_bad_memory_limit_setting_is_reported(run_in_subprocess):
    result = run_in_subprocess(
        "import torch, torch_vdev; torch.empty(1, device='vdev')", env={"VDEV_MEMORY_LIMIT": "lots"}
    )
    assert result.returncode != 0
    assert "VDEV_MEMORY_LIMIT='lots' is not a whole number of bytes" in result.stderr
