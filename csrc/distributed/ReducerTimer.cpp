// DDP's timer for vdev: the reducer measures forward, backward and communication
// time per iteration (DistributedDataParallel's logging data, "avg_*_time") with a
// timer registered per device type. Like CUDA's, it times with events on the
// current stream, which stay right once kernels run asynchronously.
#include <torch_vdev/Backend.h>

#include "runtime/Stream.h"

#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace vdev {
namespace {

class ReducerTimer final : public c10d::Timer {
 public:
  explicit ReducerTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    c10d::Timer::record(event);  // the host time, which the reducer also reads
    event_of(event).record(current_stream(device_.index()));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& first = event_of(start);
    c10::Event& second = event_of(end);
    if (!first.was_marked_for_recording() || !second.was_marked_for_recording()) {
      return std::nullopt;
    }
    second.synchronize();
    const double milliseconds = first.elapsedTime(second);
    // An iteration whose events came out of order (unused parameters) has no time.
    if (milliseconds < 0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(milliseconds * 1e6);
  }

 private:
  c10::Event& event_of(Event event) {
    return events_.at(static_cast<size_t>(event));
  }

  c10::Device device_;
  std::array<c10::Event, 5> events_{
      c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT)};
};

} // namespace
} // namespace vdev

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, vdev::kDeviceType, vdev::ReducerTimer)
} // namespace c10d
