"""Every torch.accelerator function works with vdev as the current accelerator."""

import gc

import pytest
import torch

MiB = 1 << 20


def test_current_accelerator_and_device_count():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("vdev")
    assert torch.accelerator.current_accelerator(check_available=True) == torch.device("vdev")
    assert torch.accelerator.device_count() == torch.vdev.device_count() == 2


def test_set_and_current_device_index():
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1 == torch.vdev.current_device()
    assert torch.empty(1, device="vdev").device.index == 1
    torch.accelerator.set_device_index("vdev:0")
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(torch.device("vdev", 1))
    assert torch.vdev.current_device() == 1
    with pytest.raises(RuntimeError, match="Invalid device index 3 for vdev"):
        torch.accelerator.set_device_index(3)
    assert torch.vdev.current_device() == 1


def test_device_index_context():
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1
        with torch.accelerator.device_index(0):
            assert torch.vdev.current_device() == 0
        assert torch.vdev.current_device() == 1
    assert torch.vdev.current_device() == 0
    with torch.accelerator.device_index(None):
        assert torch.vdev.current_device() == 0


def test_current_stream_and_set_stream():
    assert torch.accelerator.current_stream() == torch.vdev.default_stream()
    assert torch.accelerator.current_stream(1) == torch.vdev.default_stream(1)
    side = torch.vdev.Stream(1, priority=-1)
    torch.accelerator.set_stream(side)
    # As with CUDA, making a stream current makes its device current.
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream() == side == torch.vdev.current_stream()
    generic = torch.Stream("vdev:0")
    torch.accelerator.set_stream(generic)
    assert torch.vdev.current_stream(0) == generic and torch.vdev.current_device() == 0


def test_synchronize():
    side = torch.vdev.Stream(1)
    tensor = torch.empty(2 * MiB + 128 * 1024, dtype=torch.uint8, device="vdev:1")
    address = tensor.data_ptr()
    tensor.record_stream(side)
    del tensor
    torch.accelerator.synchronize(0)  # another device's streams: the block stays held
    held = torch.empty(2 * MiB + 128 * 1024, dtype=torch.uint8, device="vdev:1")
    assert held.data_ptr() != address
    torch.accelerator.synchronize("vdev:1")
    assert torch.empty(2 * MiB + 128 * 1024, dtype=torch.uint8, device="vdev:1").data_ptr() == address
    torch.accelerator.synchronize()
    with pytest.raises(RuntimeError, match="Invalid device index 7"):
        torch.accelerator.synchronize(7)


def test_memory_statistics():
    gc.collect()
    torch.accelerator.empty_cache()
    for index in (0, 1):
        before = torch.accelerator.memory_allocated(index)
        tensor = torch.empty(MiB, dtype=torch.uint8, device=f"vdev:{index}")
        assert torch.accelerator.memory_allocated(index) == before + MiB
        assert torch.accelerator.memory_allocated(index) == torch.vdev.memory_allocated(index)
        assert torch.accelerator.max_memory_allocated(index) >= before + MiB
        assert torch.accelerator.memory_reserved(index) >= torch.accelerator.memory_allocated(index)
        assert torch.accelerator.max_memory_reserved(index) >= torch.accelerator.memory_reserved(index)
        stats = torch.accelerator.memory_stats(index)
        assert stats == torch.vdev.memory_stats(index)
        assert stats["allocated_bytes.all.current"] == before + MiB
        del tensor
        assert torch.accelerator.memory_allocated(index) == before


def test_reset_statistics():
    tensor = torch.empty(2 * MiB, dtype=torch.uint8, device="vdev")
    del tensor
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    torch.accelerator.reset_accumulated_memory_stats(0)
    stats = torch.accelerator.memory_stats(0)
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0


def test_memory_info_and_empty_cache():
    gc.collect()
    torch.accelerator.empty_cache()
    free, total = torch.accelerator.get_memory_info(1)
    assert (free, total) == torch.vdev.mem_get_info(1)
    assert total == torch.vdev.get_device_properties(1).total_memory
    tensor = torch.empty(4 * MiB, dtype=torch.uint8, device="vdev:1")
    assert torch.accelerator.get_memory_info(1)[0] == free - 4 * MiB
    del tensor
    assert torch.accelerator.memory_reserved(1) == total - free + 4 * MiB  # cached
    torch.accelerator.empty_cache()
    assert torch.accelerator.get_memory_info(1) == (free, total)


def test_empty_host_cache():
    gc.collect()
    torch.accelerator.empty_host_cache()
    before = torch.vdev.host_memory_stats()["allocations.current"]
    pinned = torch.ones(1000).pin_memory()
    del pinned
    assert torch.vdev.host_memory_stats()["allocations.current"] == before + 1
    torch.accelerator.empty_host_cache()
    assert torch.vdev.host_memory_stats()["allocations.current"] == before


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_get_device_capability_lists_what_vdev_can_hold_and_move():
    capability = torch.accelerator.get_device_capability("vdev:1")
    supported = capability["supported_dtypes"]
    assert {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool,
            torch.complex64, torch.uint8, torch.float8_e4m3fn} <= supported
    # Quantized tensors cannot be made on vdev; sub-byte integers cannot be copied anywhere.
    assert not {torch.qint8, torch.quint8, torch.qint32, torch.int4, torch.uint3} & supported
    for dtype in supported:
        cpu = torch.empty(8, dtype=dtype)
        cpu_bytes = torch.tensor([], dtype=torch.uint8).set_(cpu.untyped_storage())
        valid_bytes = 2 if dtype == torch.bool else 256
        cpu_bytes.copy_(torch.randint(0, valid_bytes, cpu_bytes.shape, dtype=torch.uint8))
        on_device = cpu.to("vdev:1")
        assert on_device.dtype == dtype
        back = torch.tensor([], dtype=torch.uint8).set_(on_device.cpu().untyped_storage())
        assert torch.equal(back, cpu_bytes), dtype
    with pytest.raises(RuntimeError, match="Invalid device index 9"):
        torch.accelerator.get_device_capability(9)
