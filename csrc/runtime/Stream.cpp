#include "runtime/Stream.h"

#include "runtime/Device.h"

#include <atomic>
#include <chrono>
#include <vector>

namespace vdev {
namespace {

// Stream ids: 0 is the default stream; pool streams are 1 + priority_slot * kPoolSize + i.
// Priorities follow CUDA: 0 is normal, negative is higher.
constexpr c10::StreamId kPoolSize = 32;
constexpr int kPriorityLevels = 2;

std::atomic<uint32_t>& next_pool_index(c10::DeviceIndex device, int priority_slot) {
  static std::vector<std::atomic<uint32_t>> counters(
      static_cast<size_t>(std::max<c10::DeviceIndex>(device_count(), 1)) * kPriorityLevels);
  return counters[static_cast<size_t>(device) * kPriorityLevels + priority_slot];
}

std::vector<c10::StreamId>& thread_current_streams() {
  thread_local std::vector<c10::StreamId> streams(
      static_cast<size_t>(std::max<c10::DeviceIndex>(device_count(), 1)), 0);
  return streams;
}

struct Event {
  c10::DeviceIndex device;
  bool timing_enabled;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

} // namespace

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve_device_index(device);
  return c10::Stream(
      c10::Stream::UNSAFE, make_device(device), thread_current_streams()[device]);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::DEFAULT, make_device(resolve_device_index(device)));
}

c10::Stream stream_from_pool(c10::DeviceIndex device, int priority) {
  device = resolve_device_index(device);
  const int slot = priority < 0 ? 1 : 0;
  const c10::StreamId index = next_pool_index(device, slot).fetch_add(1) % kPoolSize;
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), 1 + slot * kPoolSize + index);
}

c10::Stream exchange_stream(c10::Stream stream) {
  TORCH_CHECK(
      stream.device_type() == kDeviceType, "Expected a ", kBackendName, " stream, got ",
      stream.device_type());
  c10::DeviceIndex device = resolve_device_index(stream.device_index());
  c10::Stream previous = current_stream(device);
  thread_current_streams()[device] = stream.id();
  return previous;
}

void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  if (*event == nullptr) {
    *event = new Event{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
  }
  auto* state = static_cast<Event*>(*event);
  TORCH_CHECK(
      state->device == stream.device_index(), "Event was created on ", kBackendName, ":",
      static_cast<int>(state->device), " but is recorded on a stream of ", stream.device());
  state->recorded = true;
  state->time = std::chrono::steady_clock::now();
}

void destroy_event(void* event) noexcept {
  delete static_cast<Event*>(event);
}

bool event_completed(void* /*event*/) {
  return true;
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
