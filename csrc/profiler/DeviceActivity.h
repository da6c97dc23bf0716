#pragma once

// Device activity recording: what torch.profiler shows on vdev's device rows.
//
// While a profiler session records (recording()), vdev's runtime notes each piece of
// device work - kernels, copies, memsets - and the host-side runtime calls that order
// it (stream waits, event records and synchronizations), each with its device, stream,
// start and end, and the correlation id of the CPU operator that launched it. The
// Kineto plugin (KinetoPlugin.cpp) turns the records into trace activities.
//
// Off, each hook costs one relaxed load of a flag and a predicted branch.

#include <torch_vdev/Backend.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace vdev::profiler {

enum class ActivityKind : uint8_t {
  kKernel,
  kMemcpy,
  kMemset,
  // A host-side runtime call (its device and stream are those it acts on).
  kRuntime,
};

struct DeviceActivity {
  ActivityKind kind;
  // Static storage or an operator schema's name, which lives as long as the process.
  const char* name;
  c10::DeviceIndex device;
  c10::StreamId stream;
  int64_t start_ns;
  int64_t end_ns;
  // The CPU operator that launched the work (0: none was being profiled).
  uint64_t correlation_id;
  // Bytes moved or set (copies and memsets), else 0.
  int64_t bytes;
  // The host thread that submitted the work.
  int32_t thread_id;
};

namespace detail {
VDEV_API extern std::atomic<bool> recording_flag;
} // namespace detail

inline bool recording() {
  return detail::recording_flag.load(std::memory_order_relaxed);
}

// A profiler session's start and end. Records made in between are kept for take().
void start_recording();
void stop_recording();
std::vector<DeviceActivity> take_recorded();

// The correlation ids of the CPU operators being run on this thread (the profiler
// pushes one as each operator starts); device work is linked to the innermost one.
void push_correlation_id(uint64_t id);
void pop_correlation_id();

// Where a launched kernel comes from: its stream, the CPU operator that launched it
// and the launching thread. Taken at the launch while recording; a stream's worker
// attributes the device work it records to it while a LaunchedWork lives.
struct LaunchOrigin {
  c10::StreamId stream = 0;
  uint64_t correlation_id = 0;
  int32_t thread_id = 0;
};
LaunchOrigin launch_origin(const c10::Stream& stream);
class LaunchedWork {
 public:
  explicit LaunchedWork(const LaunchOrigin& origin);
  ~LaunchedWork();
  LaunchedWork(const LaunchedWork&) = delete;
  LaunchedWork& operator=(const LaunchedWork&) = delete;

 private:
  const LaunchOrigin* previous_;
};

// Nanoseconds on the clock of PyTorch's profiler events (c10::getTime).
int64_t now_ns();

// Records one piece of device work over its lifetime: the hook where a kernel, copy
// or memset runs. The launch facts (name, device, stream, launching operator) are
// taken where the work is submitted (LaunchOrigin for work launched on a stream);
// begin and end bracket where it executes.
class ActivityScope {
 public:
  // Work on `device`'s current stream.
  ActivityScope(ActivityKind kind, const char* name, c10::DeviceIndex device, int64_t bytes = 0) {
    if (C10_UNLIKELY(recording())) {
      begin(kind, name, device, kCurrentStream, bytes);
    }
  }
  // A runtime call acting on `stream` (event record, stream wait, synchronize).
  ActivityScope(const char* name, const c10::Stream& stream) {
    if (C10_UNLIKELY(recording())) {
      begin(ActivityKind::kRuntime, name, stream.device_index(), stream.id(), 0);
    }
  }
  ~ActivityScope() {
    if (C10_UNLIKELY(active_)) {
      end();
    }
  }
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  static constexpr c10::StreamId kCurrentStream = -1;

  VDEV_API void begin(
      ActivityKind kind, const char* name, c10::DeviceIndex device, c10::StreamId stream,
      int64_t bytes);
  VDEV_API void end();

  bool active_ = false;
  DeviceActivity activity_;
};

} // namespace vdev::profiler
