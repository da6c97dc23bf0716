#include "runtime/Stream.h"

#include "profiler/DeviceActivity.h"
#include "runtime/Device.h"
#include "runtime/Launch.h"
#include "runtime/RuntimeError.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

namespace vdev {
namespace {

// Stream ids: 0 is the default stream; pool streams are 1 + level * kPoolSize + i,
// where level = -priority (0 for the default priority, 3 for the highest).
constexpr c10::StreamId kPoolSize = 32;
constexpr int kPriorityLevels = kLowestStreamPriority - kHighestStreamPriority + 1;
constexpr c10::StreamId kStreamsPerDevice = 1 + kPriorityLevels * kPoolSize;

size_t device_slots() {
  return static_cast<size_t>(std::max<c10::DeviceIndex>(device_count(), 1));
}

int priority_level(int priority) {
  return -std::clamp(priority, kHighestStreamPriority, kLowestStreamPriority);
}

std::atomic<uint32_t>& next_pool_index(c10::DeviceIndex device, int level) {
  static auto* counters = new std::atomic<uint32_t>[device_slots() * kPriorityLevels]();
  return counters[static_cast<size_t>(device) * kPriorityLevels + level];
}

std::vector<c10::StreamId>& thread_current_streams() {
  thread_local std::vector<c10::StreamId> streams(device_slots(), 0);
  return streams;
}

// Positions count the points marked in a stream; `observed` is the last position the
// host saw the stream get past. `handle` is the runtime's stream, made at first use.
struct StreamProgress {
  std::atomic<uint64_t> marked{0};
  std::atomic<uint64_t> observed{0};
  std::atomic<vdrtStream_t> handle{nullptr};
};

// Unchecked: for a device of an existing tensor and a stream id this runtime handed out.
StreamProgress& progress_at(c10::DeviceIndex device, c10::StreamId id) {
  // Leaked on purpose: tensors freed during static destruction still ask the
  // allocator, which asks for stream progress.
  static auto* progress = new StreamProgress[device_slots() * kStreamsPerDevice];
  return progress[static_cast<size_t>(device) * kStreamsPerDevice + id];
}

StreamProgress& progress_of(const c10::Stream& stream) {
  check_stream(stream);
  return progress_at(stream.device_index(), stream.id());
}

void raise_to(std::atomic<uint64_t>& value, uint64_t target) {
  uint64_t current = value.load();
  while (current < target && !value.compare_exchange_weak(current, target)) {
  }
}

vdrtStream_t runtime_stream_at(c10::DeviceIndex device, c10::StreamId id) {
  std::atomic<vdrtStream_t>& handle = progress_at(device, id).handle;
  vdrtStream_t stream = handle.load(std::memory_order_acquire);
  if (C10_LIKELY(stream != nullptr)) {
    return stream;
  }
  vdrtStream_t created = nullptr;
  if (id == 0) {
    check_runtime(vdrtDeviceGetDefaultStream(device, &created), "vdrtDeviceGetDefaultStream");
  } else {
    const int priority = -static_cast<int>((id - 1) / kPoolSize);
    check_runtime(vdrtStreamCreate(device, &created, priority), "vdrtStreamCreate");
  }
  if (!handle.compare_exchange_strong(stream, created, std::memory_order_acq_rel)) {
    // Another thread made it first; pool streams live as long as the process.
    if (id != 0) {
      vdrtStreamDestroy(created);
    }
    return stream;
  }
  return created;
}

// A c10 event: the runtime's event, made at the first record, and the stream point
// its last record marked.
struct Event {
  c10::DeviceIndex device;
  bool timing_enabled;
  vdrtEvent_t handle = nullptr;
  c10::StreamId stream = 0;
  uint64_t point = 0;
  // The check of the last record (EventCheckScope), or nullptr.
  std::shared_ptr<const EventCheckScope::Check> check;

  ~Event() {
    if (handle != nullptr) {
      vdrtEventDestroy(handle);
    }
  }

