"""Streams and events follow torch.cuda's API and semantics; record_stream keeps the
caching allocator from reusing memory another stream may still use."""

import gc
import threading
import time

import pytest
import torch
from torch.testing import assert_close

MiB = 1 << 20


# --- streams -----------------------------------------------------------------


def test_stream_is_a_torch_stream_on_the_requested_device():
    stream = torch.vdev.Stream()
    assert isinstance(stream, torch.Stream)
    assert stream.device == torch.device("vdev", 0)
    assert torch.vdev.Stream("vdev:1").device == torch.device("vdev", 1)
    assert torch.vdev.Stream(1).device_index == 1
    generic = torch.Stream("vdev")
    assert generic.device.type == "vdev"
    with torch.vdev.device(1):
        assert torch.vdev.Stream().device_index == 1


def test_priorities_follow_cuda_convention():
    # CUDA as PyTorch exposes it: 0 is the default and lowest priority, lower numbers
    # are higher, and out-of-range values map to the nearest valid priority.
    low, high = torch.vdev.Stream.priority_range()
    assert (low, high) == (0, -3)
    assert torch.vdev.Stream().priority == 0
    for priority in (0, -1, -2, -3):
        assert torch.vdev.Stream(priority=priority).priority == priority
    assert torch.vdev.Stream(priority=7).priority == low
    assert torch.vdev.Stream(priority=-50).priority == high
    generic = torch.Stream("vdev", priority=-2)
    assert torch.vdev.Stream._wrap(generic).priority == -2
    assert torch.vdev.default_stream().priority == 0


def test_pool_hands_out_distinct_streams_round_robin():
    # As CUDA's: each priority has a pool of 32 streams per device.
    ids = {torch.vdev.Stream(priority=-1).stream_id for _ in range(32)}
    assert len(ids) == 32
    assert torch.vdev.Stream(priority=-1).stream_id in ids
    assert not ids & {torch.vdev.Stream().stream_id for _ in range(32)}


def test_current_stream_defaults_to_default_stream():
    assert torch.vdev.current_stream() == torch.vdev.default_stream()
    assert torch.vdev.current_stream(1) == torch.vdev.default_stream("vdev:1")
    assert torch.vdev.current_stream().stream_id == 0
    assert torch.accelerator.current_stream() == torch.vdev.current_stream()


def test_stream_context_sets_and_restores():
    side = torch.vdev.Stream()
    other = torch.vdev.Stream()
    with torch.vdev.stream(side) as entered:
        assert entered is side
        assert torch.vdev.current_stream() == side
        with torch.vdev.stream(other):
            assert torch.vdev.current_stream() == other
        assert torch.vdev.current_stream() == side
    assert torch.vdev.current_stream() == torch.vdev.default_stream()
    with torch.vdev.stream(None):
        assert torch.vdev.current_stream() == torch.vdev.default_stream()


def test_stream_context_on_other_device_switches_device_and_restores_both():
    side = torch.vdev.Stream(1)
    with torch.vdev.stream(side):
        assert torch.vdev.current_device() == 1
        assert torch.vdev.current_stream() == side
        assert torch.empty(2, device="vdev").device.index == 1
    assert torch.vdev.current_device() == 0
    assert torch.vdev.current_stream(0) == torch.vdev.default_stream(0)
    assert torch.vdev.current_stream(1) == torch.vdev.default_stream(1)


def test_torch_stream_context_manager_works_on_vdev():
    side = torch.Stream("vdev")
    with side:
        assert torch.vdev.current_stream() == side
    assert torch.vdev.current_stream() == torch.vdev.default_stream()


def test_set_stream_sets_device_too_and_none_is_a_no_op():
    side = torch.vdev.Stream(1)
    torch.vdev.set_stream(side)
    assert torch.vdev.current_device() == 1
    assert torch.vdev.current_stream() == side
    torch.vdev.set_stream(None)
    assert torch.vdev.current_stream() == side


