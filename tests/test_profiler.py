"""torch.profiler on vdev: device kernels, copies, memsets and runtime events from
vdev's Kineto plugin, correlated with the CPU operators that launched them; the
legacy profiler's device times; memory events; schedules and trace handlers."""

import json
import os
import threading
import time

import pytest
import torch
import torch_vdev
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("vdev")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(16, 32, device="vdev")
    targets = torch.randint(0, 4, (16,), device="vdev")

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def chrome_trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def test_profiler_activity_has_vdevs_name():
    assert ProfilerActivity.VDEV == ProfilerActivity.PrivateUse1
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_training_step_lists_its_kernels_with_device_times_within_wall_time():
    step = training_step()
    step()
    started = time.perf_counter_ns()
    with profile(activities=ACTIVITIES) as prof:
        step()
    wall_us = (time.perf_counter_ns() - started) / 1000
    kernels = [e for e in device_events(prof) if e.name.startswith("vdev_kernel[")]
    names = {e.name for e in kernels}
    # Forward, backward and the optimizer's kernels (native and fused).
    for expected in ("vdev_kernel[aten::addmm]", "vdev_kernel[aten::mm]", "vdev_kernel[aten::relu]"):
        assert expected in names, sorted(names)
    assert all(e.device_index == 0 for e in kernels)
    device_total = sum(e.time_range.elapsed_us() for e in device_events(prof))
    assert 0 < device_total <= wall_us
    # The table gives each op's kernels to it: the ops' device times add up to the same.
    op_rows = [e for e in prof.key_averages() if e.device_type == DeviceType.CPU]
    assert sum(e.self_device_time_total for e in op_rows) == pytest.approx(device_total, rel=1e-6)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=20)
    assert "Self VDEV" in table and "VDEV total" in table
    # Each kernel's time is attributed to the op that launched it.
    addmm = [e for e in prof.key_averages() if e.key == "aten::addmm"]
    assert addmm and addmm[0].self_device_time_total > 0


def test_kernels_are_correlated_with_the_op_that_launched_them():
    x = torch.randn(64, 64, device="vdev")
    with profile(activities=ACTIVITIES) as prof:
        torch.mm(x, x)
    ops = [e for e in prof.events() if e.name == "aten::mm" and e.device_type == DeviceType.CPU]
    assert len(ops) == 1
    assert [k.name for k in ops[0].kernels] == ["vdev_kernel[aten::mm]"]
    kernel = next(e for e in device_events(prof) if e.name == "vdev_kernel[aten::mm]")
    # Linked to the innermost aten::mm: the call of the CPU kernel inside vdev's.
    launching = [
        e.name()
        for e in prof.profiler.kineto_results.events()
        if e.device_type() == DeviceType.CPU and e.correlation_id() == kernel.linked_correlation_id
    ]
    assert sorted(launching) == ["aten::mm", "vdevLaunchKernel"]
    # Launched on the stream: it runs after the op launched it, maybe after it returned.
    assert ops[0].time_range.start <= kernel.time_range.start <= kernel.time_range.end


def test_work_of_threads_that_ended_is_recorded_on_its_streams_row(tmp_path):
    # Each thread records into its own buffer; the session collects them all, also
    # the buffers of threads that ended before it stopped.
    x = torch.randn(16, 16, device="vdev")
    streams = [torch.vdev.Stream() for _ in range(2)]

    def run(stream):
        with torch.vdev.stream(stream):
            for _ in range(3):
                torch.mm(x, x)

    with profile(activities=ACTIVITIES) as prof:
        threads = [threading.Thread(target=run, args=(stream,)) for stream in streams]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # (The profiler records the operators of the thread it started on, as on CUDA:
    # these kernels have no CPU operator to link to.)
    rows = [e["tid"] for e in chrome_trace(prof, tmp_path) if e.get("name") == "vdev_kernel[aten::mm]"]
    assert sorted(rows) == sorted([stream.stream_id for stream in streams] * 3)


def test_fallback_and_python_kernels_are_device_activities():
    x = torch.randn(8, device="vdev")
    relu = torch_vdev.kernel("aten::relu")(lambda t: torch.clamp(t, min=0))
    try:
        with profile(activities=ACTIVITIES) as prof:
            torch.special.i0e(x)  # the boxed fallback
            torch.relu(x)  # the Python kernel
    finally:
        relu.remove()
    names = {e.name for e in device_events(prof)}
    assert "vdev_kernel[aten::special_i0e]" in names
    assert "vdev_kernel[aten::relu]" in names