  StreamProgress& progress() const {
    return progress_at(device, stream);
  }
};

// The check of the innermost EventCheckScope on this thread.
thread_local std::shared_ptr<const EventCheckScope::Check> tls_event_check;

bool passes(const EventCheckScope::Check& check) {
  try {
    check.run();
    return true;
  } catch (...) {
    return false;  // the waiting stream fails with it
  }
}

} // namespace

EventCheckScope::EventCheckScope(const char* op_name, std::function<void()> check)
    : previous_(std::exchange(
          tls_event_check, std::make_shared<const Check>(Check{op_name, std::move(check)}))) {}

EventCheckScope::~EventCheckScope() {
  tls_event_check = std::move(previous_);
}

void check_stream(const c10::Stream& stream) {
  TORCH_CHECK(
      stream.device_type() == kDeviceType, "Expected a ", kBackendName, " stream, got a ",
      stream.device_type(), " stream");
  check_device_index(stream.device_index());
  TORCH_CHECK(
      stream.id() >= 0 && stream.id() < kStreamsPerDevice, "Stream id ", stream.id(),
      " is not a ", kBackendName, " stream: create streams with torch.", kBackendName,
      ".Stream() or torch.Stream('", kBackendName, "')");
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  return c10::Stream(
      c10::Stream::UNSAFE, make_device(device), current_stream_id(device));
}

c10::StreamId current_stream_id(c10::DeviceIndex device) {
  return thread_current_streams()[device];
}

c10::Stream default_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::DEFAULT, make_device(resolve_device_index(device)));
}

c10::Stream stream_from_pool(c10::DeviceIndex device, int priority) {
  device = resolve_device_index(device);
  const int level = priority_level(priority);
  const c10::StreamId index = next_pool_index(device, level).fetch_add(1) % kPoolSize;
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), 1 + level * kPoolSize + index);
}

c10::Stream exchange_stream(c10::Stream stream) {
  check_stream(stream);
  c10::Stream previous = current_stream(stream.device_index());
  thread_current_streams()[stream.device_index()] = stream.id();
  return previous;
}

int stream_priority(const c10::Stream& stream) {
  check_stream(stream);
  if (stream.id() == 0) {
    return kLowestStreamPriority;
  }
  return -static_cast<int>((stream.id() - 1) / kPoolSize);
}

uint64_t mark_stream_point(const c10::Stream& stream) {
  return progress_of(stream).marked.fetch_add(1) + 1;
}

bool stream_passed(const c10::Stream& stream, uint64_t point) {
  return progress_of(stream).observed.load() >= point;
}

vdrtStream_t runtime_stream(const c10::Stream& stream) {
  return runtime_stream_at(stream.device_index(), stream.id());
}

void synchronize_stream(const c10::Stream& stream) {
  check_stream(stream);
  StreamProgress& progress = progress_at(stream.device_index(), stream.id());
  const uint64_t reached = progress.marked.load();
  check_runtime(vdrtStreamSynchronize(runtime_stream(stream)), "vdrtStreamSynchronize");
  raise_to(progress.observed, reached);
}

bool query_stream(const c10::Stream& stream) {
  check_stream(stream);
  StreamProgress& progress = progress_at(stream.device_index(), stream.id());
  const uint64_t reached = progress.marked.load();
  vdrtError_t status = vdrtStreamQuery(runtime_stream(stream));
  if (status == vdrtErrorNotReady) {
    return false;
  }
  check_runtime(status, "vdrtStreamQuery");
  raise_to(progress.observed, reached);
  return true;
}

void synchronize_current_stream(c10::DeviceIndex device, const char* op_name) {
  const c10::StreamId id = current_stream_id(device);
  StreamProgress& progress = progress_at(device, id);
  const uint64_t reached = progress.marked.load();
  const vdrtError_t status = vdrtStreamSynchronize(runtime_stream_at(device, id));
  if (C10_UNLIKELY(status != vdrtSuccess)) {
    if (op_name != nullptr && is_capture_error(status)) {
      throw_capture_error(status, op_name);
    }
    throw_runtime_error(status, "vdrtStreamSynchronize");
  }
  raise_to(progress.observed, reached);
}

unsigned long long stream_capture_id(c10::DeviceIndex device, c10::StreamId id) {
  vdrtStreamCaptureStatus status = vdrtStreamCaptureStatusNone;
  unsigned long long capture = 0;
  check_runtime(
      vdrtStreamGetCaptureInfo(runtime_stream_at(device, id), &status, &capture),
      "vdrtStreamGetCaptureInfo");
  return capture;
}