def test_current_stream_is_per_thread():
    side = torch.vdev.Stream()
    torch.vdev.set_stream(side)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.vdev.current_stream()))
    thread.start()
    thread.join()
    assert seen == [torch.vdev.default_stream()]
    assert torch.vdev.current_stream() == side


def test_work_on_side_streams_matches_cpu():
    source = torch.randn(16, 16)
    side = torch.vdev.Stream(priority=-3)
    with torch.vdev.stream(side):
        device_input = source.to("vdev")
        result = (device_input @ device_input.t()).relu().sum(0)
    torch.vdev.current_stream().wait_stream(side)
    assert_close(result.cpu(), (source @ source.t()).relu().sum(0))
    assert side.query()
    side.synchronize()


def test_stream_equality_and_hash():
    stream = torch.vdev.Stream()
    same = torch.vdev.Stream(
        stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
    )
    assert stream == same and hash(stream) == hash(same)
    assert stream != torch.vdev.default_stream()
    assert stream != "not a stream"
    assert "priority=0" in repr(stream)


def test_bad_streams_are_rejected():
    with pytest.raises(TypeError, match="Expected a torch.Stream"):
        torch.vdev.set_stream("vdev")
    device_type = torch.vdev.default_stream().device_type
    unknown = torch.Stream(stream_id=9999, device_index=0, device_type=device_type)
    with pytest.raises(RuntimeError, match="Stream id 9999 is not a vdev stream"):
        torch.vdev.set_stream(unknown)
    with pytest.raises(RuntimeError, match="Stream id 9999 is not a vdev stream"):
        torch.accelerator.set_stream(unknown)
    with pytest.raises(RuntimeError, match="Invalid device index 4"):
        torch.vdev.Stream(4)
    assert torch.vdev.current_stream() == torch.vdev.default_stream()


# --- events ------------------------------------------------------------------


def test_event_record_query_synchronize_and_wait():
    side = torch.vdev.Stream()
    event = torch.vdev.Event()
    assert isinstance(event, torch.Event)
    assert event.query()  # never recorded
    event.record()
    assert event.device == torch.device("vdev", 0)
    event.synchronize()
    assert event.query()
    side.wait_event(event)
    event.wait(side)
    recorded = side.record_event()
    assert isinstance(recorded, torch.vdev.Event)
    recorded.synchronize()
    assert recorded.query()
    own = torch.vdev.Event()
    assert side.record_event(own) is own


def test_elapsed_time_measures_real_time():
    start = torch.vdev.Event(enable_timing=True)
    end = torch.vdev.Event(enable_timing=True)
    before = time.perf_counter()
    start.record()
    torch.vdev._sleep(50)  # the stream is busy 50 ms between the records, however late it starts
    end.record()
    end.synchronize()
    outer_ms = (time.perf_counter() - before) * 1000
    elapsed = start.elapsed_time(end)
    assert 50 <= elapsed <= outer_ms
    generic_start = torch.Event("vdev", enable_timing=True)
    generic_end = torch.Event("vdev", enable_timing=True)
    before = time.perf_counter()
    generic_start.record()
    generic_end.record()
    generic_end.synchronize()
    outer_ms = (time.perf_counter() - before) * 1000
    assert 0 <= generic_start.elapsed_time(generic_end) <= outer_ms


def test_elapsed_time_errors_follow_cuda():
    untimed = torch.vdev.Event()
    untimed.record()
    timed = torch.vdev.Event(enable_timing=True)
    timed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed.elapsed_time(timed)
    with pytest.raises(ValueError, match="must be recorded"):
        timed.elapsed_time(torch.vdev.Event(enable_timing=True))
    with pytest.raises(TypeError, match="torch.Event"):
        timed.elapsed_time("later")


