#pragma once

// Memory history, as torch.cuda.memory._record_memory_history keeps it: for each
// device, the last `max_entries` allocator events with the stack that caused them,
// and the stack that allocated each live block. A snapshot joins it with the
// allocator's blocks (segments, blocks and traces in CUDA's snapshot format, built
// in Python by csrc/python/MemorySnapshot.cpp).

#include "profiler/MemoryEvents.h"

#include <torch_vdev/Backend.h>

#include <c10/core/Allocator.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace vdev::profiler {

struct HistorySettings {
  // Off: forget everything recorded.
  bool enabled = false;
  // Keep the trace of events (CUDA's enabled="all"); else only the blocks' stacks
  // (enabled="state").
  bool trace = true;
  // Stacks for allocations (context="alloc"), also for frees (context="all"), or none.
  bool alloc_stacks = true;
  bool free_stacks = true;
  // C++ frames besides Python's (stacks="all").
  bool cpp_frames = false;
  size_t max_entries = SIZE_MAX;
};

VDEV_API void set_history(const HistorySettings& settings);

struct TraceEntry {
  MemoryAction action;
  c10::DeviceIndex device;
  uintptr_t addr;
  size_t size;
  c10::StreamId stream;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;
};

// Records an allocator event (report_memory calls it while history is on).
void record_in_history(const MemoryEvent& event);

// The trace of each device, oldest first.
VDEV_API std::vector<std::vector<TraceEntry>> history_traces();
// The stack that allocated the live block at `ptr`, if recorded.
VDEV_API std::shared_ptr<c10::GatheredContext> allocation_context(const void* ptr);

} // namespace vdev::profiler
