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

bool CommunicationStreams::inputs_pending(c10::DeviceIndex device, const c10::Stream& stream) {
  const c10::Stream current = current_stream(device);
  return current != stream && !query_stream(current);
}

c10::Stream CommunicationStreams::launch(
    c10::DeviceIndex device, const char* op_name, std::function<void()> prologue,
    std::function<void()> collective) {
  std::lock_guard<std::mutex> lock(mutex_);
  const c10::Stream stream = stream_of(device);
  if (inputs_pending(device, stream)) {
    if (prologue) {
      vdev::launch(stream, op_name, std::move(prologue));
    }
    order_after(current_stream(device), stream);
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
  if (inputs_pending(device, stream)) {
    order_after(current_stream(device), stream);
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