@pytest.mark.parametrize("rerecorded_on", ["an idle stream", "the same stream"])
def test_a_wait_is_for_the_record_before_it_when_the_event_is_recorded_again(rerecorded_on):
    # As cudaStreamWaitEvent: the wait is for the record made before it, so recording
    # the event again - on an idle stream, whose record completes first - does not
    # release the consumer before the producer's slow work wrote its result.
    producer, idle, consumer = torch.vdev.Stream(), torch.vdev.Stream(), torch.vdev.Stream()
    source = torch.linspace(-3, 3, 4096)
    x = source.to("vdev")
    torch.vdev.synchronize()
    event = torch.vdev.Event()
    with torch.vdev.stream(producer):
        torch.vdev._sleep(200)
        y = x * 2 + 1
    event.record(producer)
    consumer.wait_event(event)
    with torch.vdev.stream(consumer):
        z = y * 3 - 5
    if rerecorded_on == "an idle stream":
        event.record(idle)
        event.synchronize()  # waits for the latest record, the idle stream's
        assert event.query()
    else:
        with torch.vdev.stream(producer):
            y.add_(0)
        event.record(producer)
    torch.vdev.synchronize()
    assert event.query()
    assert_close(z.cpu(), (source * 2 + 1) * 3 - 5)


def test_event_records_only_on_its_device():
    event = torch.vdev.Event()
    event.record(torch.vdev.Stream(1))
    assert event.device == torch.device("vdev", 1)
    with pytest.raises(RuntimeError, match="does not match recording stream's device"):
        event.record(torch.vdev.Stream(0))
    with pytest.raises(TypeError, match="Expected a torch.Stream"):
        event.record("stream")


def test_interprocess_events_are_refused():
    with pytest.raises(ValueError, match="interprocess"):
        torch.vdev.Event(interprocess=True)


# --- record_stream and the caching allocator ---------------------------------

SIZE = 3 * MiB + 256 * 1024  # a size no other test caches, with no rounding


def _block(stream=None):
    with torch.vdev.stream(stream):
        return torch.empty(SIZE, dtype=torch.uint8, device="vdev")


def _poll(query):
    """Queries until the work is complete (a recorded event completes when its stream's
    worker reaches it), as code waiting for CUDA work without blocking does."""
    while not query():
        time.sleep(0.0001)


@pytest.fixture
def fresh_cache():
    gc.collect()
    torch.vdev.synchronize()
    torch.vdev.empty_cache()
    yield
    torch.vdev.empty_cache()


def test_freed_block_is_reused_only_by_its_stream(fresh_cache):
    side = torch.vdev.Stream()
    tensor = _block()
    address = tensor.data_ptr()
    del tensor
    on_side = _block(side)
    assert on_side.data_ptr() != address
    assert _block().data_ptr() == address


def test_recorded_block_waits_for_the_recording_stream(fresh_cache):
    side = torch.vdev.Stream()
    tensor = _block()
    address = tensor.data_ptr()
    with torch.vdev.stream(side):
        tensor.add_(1)
    tensor.record_stream(side)
    before = torch.vdev.memory_stats()
    del tensor
    stats = torch.vdev.memory_stats()
    # No longer allocated, still active (as CUDA's until its events complete).
    assert stats["allocated_bytes.all.current"] == before["allocated_bytes.all.current"] - SIZE
    assert stats["active_bytes.all.current"] == before["active_bytes.all.current"]
    again = _block()
    assert again.data_ptr() != address
    side.synchronize()
    assert _block().data_ptr() == address
    del again


@pytest.mark.parametrize(
    "observe",
    [
        lambda side: side.synchronize(),
        lambda side: side.query(),
        lambda side: torch.vdev.synchronize(),
        lambda side: torch.accelerator.synchronize(),
        lambda side: side.record_event().synchronize(),
        lambda side: _poll(side.record_event().query),
    ],
    ids=["stream_sync", "stream_query", "device_sync", "accelerator_sync", "event_sync", "event_query"],
)
def test_host_observing_the_stream_releases_the_block(fresh_cache, observe):
    side = torch.vdev.Stream()
    tensor = _block()
    address = tensor.data_ptr()
    tensor.record_stream(side)
    del tensor
    observe(side)
    assert _block().data_ptr() == address


