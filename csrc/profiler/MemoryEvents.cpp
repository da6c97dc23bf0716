#include "profiler/MemoryEvents.h"

#include "profiler/MemoryHistory.h"

#include <c10/core/Allocator.h>

namespace vdev::profiler {

namespace detail {
std::atomic<bool> memory_history_flag{false};
} // namespace detail

void report_memory(const MemoryEvent& event) {
  if (recording()) {
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
  if (detail::memory_history_flag.load(std::memory_order_relaxed)) {
    record_in_history(event);
  }
}

} // namespace vdev::profiler
