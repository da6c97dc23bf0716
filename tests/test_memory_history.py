"""Memory history and snapshots in torch.cuda.memory's formats, rendered by PyTorch's
torch.cuda._memory_viz; memory_summary; the allocator's options."""

import gc
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import run_python
from torch.cuda import _memory_viz

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _history_off_and_cache_empty():
    gc.collect()
    torch.vdev.empty_cache()
    yield
    torch.vdev.memory._record_memory_history(enabled=None)
    gc.collect()
    torch.vdev.empty_cache()


def allocate_activations(model, inputs):
    return model(inputs)


def training_snapshot():
    """A snapshot taken inside a training step's forward, with Python stacks."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to("vdev")
    optimizer = torch.optim.Adam(model.parameters())
    inputs = torch.randn(32, 64, device="vdev")
    snapshots = []
    model[1].register_forward_hook(lambda *args: snapshots.append(torch.vdev.memory._snapshot()))
    torch.vdev.memory._record_memory_history(stacks="python")
    for _ in range(2):
        optimizer.zero_grad()
        allocate_activations(model, inputs).sum().backward()
        optimizer.step()
    return snapshots[-1]


def test_snapshot_during_a_training_step_renders_and_names_the_allocating_frames():
    snapshot = training_snapshot()
    assert set(snapshot) >= {"segments", "device_traces", "allocator_settings"}
    assert len(snapshot["device_traces"]) == torch.vdev.device_count()
    live = [b for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert live
    frame_names = {f["name"] for b in live for f in b["frames"]}
    assert "allocate_activations" in frame_names and "training_snapshot" in frame_names
    assert all({"filename", "line", "name"} <= set(f) for b in live for f in b["frames"])
    for segment in snapshot["segments"]:
        assert segment["total_size"] == sum(b["size"] for b in segment["blocks"])
        assert segment["device"] == 0 and segment["segment_type"] in ("small", "large")
    actions = {e["action"] for e in snapshot["device_traces"][0]}
    assert {"alloc", "free_requested", "free_completed", "segment_alloc"} <= actions
    # PyTorch's renderers (those that need no download).
    assert "<html" in _memory_viz.trace_plot(snapshot).lower()
    assert "<html" in _memory_viz.segment_plot(snapshot).lower()
    assert "total_reserved" in _memory_viz.segsum(snapshot)
    assert "alloc" in _memory_viz.trace(snapshot)


def test_trace_events_match_memory_stats_counters():
    before = torch.vdev.memory_stats()
    torch.vdev.memory._record_memory_history(context=None)
    tensors = [torch.empty(n, device="vdev") for n in (10, 1000, 300_000, 10)]
    del tensors[1:3]
    torch.vdev.empty_cache()
    after = torch.vdev.memory_stats()
    trace = torch.vdev.memory._snapshot()["device_traces"][0]

    def counted(action):
        return [e for e in trace if e["action"] == action]

    def delta(key):
        return after[key] - before[key]

    assert len(counted("alloc")) == delta("allocation.all.allocated") == 4
    assert sum(e["size"] for e in counted("alloc")) == delta("allocated_bytes.all.allocated")
    assert len(counted("free_requested")) == delta("allocation.all.freed") == 2
    assert sum(e["size"] for e in counted("free_requested")) == delta("allocated_bytes.all.freed")
    assert len(counted("free_completed")) == 2
    assert len(counted("segment_alloc")) == delta("num_device_alloc")
    assert len(counted("segment_free")) == delta("num_device_free") >= 2
    assert sum(e["size"] for e in counted("segment_free")) == delta("reserved_bytes.all.freed")
    assert all(e["frames"] == [] for e in trace)  # context=None
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)


def test_max_entries_keeps_the_latest_events():
    torch.vdev.memory._record_memory_history(max_entries=3)
    tensors = [torch.empty(n * 1024, dtype=torch.uint8, device="vdev") for n in range(1, 6)]
    trace = torch.vdev.memory._snapshot()["device_traces"][0]
    assert len(trace) == 3
    # Each new size reserves a segment first.
    assert [(e["action"], e["size"]) for e in trace] == [("alloc", 4096), ("segment_alloc", 5120), ("alloc", 5120)]
    del tensors


def test_state_only_history_keeps_block_stacks_but_no_trace():
    torch.vdev.memory._record_memory_history(enabled="state", stacks="python")
    kept = allocate_activations(torch.nn.Linear(4, 4).to("vdev"), torch.randn(2, 4, device="vdev"))
    snapshot = torch.vdev.memory._snapshot()
    assert snapshot["device_traces"][0] == []
    block = next(
        b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == kept.data_ptr()
    )
    assert "allocate_activations" in {f["name"] for f in block["frames"]}


def test_stacks_all_adds_cpp_frames_and_free_context():
    torch.vdev.memory._record_memory_history(stacks="all", context="all")
    tensor = torch.empty(100, device="vdev")
    del tensor
    trace = torch.vdev.memory._snapshot()["device_traces"][0]
    alloc = next(e for e in trace if e["action"] == "alloc")
    names = [f["name"] for f in alloc["frames"]]
    assert any("::" in name for name in names)  # C++ frames
    assert "test_stacks_all_adds_cpp_frames_and_free_context" in names
    assert next(e for e in trace if e["action"] == "free_requested")["frames"]


def test_history_off_forgets_and_records_nothing():
    torch.vdev.memory._record_memory_history()
    torch.empty(10, device="vdev")
    torch.vdev.memory._record_memory_history(enabled=None)
    torch.empty(10, device="vdev")
    snapshot = torch.vdev.memory._snapshot()
    assert snapshot["device_traces"][0] == []
    assert all(b["frames"] == [] for s in snapshot["segments"] for b in s["blocks"])


def test_block_used_by_another_stream_is_pending_free_in_snapshots():
    side = torch.vdev.Stream()
    tensor = torch.empty(1000, device="vdev")
    tensor.record_stream(side)
    address = tensor.data_ptr()
    del tensor
    states = {b["address"]: b["state"] for s in torch.vdev.memory._snapshot()["segments"] for b in s["blocks"]}
    assert states[address] == "active_pending_free"
    side.synchronize()
    torch.empty(1000, device="vdev")  # reclaims it
    states = {b["address"]: b["state"] for s in torch.vdev.memory._snapshot()["segments"] for b in s["blocks"]}
    assert states[address] in ("inactive", "active_allocated")


def test_invalid_history_arguments_are_errors():
    with pytest.raises(ValueError, match="enabled"):
        torch.vdev.memory._record_memory_history(enabled="everything")
    with pytest.raises(ValueError, match="stacks"):
        torch.vdev.memory._record_memory_history(stacks="cpp")


def test_dump_snapshot_is_rendered_by_memory_viz_command_line(tmp_path):
    torch.vdev.memory._record_memory_history()
    kept = torch.randn(1000, device="vdev")
    path = tmp_path / "snapshot.pickle"
    torch.vdev.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        assert any(s["address"] == kept.data_ptr() for s in pickle.load(f)["segments"])
    out = tmp_path / "out.html"
    subprocess.run(
        [sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(out)],
        check=True,
        timeout=120,
    )
    assert "<html" in out.read_text().lower()


def test_memory_summary_prints_cudas_table():
    tensor = torch.empty(MiB, dtype=torch.uint8, device="vdev")
    summary = torch.vdev.memory_summary()
    lines = summary.splitlines()
    assert all(len(line) == 77 for line in lines)
    assert "PyTorch VDEV memory summary, device ID 0" in summary
    allocated = next(line for line in lines if line.startswith("| Allocated memory"))
    assert f"{torch.vdev.memory_allocated() // 1024} KiB" in allocated
    for row in ("from large pool", "from small pool", "Requested memory", "Reserved segments", "Oversize allocations"):
        assert row in summary
    assert "from large pool" not in torch.vdev.memory_summary(abbreviated=True)
    del tensor


def run_script(code, env=None):
    result = run_python(textwrap.dedent(code), env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_out_of_memory_is_traced_and_its_error_points_to_the_tools():
    out = run_script(
        """
        import torch
        torch.vdev.memory._record_memory_history()
        kept = torch.empty(6 << 20, dtype=torch.uint8, device="vdev")
        try:
            torch.empty(6 << 20, dtype=torch.uint8, device="vdev")
        except torch.OutOfMemoryError as error:
            message = str(error)
        trace = torch.vdev.memory._snapshot()["device_traces"][0]
        oom = [e for e in trace if e["action"] == "oom"]
        print(len(oom), oom[0]["device_free"], "_record_memory_history" in message, "memory_summary" in message)
        """,
        env={"VDEV_MEMORY_LIMIT": str(10 << 20)},
    )
    assert out.split() == ["1", str(4 << 20), "True", "True"]


def test_roundup_power2_divisions_changes_reserved_sizes():
    out = run_script(
        """
        import torch
        def reserved_for(nbytes):
            torch.vdev.empty_cache()
            tensor = torch.empty(nbytes, dtype=torch.uint8, device="vdev")
            return torch.vdev.memory_reserved()
        size = (1 << 20) + (1 << 17) + 1          # 1.125 MiB + 1
        print(reserved_for(size))
        torch.vdev.memory._set_allocator_settings("roundup_power2_divisions:1")
        print(reserved_for(size))
        torch.vdev.memory._set_allocator_settings("roundup_power2_divisions:0")
        print(reserved_for(size))
        print(torch.vdev.memory.get_allocator_settings())
        """
    )
    default, one, none = (int(v) for v in out.split()[:3])
    assert default == (1 << 20) + 2 * (1 << 17)  # steps of 1/8 MiB
    assert one == 2 << 20
    assert none == (1 << 20) + (1 << 17) + 512
    assert out.split()[3] == "roundup_power2_divisions:0"


def test_garbage_collection_threshold_keeps_reserved_memory_under_it():
    code = """
        import torch
        for n in range(1, 9):            # eight sizes, each freed into the cache
            torch.empty(n << 20, dtype=torch.uint8, device="vdev")
        stats = torch.vdev.memory_stats()
        print(stats["reserved_bytes.all.peak"], stats["num_device_free"])
        """
    limit = 64 << 20
    plain = [int(v) for v in run_script(code, {"VDEV_MEMORY_LIMIT": str(limit)}).split()]
    collected = [
        int(v)
        for v in run_script(
            code,
            {"VDEV_MEMORY_LIMIT": str(limit), "PYTORCH_VDEV_ALLOC_CONF": "garbage_collection_threshold:0.25"},
        ).split()
    ]
    assert plain == [sum(n << 20 for n in range(1, 9)), 0]  # 36 MiB cached
    assert collected[0] <= limit // 4 and collected[1] > 0


def test_max_split_size_counts_oversize_blocks():
    out = run_script(
        """
        import torch
        big = torch.empty(40 << 20, dtype=torch.uint8, device="vdev")
        small = torch.empty(8 << 20, dtype=torch.uint8, device="vdev")
        stats = torch.vdev.memory_stats()
        print(stats["oversize_allocations.current"], stats["oversize_segments.current"])
        del big
        torch.vdev.empty_cache()
        stats = torch.vdev.memory_stats()
        print(stats["oversize_allocations.current"], stats["oversize_segments.current"])
        """,
        env={"PYTORCH_VDEV_ALLOC_CONF": "max_split_size_mb:32, expandable_segments:False"},
    )
    assert out.split() == ["1", "1", "0", "0"]


def test_bad_allocator_settings_are_errors_naming_the_option():
    with pytest.raises(RuntimeError, match="unrecognized option 'max_split'"):
        torch.vdev.memory._set_allocator_settings("max_split:10")
    with pytest.raises(RuntimeError, match="garbage_collection_threshold must be between 0 and 1"):
        torch.vdev.memory._set_allocator_settings("garbage_collection_threshold:1.5")
    with pytest.raises(RuntimeError, match="power of two"):
        torch.vdev.memory._set_allocator_settings("roundup_power2_divisions:3")
    with pytest.warns(UserWarning, match="expandable_segments has no effect"):
        torch.vdev.memory._set_allocator_settings("expandable_segments:True")
    result = run_python(
        "import torch; torch.empty(1, device='vdev')",
        {"PYTORCH_VDEV_ALLOC_CONF": "pinned_use_cuda_host_register:True"},
    )
    assert result.returncode != 0 and "unrecognized option 'pinned_use_cuda_host_register'" in result.stderr
