#include "distributed/StreamOrder.h"

#include <torch_vdev/Backend.h>

#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <mutex>

namespace vdev {

// A kernel that only tells the worker the stream reached it. Not an event: the
// worker's wait for an event would take the stream's kernel errors, which are the
// user's to see.
struct StreamPoint::Marker {
  std::mutex mutex;
  std::condition_variable reached_changed;
  bool reached = false;
};

StreamPoint::StreamPoint(c10::DeviceIndex device, const char* op_name) {
  const c10::Stream stream = current_stream(device);
  TORCH_INTERNAL_ASSERT(!is_stream_capturing(stream), op_name, ": a stream point in a graph capture");
  if (query_stream(stream)) {
    return;  // nothing queued: no marker to wait for
  }
  marker_ = std::make_shared<Marker>();
  launch(stream, op_name, [marker = marker_] {
    {
      std::lock_guard<std::mutex> lock(marker->mutex);
      marker->reached = true;
    }
    marker->reached_changed.notify_all();
  });
}

void StreamPoint::wait() const {
  if (!marker_) {
    return;
  }
  std::unique_lock<std::mutex> lock(marker_->mutex);
  marker_->reached_changed.wait(lock, [this] { return marker_->reached; });
}

void make_current_stream_wait(
    c10::DeviceIndex device, const char* op_name, std::function<void()> wait_for_collective) {
  const c10::Stream stream = current_stream(device);
  // A captured wait would run on every replay, for a collective that ran once.
  TORCH_CHECK(
      !is_stream_capturing(stream), op_name, ": cannot wait for a collective on a stream "
      "that is capturing a graph (", kBackendName, " graphs do not capture collectives)");
  launch(stream, op_name, std::move(wait_for_collective));
}

} // namespace vdev
