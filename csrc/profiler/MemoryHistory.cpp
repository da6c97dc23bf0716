#include "profiler/MemoryHistory.h"

#include "runtime/Device.h"

#include <c10/util/ApproximateClock.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <deque>
#include <mutex>

namespace vdev::profiler {

namespace {

class History {
 public:
  void configure(const HistorySettings& settings) {
    std::lock_guard<std::mutex> lock(mutex_);
    settings_ = settings;
    if (!settings.enabled) {
      traces_.clear();
      contexts_.clear();
    }
    for (auto& trace : traces_) {
      while (trace.size() > settings_.max_entries) {
        trace.pop_front();
      }
    }
    set_memory_observer(kHistoryObserver, settings.enabled);
  }

  void record(const MemoryEvent& event) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!settings_.enabled) {
      return;
    }
    const bool alloc = event.action == MemoryAction::kAlloc;
    const bool wants_stack = (alloc || event.action == MemoryAction::kSegmentAlloc)
        ? settings_.alloc_stacks
        : (settings_.free_stacks && event.action != MemoryAction::kFreeCompleted);
    std::shared_ptr<c10::GatheredContext> context;
    if (wants_stack) {
      context = torch::CapturedTraceback::gather(
          /*python=*/true, /*script=*/true, /*cpp=*/settings_.cpp_frames);
    }
    if (alloc) {
      contexts_[event.ptr] = context;
    } else if (event.action == MemoryAction::kFreeCompleted) {
      contexts_.erase(event.ptr);
    }
    if (!settings_.trace || settings_.max_entries == 0) {
      return;
    }
    if (traces_.size() <= static_cast<size_t>(event.device)) {
      traces_.resize(event.device + 1);
    }
    auto& trace = traces_[event.device];
    if (trace.size() == settings_.max_entries) {
      trace.pop_front();
    }
    trace.push_back(TraceEntry{
        event.action, event.device, reinterpret_cast<uintptr_t>(event.ptr), event.size,
        event.stream, c10::getTime() / 1000, std::move(context)});
  }

  std::vector<std::vector<TraceEntry>> traces() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::vector<TraceEntry>> result(device_count());
    for (size_t device = 0; device < traces_.size() && device < result.size(); ++device) {
      result[device].assign(traces_[device].begin(), traces_[device].end());
    }
    return result;
  }

  std::shared_ptr<c10::GatheredContext> context(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = contexts_.find(ptr);
    return found == contexts_.end() ? nullptr : found->second;
  }

 private:
  std::mutex mutex_;
  HistorySettings settings_;
  std::vector<std::deque<TraceEntry>> traces_;
  ska::flat_hash_map<const void*, std::shared_ptr<c10::GatheredContext>> contexts_;
};

History& history() {
  // Leaked on purpose: blocks may be freed during static destruction.
  static History* instance = new History();
  return *instance;
}

} // namespace

void set_history(const HistorySettings& settings) {
  history().configure(settings);
}

std::vector<std::vector<TraceEntry>> history_traces() {
  return history().traces();
}

std::shared_ptr<c10::GatheredContext> allocation_context(const void* ptr) {
  return history().context(ptr);
}

void record_in_history(const MemoryEvent& event) {
  history().record(event);
}

} // namespace vdev::profiler
