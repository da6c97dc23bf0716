// Memory snapshots in the format of torch.cuda.memory._snapshot(), so PyTorch's
// torch.cuda._memory_viz renders them: segments with their blocks, and per-device
// traces, with the stacks recorded by the memory history as lists of frames.
#include "python/MemorySnapshot.h"

#include "profiler/MemoryHistory.h"
#include "runtime/Allocator.h"
#include "runtime/AllocatorConfig.h"
#include "runtime/Device.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

// Declared by torch/csrc/profiler/python/combined_traceback.h, which also includes
// nlohmann/json.hpp, a header PyTorch does not install; libtorch_python exports both.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
} // namespace torch

namespace vdev {
namespace {

constexpr size_t kSmallPoolLimit = size_t{1} << 20;

const char* action_name(profiler::MemoryAction action) {
  switch (action) {
    case profiler::MemoryAction::kAlloc:
      return "alloc";
    case profiler::MemoryAction::kFreeRequested:
      return "free_requested";
    case profiler::MemoryAction::kFreeCompleted:
      return "free_completed";
    case profiler::MemoryAction::kSegmentAlloc:
      return "segment_alloc";
    case profiler::MemoryAction::kSegmentFree:
      return "segment_free";
    case profiler::MemoryAction::kOom:
      break;
  }
  return "oom";
}

const char* state_name(BlockState::State state) {
  switch (state) {
    case BlockState::kAllocated:
      return "active_allocated";
    case BlockState::kPendingFree:
      return "active_pending_free";
    case BlockState::kCached:
      break;
  }
  return "inactive";
}

// Symbolizes every stack at once (as CUDA's snapshot does): frames shared between
// stacks are resolved once.
class Frames {
 public:
  // Returns the slot whose frames the stack will get.
  size_t add(const std::shared_ptr<c10::GatheredContext>& context) {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (traceback == nullptr) {
      return kNone;
    }
    tracebacks_.push_back(traceback);
    return tracebacks_.size() - 1;
  }

  void resolve() {
    symbolized_ = torch::py_symbolize(tracebacks_);
  }

  py::object get(size_t slot) const {
    return slot == kNone ? py::list() : symbolized_.at(slot);
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<py::object> symbolized_;
};

py::dict snapshot() {
  const std::vector<BlockState> blocks = memory_blocks();
  // Keeps the stacks alive until they are symbolized.
  std::vector<std::shared_ptr<c10::GatheredContext>> block_contexts;
  std::vector<std::vector<profiler::TraceEntry>> traces = profiler::history_traces();
  Frames frames;
  std::vector<size_t> block_slots;
  for (const BlockState& block : blocks) {
    block_contexts.push_back(profiler::allocation_context(block.ptr));
    block_slots.push_back(frames.add(block_contexts.back()));
  }
  std::vector<std::vector<size_t>> trace_slots(traces.size());
  for (size_t device = 0; device < traces.size(); ++device) {
    for (const profiler::TraceEntry& entry : traces[device]) {
      trace_slots[device].push_back(frames.add(entry.context));
    }
  }
  frames.resolve();

  py::list segments;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockState& block = blocks[i];
    const bool active = block.state != BlockState::kCached;
    const auto address = reinterpret_cast<uintptr_t>(block.ptr);
    py::dict entry;
    entry["address"] = address;
    entry["size"] = block.size;
    entry["requested_size"] = block.requested;
    entry["state"] = state_name(block.state);
    entry["frames"] = frames.get(block_slots[i]);
    py::dict segment;
    segment["device"] = static_cast<int>(block.device);
    segment["address"] = address;
    segment["total_size"] = block.size;
    segment["allocated_size"] = block.state == BlockState::kAllocated ? block.size : 0;
    segment["active_size"] = active ? block.size : 0;
    segment["requested_size"] = block.requested;
    segment["stream"] = block.stream;
    segment["segment_type"] = block.size < kSmallPoolLimit ? "small" : "large";
    segment["segment_pool_id"] = py::make_tuple(0, 0);
    segment["is_expandable"] = false;
    segment["frames"] = frames.get(block_slots[i]);
    segment["blocks"] = py::list(py::make_tuple(entry));
    segments.append(segment);
  }

  py::list device_traces;
  for (size_t device = 0; device < traces.size(); ++device) {
    py::list trace;
    for (size_t i = 0; i < traces[device].size(); ++i) {
      const profiler::TraceEntry& entry = traces[device][i];
      py::dict event;
      event["action"] = action_name(entry.action);
      event["addr"] = entry.addr;
      event["size"] = entry.size;
      event["stream"] = entry.stream;
      event["time_us"] = entry.time_us;
      event["frames"] = frames.get(trace_slots[device][i]);
      if (entry.action == profiler::MemoryAction::kOom) {
        const size_t capacity = memory_capacity(static_cast<c10::DeviceIndex>(device));
        const auto stats = caching_allocator().getDeviceStats(static_cast<c10::DeviceIndex>(device));
        const auto reserved = static_cast<size_t>(stats.reserved_bytes[0].current);
        event["device_free"] = capacity > reserved ? capacity - reserved : 0;
      }
      trace.append(event);
    }
    device_traces.append(trace);
  }

  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = device_traces;
  result["allocator_settings"] = allocator_settings();
  result["external_annotations"] = py::list();
  return result;
}

void record_memory_history(
    std::optional<std::string> enabled, std::optional<std::string> context,
    const std::string& stacks, size_t max_entries) {
  profiler::HistorySettings settings;
  settings.enabled = enabled.has_value();
  if (settings.enabled) {
    torch::installCapturedTracebackPython();
    settings.trace = *enabled == "all";
    settings.alloc_stacks = context.has_value();
    settings.free_stacks = context.has_value() && *context == "all";
    settings.cpp_frames = stacks == "all";
    settings.max_entries = max_entries;
  }
  profiler::set_history(settings);
}

} // namespace

void bind_memory_snapshot(py::module& module) {
  module.def(
      "record_memory_history", &record_memory_history, py::arg("enabled"), py::arg("context"),
      py::arg("stacks"), py::arg("max_entries"));
  module.def("memory_snapshot", &snapshot);
  // Its warnings (expandable_segments) become Python warnings.
  module.def("set_allocator_settings", [](const std::string& settings) {
    HANDLE_TH_ERRORS
    set_allocator_settings(settings);
    END_HANDLE_TH_ERRORS_PYBIND
  });
  module.def("allocator_settings", &allocator_settings);
}

} // namespace vdev