def test_blocking_copy_and_item_on_the_stream_release_the_block(fresh_cache):
    side = torch.vdev.Stream()
    for read in (lambda t: t[:4].cpu(), lambda t: t[0].item()):
        tensor = _block()
        address = tensor.data_ptr()
        tensor.record_stream(side)
        del tensor
        with torch.vdev.stream(side):
            read(torch.ones(8, device="vdev"))
        reused = _block()
        assert reused.data_ptr() == address
        del reused


def test_event_recorded_before_the_free_does_not_release(fresh_cache):
    side = torch.vdev.Stream()
    tensor = _block()
    address = tensor.data_ptr()
    tensor.record_stream(side)
    early = side.record_event()
    del tensor
    early.synchronize()
    assert _block().data_ptr() != address


def test_every_recorded_stream_must_pass(fresh_cache):
    first, second = torch.vdev.Stream(), torch.vdev.Stream(priority=-1)
    tensor = _block()
    address = tensor.data_ptr()
    tensor.record_stream(first)
    tensor.record_stream(second)
    del tensor
    first.synchronize()
    held = _block()
    assert held.data_ptr() != address
    second.synchronize()
    assert _block().data_ptr() == address
    del held


def test_blocks_recorded_on_several_streams_are_released_independently(fresh_cache):
    first, second = torch.vdev.Stream(), torch.vdev.Stream(1)  # any device's stream may use it
    only_first, only_second, both = _block(), _block(), _block()
    only_first.record_stream(first)
    only_second.record_stream(second)
    both.record_stream(first)
    both.record_stream(second)
    addresses = {name: t.data_ptr() for name, t in [("first", only_first), ("second", only_second), ("both", both)]}
    del only_first, only_second, both
    first.synchronize()
    kept = [_block() for _ in range(3)]
    assert {t.data_ptr() for t in kept} & set(addresses.values()) == {addresses["first"]}
    second.synchronize()
    more = [_block() for _ in range(2)]
    assert {t.data_ptr() for t in more} == {addresses["second"], addresses["both"]}
    del kept, more


def test_recording_the_allocation_stream_changes_nothing(fresh_cache):
    tensor = _block()
    address = tensor.data_ptr()
    tensor.record_stream(torch.vdev.current_stream())
    del tensor
    assert _block().data_ptr() == address


def test_empty_cache_frees_recorded_blocks(fresh_cache):
    side = torch.vdev.Stream()
    tensor = _block()
    tensor.record_stream(side)
    reserved = torch.vdev.memory_reserved()
    del tensor
    torch.vdev.empty_cache()
    assert torch.vdev.memory_reserved() == reserved - SIZE
    assert torch.vdev.memory_stats()["active_bytes.all.current"] == torch.vdev.memory_allocated()


def test_record_stream_on_views_and_empty_tensors(fresh_cache):
    side = torch.vdev.Stream()
    tensor = _block()
    address = tensor.data_ptr()
    tensor[10:20].record_stream(side)  # a view records its storage's block
    del tensor
    assert _block().data_ptr() != address
    torch.empty(0, device="vdev").record_stream(side)


def test_memory_pressure_reclaims_recorded_blocks(run_in_subprocess):
    script = """
import torch, torch_vdev
MiB = 1 << 20
side = torch.vdev.Stream()
kept = torch.empty(6 * MiB, dtype=torch.uint8, device='vdev')
kept.record_stream(side)
del kept
# Only fits once the pending block is reclaimed, as CUDA's allocator synchronizes
# its events before giving up.
big = torch.empty(12 * MiB, dtype=torch.uint8, device='vdev')
print('ok', torch.vdev.memory_stats()['num_alloc_retries'], torch.vdev.memory_reserved() // MiB)
"""
    result = run_in_subprocess(script, env={"VDEV_MEMORY_LIMIT": str(16 * MiB)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "1", "12"]
