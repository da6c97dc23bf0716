#pragma once

// What the caching allocator tells observers of device memory: torch.profiler's
// memory events (profile_memory=True) and the memory history behind snapshots
// (MemoryHistory.h). The allocator reports at a few points, each behind
// memory_observed(): one relaxed load while nobody observes.

#include "profiler/DeviceActivity.h"

#include <torch_vdev/Backend.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstddef>

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

namespace detail {
VDEV_API extern std::atomic<bool> memory_history_flag;
} // namespace detail

inline bool memory_observed() {
  return recording() || detail::memory_history_flag.load(std::memory_order_relaxed);
}

// Called by the allocator under its lock when memory_observed().
VDEV_API void report_memory(const MemoryEvent& event);

} // namespace vdev::profiler