bool is_stream_capturing(const c10::Stream& stream) {
  check_stream(stream);
  return stream_capture_id(stream.device_index(), stream.id()) != 0;
}

void synchronize_device(c10::DeviceIndex device) {
  check_device_index(device);
  profiler::ActivityScope activity(profiler::ActivityKind::kRuntime, "vdevDeviceSynchronize", device);
  std::vector<uint64_t> reached(kStreamsPerDevice);
  for (c10::StreamId id = 0; id < kStreamsPerDevice; ++id) {
    reached[id] = progress_at(device, id).marked.load();
  }
  check_runtime(vdrtDeviceSynchronize(device), "vdrtDeviceSynchronize");
  for (c10::StreamId id = 0; id < kStreamsPerDevice; ++id) {
    raise_to(progress_at(device, id).observed, reached[id]);
  }
}

void set_host_wait_hook(HostWaitHook hook) {
  check_runtime(vdrtSetHostWaitHook(hook), "vdrtSetHostWaitHook");
}

void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  check_stream(stream);
  if (*event == nullptr) {
    *event = new Event{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
  }
  auto* state = static_cast<Event*>(*event);
  TORCH_CHECK(
      state->device == stream.device_index(), "Event was created on ", kBackendName, ":",
      static_cast<int>(state->device), " but is recorded on a stream of ", stream.device());
  if (state->handle == nullptr) {
    check_runtime(
        vdrtEventCreate(
            &state->handle, state->timing_enabled ? vdrtEventDefault : vdrtEventDisableTiming),
        "vdrtEventCreate");
  }
  state->stream = stream.id();
  state->point = mark_stream_point(stream);
  state->check = tls_event_check;
  check_runtime(vdrtEventRecord(state->handle, runtime_stream(stream)), "vdrtEventRecord");
}

void destroy_event(void* event) noexcept {
  delete static_cast<Event*>(event);
}

bool query_event(void* event) {
  const auto* state = static_cast<const Event*>(event);
  if (state == nullptr || state->handle == nullptr) {
    return true;
  }
  vdrtError_t status = vdrtEventQuery(state->handle);
  if (status == vdrtErrorNotReady) {
    return false;
  }
  check_runtime(status, "vdrtEventQuery");
  raise_to(state->progress().observed, state->point);
  return true;
}

void synchronize_event(void* event) {
  const auto* state = static_cast<const Event*>(event);
  if (state == nullptr || state->handle == nullptr) {
    return;
  }
  check_runtime(vdrtEventSynchronize(state->handle), "vdrtEventSynchronize");
  raise_to(state->progress().observed, state->point);
  if (state->check) {
    state->check->run();
  }
}

void wait_event(void* event, const c10::Stream& stream) {
  check_stream(stream);
  const auto* state = static_cast<const Event*>(event);
  if (state == nullptr || state->handle == nullptr) {
    return;  // never recorded: nothing to wait for
  }
  if (state->check && query_event(event) && passes(*state->check)) {
    return;  // the stream would wait for nothing, and the check would pass
  }
  check_runtime(vdrtStreamWaitEvent(runtime_stream(stream), state->handle), "vdrtStreamWaitEvent");
  if (state->check) {
    launch(stream, state->check->op_name, [check = state->check] { check->run(); });
  }
}

double elapsed_milliseconds(void* start, void* end) {
  auto* first = static_cast<Event*>(start);
  auto* second = static_cast<Event*>(end);
  TORCH_CHECK(
      first != nullptr && second != nullptr && first->handle != nullptr &&
          second->handle != nullptr,
      "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(
      first->timing_enabled && second->timing_enabled,
      "Both events must be created with argument 'enable_timing=True'.");
  float milliseconds = 0;
  vdrtError_t status = vdrtEventElapsedTime(&milliseconds, first->handle, second->handle);
  TORCH_CHECK(
      status != vdrtErrorNotReady,
      "Both events must be complete before calculating elapsed time: synchronize the end "
      "event (or its stream) first");
  check_runtime(status, "vdrtEventElapsedTime");
  return milliseconds;
}

} // namespace vdev
