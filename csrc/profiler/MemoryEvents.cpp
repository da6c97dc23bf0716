#include "profiler/MemoryEvents.h"

#include "profiler/MemoryHistory.h"

#include <c10/core/Allocator.h>

namespace vdev::profiler {

namespace detail {
std::atomic<uint8_t> memory_observers{0};
} // namespace detail

void set_memory_observer(MemoryObserver observer, bool present) {
  if (present) {
    detail::memory_observers.fetch_or(observer);
  } else {
    detail::memory_observers.fetch_and(static_cast<uint8_t>(~observer));
  }
}

namespace {

// A no-op unless the thread's profiler records memory.
void report_to_profiler(const MemoryEvent& event) {
  const c10::Device device = make_device(event.device);
  switch (event.action) {
    case MemoryAction::kAlloc:
      c10::reportMemoryUsageToProfiler(
          const_cast<void*>(event.ptr), static_cast<int64_t>(event.size), event.allocated,
          event.reserved, device);
      break;
    case MemoryAction::kFreeRequested:
      c10::reportMemoryUsageToProfiler(
          const_cast<void*>(event.ptr), -static_cast<int64_t>(event.size), event.allocated,
          event.reserved, device);
      break;
    case MemoryAction::kOom:
      c10::reportOutOfMemoryToProfiler(
          static_cast<int64_t>(event.size), event.allocated, event.reserved, device);
      break;
    default:
      break;
  }
}

} // namespace

void report_memory(const MemoryEvent& event) {
  report_to_profiler(event);
  if (memory_observed_by(kHistoryObserver)) {
    record_in_history(event);
  }
}

} // namespace vdev::profiler
