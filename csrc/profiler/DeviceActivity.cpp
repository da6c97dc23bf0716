#include "profiler/DeviceActivity.h"

#include "profiler/MemoryEvents.h"

#include "runtime/Stream.h"

#include <c10/util/ApproximateClock.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

namespace vdev::profiler {

namespace detail {
std::atomic<bool> recording_flag{false};
} // namespace detail

namespace {

// Records of the running session. Appended to under a lock: only while profiling,
// once per piece of device work.
struct Recorded {
  std::mutex mutex;
  std::vector<DeviceActivity> activities;
};

Recorded& recorded() {
  static Recorded* instance = new Recorded();
  return *instance;
}

thread_local std::vector<uint64_t> tls_correlation_ids;
// On a stream's worker, the launch of the kernel it runs.
thread_local const LaunchOrigin* tls_launch_origin = nullptr;

int32_t system_thread_id() {
  thread_local const int32_t id = static_cast<int32_t>(::syscall(SYS_gettid));
  return id;
}

} // namespace

void start_recording() {
  {
    std::lock_guard<std::mutex> lock(recorded().mutex);
    recorded().activities.clear();
  }
  detail::recording_flag.store(true, std::memory_order_release);
  set_memory_observer(kProfilerObserver, true);
}

void stop_recording() {
  detail::recording_flag.store(false, std::memory_order_release);
  set_memory_observer(kProfilerObserver, false);
}

std::vector<DeviceActivity> take_recorded() {
  std::lock_guard<std::mutex> lock(recorded().mutex);
  return std::move(recorded().activities);
}

void push_correlation_id(uint64_t id) {
  tls_correlation_ids.push_back(id);
}

void pop_correlation_id() {
  if (!tls_correlation_ids.empty()) {
    tls_correlation_ids.pop_back();
  }
}

LaunchOrigin launch_origin(const c10::Stream& stream) {
  return LaunchOrigin{
      stream.id(), tls_correlation_ids.empty() ? 0 : tls_correlation_ids.back(), system_thread_id()};
}

LaunchedWork::LaunchedWork(const LaunchOrigin& origin) : previous_(tls_launch_origin) {
  tls_launch_origin = &origin;
}

LaunchedWork::~LaunchedWork() {
  tls_launch_origin = previous_;
}

int64_t now_ns() {
  return c10::getTime();
}

void ActivityScope::begin(
    ActivityKind kind, const char* name, c10::DeviceIndex device, c10::StreamId stream,
    int64_t bytes) {
  active_ = true;
  activity_.kind = kind;
  activity_.name = name;
  activity_.device = device;
  activity_.bytes = bytes;
  if (tls_launch_origin != nullptr && stream == kCurrentStream) {
    activity_.stream = tls_launch_origin->stream;
    activity_.correlation_id = tls_launch_origin->correlation_id;
    activity_.thread_id = tls_launch_origin->thread_id;
  } else {
    activity_.stream = stream == kCurrentStream ? current_stream_id(device) : stream;
    activity_.correlation_id = tls_correlation_ids.empty() ? 0 : tls_correlation_ids.back();
    activity_.thread_id = system_thread_id();
  }
  activity_.start_ns = now_ns();
}

void ActivityScope::end() {
  activity_.end_ns = now_ns();
  // A session that stopped while this work ran has already taken its records.
  if (recording()) {
    std::lock_guard<std::mutex> lock(recorded().mutex);
    recorded().activities.push_back(activity_);
  }
}

} // namespace vdev::profiler
