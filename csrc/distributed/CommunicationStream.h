#pragma once

#include <c10/core/Stream.h>

#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace vdev {

// A process group's communication streams, in the role of ProcessGroupNCCL's: the
// group's collectives run as kernels on a vdev stream of their device (one per device,
// from the highest-priority pool, as ProcessGroupNCCL takes its streams from CUDA's
// pool), each after the work queued on the caller's current stream before the call, so
// the caller goes on at once and a collective's launch costs the hand-off of a kernel
// launch. They run one at a time, in call order, also across devices: gloo matches the
// ranks' messages by the order of the calls on its group, and the ranks compare their
// calls in that order (CallAgreement.h).
class CommunicationStreams {
 public:
  CommunicationStreams() = default;
  // Waits for the collectives still queued (their kernels use the group's transport).
  ~CommunicationStreams();
  CommunicationStreams(const CommunicationStreams&) = delete;
  CommunicationStreams& operator=(const CommunicationStreams&) = delete;

  // Queues a collective on `device`'s communication stream and returns the stream:
  // `prologue` (a kernel named `op_name`, or nothing) runs after the group's earlier
  // collectives, then the stream waits for the work queued so far on the current stream
  // of `device`, then `collective` runs. Neither may throw (a collective's failure is
  // its work's, not the stream's) nor take the GIL. Callers hold no other lock: the
  // launches of concurrent calls are ordered here.
  c10::Stream launch(
      c10::DeviceIndex device, const char* op_name, std::function<void()> prologue,
      std::function<void()> collective);
  // Point-to-point operations (send, recv) complete when the peer takes part, in an
  // order of its own: `hand_to_transport` queues the operation on gloo in call order,
  // as launch queues collectives, and `complete` (which waits for it) runs on another
  // stream of `device`, which it returns, so the collectives and operations queued
  // after it are not held up (as NCCL's point-to-point operations have streams of
  // their own).
  c10::Stream launch_point_to_point(
      c10::DeviceIndex device, const char* op_name, std::function<void()> hand_to_transport,
      std::function<void()> complete);
  // Blocks until the collectives queued so far ran.
  void drain();

 private:
  std::mutex mutex_;
  // The communication stream of `device` (made at first use), after the group's
  // earlier collectives. Needs mutex_.
  c10::Stream stream_of(c10::DeviceIndex device);
  // Whether `stream` must wait for work still queued on the current stream of `device`.
  static bool inputs_pending(c10::DeviceIndex device, const c10::Stream& stream);

  // Per device index, once used: its communication stream, and the stream
  // point-to-point operations complete on.
  struct OfDevice {
    std::optional<c10::Stream> stream;
    std::optional<c10::Stream> point_to_point;
  };
  std::vector<OfDevice> devices_;
  // The stream of the last collective.
  std::optional<c10::Stream> last_;
};

} // namespace vdev
