"""Pinned host memory: pin_memory(), is_pinned(), the caching host allocator,
DataLoader(pin_memory=True) and non_blocking copies."""

import gc

import pytest
import torch
from torch.testing import assert_close
from torch.utils.data import DataLoader, TensorDataset


@pytest.fixture
def empty_host_cache():
    gc.collect()
    torch.accelerator.empty_host_cache()
    yield
    gc.collect()
    torch.accelerator.empty_host_cache()


def test_pin_memory_copies_into_pinned_memory():
    source = torch.randn(5, 7)
    pinned = source.pin_memory()
    assert pinned.is_pinned() and not source.is_pinned()
    assert pinned.data_ptr() != source.data_ptr()
    assert_close(pinned, source, rtol=0, atol=0)
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()  # already pinned: itself
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert torch.zeros(4, 4, pin_memory=True).is_pinned()


def test_views_of_pinned_tensors_are_pinned():
    pinned = torch.arange(100.0).pin_memory()
    assert pinned[37:].is_pinned()
    assert pinned.view(10, 10).t()[3].is_pinned()


def test_only_cpu_tensors_can_be_pinned():
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        torch.ones(3, device="vdev").pin_memory()
    with pytest.raises(RuntimeError, match="Only CPU tensors can be pinned"):
        torch.ones(3, device="vdev", pin_memory=True)
    assert not torch.ones(3, device="vdev").is_pinned()


def test_freed_pinned_blocks_are_cached_and_reused(empty_host_cache):
    before = torch.vdev.host_memory_stats()
    pinned = torch.empty(1000, dtype=torch.uint8).pin_memory()
    address = pinned.data_ptr()
    stats = torch.vdev.host_memory_stats()
    assert stats["allocations.current"] == before["allocations.current"] + 1
    assert stats["active_requests.current"] == before["active_requests.current"] + 1
    assert stats["allocated_bytes.current"] == before["allocated_bytes.current"] + 1024  # power of two
    del pinned
    stats = torch.vdev.host_memory_stats()
    assert stats["allocations.current"] == before["allocations.current"] + 1  # kept in the cache
    assert stats["active_requests.current"] == before["active_requests.current"]
    again = torch.empty(1000, dtype=torch.uint8).pin_memory()
    assert again.data_ptr() == address
    assert torch.vdev.host_memory_stats()["num_host_alloc"] == stats["num_host_alloc"]


def test_empty_host_cache_returns_cached_blocks(empty_host_cache):
    before = torch.vdev.host_memory_stats()
    blocks = [torch.empty(4096 * (i + 1), dtype=torch.uint8, pin_memory=True) for i in range(3)]
    assert torch.vdev.host_memory_stats()["allocations.current"] == before["allocations.current"] + 3
    del blocks
    torch.accelerator.empty_host_cache()
    stats = torch.vdev.host_memory_stats()
    assert stats["allocations.current"] == before["allocations.current"]
    assert stats["num_host_free"] == before["num_host_free"] + 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_data_loader_pins_batches(num_workers):
    features = torch.arange(60.0).view(20, 3)
    labels = torch.arange(20)
    loader = DataLoader(
        TensorDataset(features, labels), batch_size=6, pin_memory=True, num_workers=num_workers
    )
    seen = 0
    for batch_features, batch_labels in loader:
        assert batch_features.is_pinned() and batch_labels.is_pinned()
        on_device = batch_features.to("vdev", non_blocking=True)
        assert_close(on_device.cpu(), features[seen : seen + len(batch_labels)], rtol=0, atol=0)
        seen += len(batch_labels)
    assert seen == 20


def test_non_blocking_copies_are_correct():
    source = torch.randn(64, 33).pin_memory()
    expected = source.clone()
    on_device = source.to("vdev:1", non_blocking=True)
    torch.vdev.synchronize(1)  # as on CUDA, the source may change once the copy is complete
    source.fill_(0)
    assert_close(on_device.cpu(), expected, rtol=0, atol=0)
    back = torch.empty(64, 33, pin_memory=True)
    back.copy_(on_device, non_blocking=True)
    torch.vdev.synchronize(1)  # the host reads the destination once the copy is complete
    assert_close(back, expected, rtol=0, atol=0)
    across = on_device.to("vdev:0", non_blocking=True)
    assert_close(across.cpu(), expected, rtol=0, atol=0)
    converted = on_device.t().to(torch.float64, non_blocking=True)
    assert_close(converted.cpu(), expected.t().double(), rtol=0, atol=0)
    unpinned = torch.randn(10).to("vdev", non_blocking=True)
    assert unpinned.device.type == "vdev"
