#include "distributed/CommunicationStream.h"

#include "runtime/Launch.h"
#include "runtime/Stream.h"

namespace vdev {

namespace {

// Work queued on `waiter` after this waits for the work queued so far on `stream`. An
// event of its own: recording a reused event again (on another stream) would let the
// queued wait end when either record completes.
void order_after(const c10::Stream& stream, const c10::Stream& waiter) {
  void* event = nullptr;
  record_event(&event, stream, c10::EventFlag::BACKEND_DEFAULT);
  wait_event(event, waiter);
  destroy_event(event);  // the runtime keeps what the queued wait needs
}

} // namespace

CommunicationStreams::~CommunicationStreams() {
  drain();
}

c10::Stream CommunicationStreams::stream_of(c10::DeviceIndex device) {
  const auto index = static_cast<size_t>(device);
  if (devices_.size() <= index) {
    devices_.resize(index + 1);
  }
  OfDevice& of_device = devices_[index];
  if (!of_device.stream) {
    of_device.stream = stream_from_pool(device, kHighestStreamPriority);
  }
  const c10::Stream stream = *of_device.stream;
  if (last_ && *last_ != stream) {
    order_after(*last_, stream);
  }
  last_ = stream;
  return stream;
}

bool CallersOrdered::covers(c10::DeviceIndex device, const c10::Stream& caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto index = static_cast<size_t>(device);
  if (devices_.size() <= index || !devices_[index] || devices_[index]->caller != caller) {
    return false;
  }
  return devices_[index]->count == queued_count(caller);
}

void CallersOrdered::set(c10::DeviceIndex device, const c10::Stream& caller, uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto index = static_cast<size_t>(device);
  if (devices_.size() <= index) {
    devices_.resize(index + 1);
  }
  devices_[index] = Covered{caller, count};
}

void CallersOrdered::wait_for_collective(
    c10::DeviceIndex device, const std::function<std::optional<uint64_t>()>& queue_wait) {
  const c10::Stream caller = current_stream(device);
  const uint64_t before = queued_count(caller);
  const std::optional<uint64_t> queued = queue_wait();
  const uint64_t after = queued_count(caller);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto index = static_cast<size_t>(device);
  // Covered before, and nothing but the wait queued since (by this or another thread).
  if (queued && after == before + *queued && index < devices_.size() && devices_[index] &&
      devices_[index]->caller == caller && devices_[index]->count == before) {
    devices_[index]->count = after;
  }
}

std::optional<c10::Stream> CommunicationStreams::caller_to_wait_for(
    c10::DeviceIndex device, const c10::Stream& stream) {
  const c10::Stream caller = current_stream(device);
  if (caller == stream || callers_ordered_->covers(device, caller)) {
    return std::nullopt;
  }
  // Counted first: the work counted is complete if the stream is idle after.
  const uint64_t queued = queued_count(caller);
  if (query_stream(caller)) {
    callers_ordered_->set(device, caller, queued);
    return std::nullopt;
  }
  return caller;
}

void CommunicationStreams::wait_for_caller(
    c10::DeviceIndex device, const c10::Stream& caller, const c10::Stream& stream) {
  const uint64_t before = queued_count(caller);
  order_after(caller, stream);
  const uint64_t after = queued_count(caller);
  // The event's record covers the work before it; anything another thread queued
  // meanwhile may come after it.
  callers_ordered_->set(device, caller, after == before + 1 ? after : before);
}

c10::Stream CommunicationStreams::launch(
    c10::DeviceIndex device, const char* op_name, std::function<void()> prologue,
    std::function<void()> collective) {
  std::lock_guard<std::mutex> lock(mutex_);
  const c10::Stream stream = stream_of(device);
  if (const std::optional<c10::Stream> caller = caller_to_wait_for(device, stream)) {
    if (prologue) {
      vdev::launch(stream, op_name, std::move(prologue));
    }
    wait_for_caller(device, *caller, stream);
    vdev::launch(stream, op_name, std::move(collective));
  } else {
    // Nothing to wait for between them: one kernel.
    vdev::launch(stream, op_name, [prologue = std::move(prologue), collective = std::move(collective)] {
      if (prologue) {
        prologue();
      }
      collective();
    });
  }
  return stream;
}

c10::Stream CommunicationStreams::launch_point_to_point(
    c10::DeviceIndex device, const char* op_name, std::function<void()> hand_to_transport,
    std::function<void()> complete) {
  std::lock_guard<std::mutex> lock(mutex_);
  const c10::Stream stream = stream_of(device);
  if (const std::optional<c10::Stream> caller = caller_to_wait_for(device, stream)) {
    wait_for_caller(device, *caller, stream);
  }
  vdev::launch(stream, op_name, std::move(hand_to_transport));
  OfDevice& of_device = devices_[static_cast<size_t>(device)];
  if (!of_device.point_to_point) {
    of_device.point_to_point = stream_from_pool(device, kHighestStreamPriority);
  }
  order_after(stream, *of_device.point_to_point);
  vdev::launch(*of_device.point_to_point, op_name, std::move(complete));
  return *of_device.point_to_point;
}

void CommunicationStreams::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const OfDevice& of_device : devices_) {
    for (const std::optional<c10::Stream>& stream : {of_device.stream, of_device.point_to_point}) {
      if (stream) {
        void* event = nullptr;
        record_event(&event, *stream, c10::EventFlag::BACKEND_DEFAULT);
        synchronize_event(event);
        destroy_event(event);
      }
    }
  }
}

} // namespace vdev