def test_copies_and_memsets_carry_their_bytes(tmp_path):
    host = torch.randn(1000)
    with profile(activities=ACTIVITIES) as prof:
        device = host.to("vdev")
        device.fill_(0)  # a memset, as cudaMemsetAsync
        device.fill_(1)  # a kernel
        back = device.cpu()
        device.clone().copy_(device)
        device.sum().item()
    events = chrome_trace(prof, tmp_path)
    copies = [(e["name"], e["args"]["bytes"]) for e in events if e.get("cat") == "gpu_memcpy"]
    assert ("Memcpy HtoD (Host -> Device)", 4000) in copies
    assert ("Memcpy DtoH (Device -> Host)", 4000) in copies
    assert ("Memcpy DtoD (Device -> Device)", 4000) in copies
    assert ("Memcpy DtoH (Device -> Host)", 4) in copies  # .item()
    memsets = [(e["name"], e["args"]["bytes"]) for e in events if e.get("cat") == "gpu_memset"]
    assert memsets == [("Memset (Device)", 4000)]
    assert "vdev_kernel[aten::fill_]" in {e["name"] for e in events if e.get("cat") == "kernel"}
    assert torch.equal(back, torch.ones(1000))


def test_chrome_trace_has_a_row_per_stream_and_flows_from_launches(tmp_path):
    x = torch.randn(32, 32, device="vdev")
    side = torch.vdev.Stream()
    with profile(activities=ACTIVITIES) as prof:
        torch.mm(x, x)
        with torch.vdev.stream(side):
            torch.add(x, x)
    events = chrome_trace(prof, tmp_path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {(e["name"], e["tid"]) for e in kernels} == {
        ("vdev_kernel[aten::mm]", 0),
        ("vdev_kernel[aten::add]", side.stream_id),
    }
    assert all(e["pid"] == 0 for e in kernels)
    rows = {(e["pid"], e["tid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
    assert (0, 0, "stream 0") in rows and (0, side.stream_id, f"stream {side.stream_id}") in rows
    devices = {e["args"]["name"] for e in events if e.get("name") == "process_name" and e["pid"] == 0}
    assert devices == {"vdev 0"}
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert len(starts) >= 2 and starts.keys() == ends.keys()
    launches = {e["name"] for e in events if e.get("cat") == "privateuse1_runtime"}
    assert "vdevLaunchKernel" in launches
    # Each flow ends on a kernel's row and starts on the host thread.
    kernel_rows = {(e["pid"], e["tid"]) for e in kernels}
    assert all((end["pid"], end["tid"]) in kernel_rows for end in ends.values())
    assert all(start["pid"] == os.getpid() for start in starts.values())


def test_stream_and_event_calls_are_runtime_events(tmp_path):
    side = torch.vdev.Stream()
    with profile(activities=ACTIVITIES) as prof:
        event = torch.vdev.Event()
        event.record()
        side.wait_event(event)
        event.synchronize()
        side.synchronize()
        torch.vdev.synchronize()
    names = [e["name"] for e in chrome_trace(prof, tmp_path) if e.get("cat") == "privateuse1_runtime"]
    for expected in (
        "vdevEventRecord",
        "vdevStreamWaitEvent",
        "vdevEventSynchronize",
        "vdevStreamSynchronize",
        "vdevDeviceSynchronize",
    ):
        assert expected in names, names


def test_record_shapes_and_with_stack():
    x = torch.randn(8, 16, device="vdev")
    w = torch.randn(16, 4, device="vdev")
    with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True) as prof:
        torch.mm(x, w)
    rows = [e for e in prof.key_averages(group_by_input_shape=True) if e.key == "aten::mm"]
    assert rows[0].input_shapes == [[8, 16], [16, 4]]
    # with_stack records the Python calls around the ops.
    assert any(e.name.startswith("tests/test_profiler.py(") or "test_profiler.py(" in e.name for e in prof.events())


# As CUDA's allocations, vdev's are memory events whichever activities are recorded.
@pytest.mark.parametrize("activities", [ACTIVITIES, [ProfilerActivity.CPU]], ids=["cpu_and_vdev", "cpu_only"])
def test_profile_memory_reports_device_allocations_as_memory_stats_count_them(tmp_path, activities):
    torch.vdev.empty_cache()
    before = torch.vdev.memory_stats()
    with profile(activities=activities, profile_memory=True) as prof:
        x = torch.randn(256, 256, device="vdev")
        y = x * 2
        del x, y
    after = torch.vdev.memory_stats()
    memory = [e for e in chrome_trace(prof, tmp_path) if e.get("name") == "[memory]"]
    vdev_memory = [e["args"] for e in memory if e["args"]["Device Type"] == int(DeviceType.PrivateUse1)]
    allocated = sum(a["Bytes"] for a in vdev_memory if a["Bytes"] > 0)
    freed = -sum(a["Bytes"] for a in vdev_memory if a["Bytes"] < 0)
    assert allocated == after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"]
    assert freed == after["allocated_bytes.all.freed"] - before["allocated_bytes.all.freed"]
    assert allocated >= 2 * 256 * 256 * 4
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::mul"].device_memory_usage == 256 * 256 * 4


def test_schedule_and_tensorboard_trace_handler(tmp_path):
    step = training_step()
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(
        activities=ACTIVITIES,
        schedule=schedule,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path)),
    ) as prof:
        for _ in range(5):
            step()
            prof.step()
    traces = list(tmp_path.glob("*.pt.trace.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}
    assert any(e["name"] == "vdev_kernel[aten::addmm]" for e in kernels)


def test_nothing_is_recorded_outside_a_profile():
    x = torch.randn(16, device="vdev")
    torch.add(x, x)  # before: not recorded
    with profile(activities=ACTIVITIES) as prof:
        torch.mul(x, x)
    torch.sub(x, x)  # after: not recorded
    names = {e.name for e in device_events(prof)}
    assert "vdev_kernel[aten::mul]" in names
    assert "vdev_kernel[aten::add]" not in names and "vdev_kernel[aten::sub]" not in names


def test_legacy_profiler_gives_positive_device_times_without_complaint(capfd):
    model = torch.nn.Linear(64, 64).to("vdev")
    x = torch.randn(32, 64, device="vdev")
    model(x)
    with torch.autograd.profiler.profile(use_device="vdev") as prof:
        for _ in range(3):
            model(x).sum()
    captured = capfd.readouterr()
    assert "not enabled" not in captured.err + captured.out
    rows = {e.key: e for e in prof.key_averages()}
    addmm = rows["aten::addmm"]
    assert addmm.count == 3
    assert 0 < addmm.device_time_total <= addmm.cpu_time_total * 1.5 + 50
    assert all(e.device_time_total >= 0 and e.cpu_time_total >= 0 for e in prof.key_averages())
    assert "Self VDEV" in prof.key_averages().table()


def test_profile_training_example_writes_a_trace_and_a_snapshot(tmp_path):
    import pathlib
    import pickle
    import subprocess
    import sys

    example = pathlib.Path(__file__).resolve().parent.parent / "examples" / "profile_training.py"
    result = subprocess.run(
        [sys.executable, str(example), "--out", str(tmp_path), "--steps", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "vdev_kernel[aten::addmm]" in result.stdout
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)
    with open(tmp_path / "snapshot.pickle", "rb") as f:
        snapshot = pickle.load(f)
    assert snapshot["device_traces"][0]


def test_each_device_is_its_own_process_row(tmp_path):
    x1 = torch.randn(8, device="vdev:1")
    x0 = torch.randn(8, device="vdev:0")
    with profile(activities=ACTIVITIES) as prof:
        torch.add(x1, x1)
        torch.mul(x0, x0)
    events = chrome_trace(prof, tmp_path)
    kernels = {(e["pid"], e["name"]) for e in events if e.get("cat") == "kernel"}
    assert kernels == {(1, "vdev_kernel[aten::add]"), (0, "vdev_kernel[aten::mul]")}
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names[0] == "vdev 0" and names[1] == "vdev 1"
    assert {(e.device_index, e.name) for e in device_events(prof)} == {
        (1, "vdev_kernel[aten::add]"),
        (0, "vdev_kernel[aten::mul]"),
    }


def test_autograd_profiler_with_kineto_uses_the_plugin():
    model = torch.nn.Linear(64, 64).to("vdev")
    x = torch.randn(32, 64, device="vdev")
    with torch.autograd.profiler.profile(use_device="vdev", use_kineto=True) as prof:
        model(x).sum()
    rows = {e.key: e for e in prof.key_averages()}
    assert "vdev_kernel[aten::addmm]" in rows
    kernel_time = rows["vdev_kernel[aten::addmm]"].self_device_time_total
    assert rows["aten::addmm"].self_device_time_total == pytest.approx(kernel_time)
    assert kernel_time > 0
