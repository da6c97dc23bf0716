#include "runtime/Stream.h"

#include "profiler/DeviceActivity.h"
#include "runtime/Device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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
// host saw the stream get past.
struct StreamProgress {
  std::atomic<uint64_t> marked{0};
  std::atomic<uint64_t> observed{0};
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

struct Event {
  c10::DeviceIndex device;
  bool timing_enabled;
  bool recorded = false;
  c10::StreamId stream = 0;
  uint64_t point = 0;
  std::chrono::steady_clock::time_point time{};
};

} // namespace

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

void observe_stream(const c10::Stream& stream) {
  StreamProgress& progress = progress_of(stream);
  raise_to(progress.observed, progress.marked.load());
}

void observe_current_stream(c10::DeviceIndex device) {
  StreamProgress& progress = progress_at(device, current_stream_id(device));
  raise_to(progress.observed, progress.marked.load());
}

void observe_device(c10::DeviceIndex device) {
  check_device_index(device);
  profiler::ActivityScope activity(profiler::ActivityKind::kRuntime, "vdevDeviceSynchronize", device);
  for (c10::StreamId id = 0; id < kStreamsPerDevice; ++id) {
    observe_stream(c10::Stream(c10::Stream::UNSAFE, make_device(device), id));
  }
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
  state->recorded = true;
  state->stream = stream.id();
  state->point = mark_stream_point(stream);
  state->time = std::chrono::steady_clock::now();
}

void destroy_event(void* event) noexcept {
  delete static_cast<Event*>(event);
}

void observe_event(void* event) {
  const auto* state = static_cast<const Event*>(event);
  if (state == nullptr || !state->recorded) {
    return;
  }
  raise_to(
      progress_of(c10::Stream(c10::Stream::UNSAFE, make_device(state->device), state->stream))
          .observed,
      state->point);
}

double elapsed_milliseconds(void* start, void* end) {
  auto* first = static_cast<Event*>(start);
  auto* second = static_cast<Event*>(end);
  TORCH_CHECK(
      first != nullptr && second != nullptr && first->recorded && second->recorded,
      "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(
      first->timing_enabled && second->timing_enabled,
      "Both events must be created with argument 'enable_timing=True'.");
  return std::chrono::duration<double, std::milli>(second->time - first->time).count();
}

} // namespace vdev
