#pragma once

// What the caching allocator tells observers of device memory: torch.profiler's
// memory events (profile_memory=True) and the memory history behind snapshots
// (MemoryHistory.h). The allocator reports at a few points, each behind
// memory_observed(): a relaxed load and c10's check of the thread's profiler while
// nobody observes.

#include "profiler/DeviceActivity.h"

#include <torch_vdev/Backend.h>

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vdev::profiler {

// CUDA's trace actions (torch.cuda.memory._snapshot()["device_traces"]).
enum class MemoryAction : uint8_t {
  kAlloc,
  // The tensor let go of the block; it is reusable once streams that used it pass.
  kFreeRequested,
  // The block is back in the cache.
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kOom,
};

struct MemoryEvent {
  MemoryAction action;
  c10::DeviceIndex device;
  const void* ptr;
  // Bytes of the block (for kOom: the rounded request).
  size_t size;
  c10::StreamId stream;
  // The device's allocated and reserved bytes after the event.
  size_t allocated;
  size_t reserved;
};

enum MemoryObserver : uint8_t {
  kHistoryObserver = 1,
};

namespace detail {
// The observers present, one bit each: allocations and frees test them in one load.
VDEV_API extern std::atomic<uint8_t> memory_observers;
} // namespace detail

// As CUDA's allocator, vdev's reports to the profiler of the allocating thread whenever
// it records memory (profile_memory=True), whichever activities it records.
inline bool memory_observed() {
  return detail::memory_observers.load(std::memory_order_relaxed) != 0 ||
      c10::memoryProfilingEnabled();
}

inline bool memory_observed_by(MemoryObserver observer) {
  return (detail::memory_observers.load(std::memory_order_relaxed) & observer) != 0;
}

void set_memory_observer(MemoryObserver observer, bool present);

// Called by the allocator under its lock when memory_observed().
VDEV_API void report_memory(const MemoryEvent& event);

} // namespace vdev::profiler
