#include "profiler/DeviceActivity.h"

#include "runtime/Stream.h"

#include <c10/util/ApproximateClock.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace vdev::profiler {

namespace detail {
std::atomic<bool> recording_flag{false};
} // namespace detail

namespace {

// Records of the running session, one buffer per thread that records: kernels run
// on the threads of many streams, and a thread appends to its own buffer without
// meeting the others. The buffer's lock is taken by its thread to append and by
// start_recording()/take_recorded() to clear and collect, so it is uncontended while
// a session records.
struct ThreadRecords {
  std::mutex mutex;
  std::vector<DeviceActivity> activities;
};

// Every thread's buffer, shared with the thread: a buffer outlives its thread until
// the session collects it.
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadRecords>> buffers;
};

Registry& registry() {
  static Registry* instance = new Registry();
  return *instance;
}

ThreadRecords& thread_records() {
  thread_local const std::shared_ptr<ThreadRecords> records = [] {
    auto buffer = std::make_shared<ThreadRecords>();
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().buffers.push_back(buffer);
    return buffer;
  }();
  return *records;
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
    std::lock_guard<std::mutex> registry_lock(registry().mutex);
    for (const auto& buffer : registry().buffers) {
      std::lock_guard<std::mutex> lock(buffer->mutex);
      buffer->activities.clear();
    }
  }
  detail::recording_flag.store(true, std::memory_order_release);
}

void stop_recording() {
  detail::recording_flag.store(false, std::memory_order_release);
}

std::vector<DeviceActivity> take_recorded() {
  std::vector<DeviceActivity> taken;
  {
    std::lock_guard<std::mutex> registry_lock(registry().mutex);
    auto& buffers = registry().buffers;
    for (const auto& buffer : buffers) {
      std::lock_guard<std::mutex> lock(buffer->mutex);
      taken.insert(taken.end(), buffer->activities.begin(), buffer->activities.end());
      buffer->activities.clear();
    }
    // The buffers of threads that have ended are held here alone.
    buffers.erase(
        std::remove_if(
            buffers.begin(), buffers.end(),
            [](const std::shared_ptr<ThreadRecords>& buffer) { return buffer.use_count() == 1; }),
        buffers.end());
  }
  return taken;
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
    ThreadRecords& records = thread_records();
    std::lock_guard<std::mutex> lock(records.mutex);
    records.activities.push_back(activity_);
  }
}

} // namespace vdev::profiler
