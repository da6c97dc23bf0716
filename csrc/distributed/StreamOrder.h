#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace vdev {

// Collectives run in stream order with respect to the current stream of their device,
// as NCCL's do. These are the two places where collectives meet streams.

// The point a collective's call marks in the current stream of `device`: the work
// queued on it so far. The collective reads its inputs once the stream got past the
// point (its group's communication worker waits for that), while the caller goes on,
// as an NCCL collective's stream waits for an event of the current stream.
class StreamPoint {
 public:
  // Queues the point as a marker (named `op_name`, a string that outlives the call) on
  // the stream, unless the stream is idle. The stream must not be capturing a graph
  // (graphs do not capture collectives).
  StreamPoint(c10::DeviceIndex device, const char* op_name);
  // Blocks until the stream got past the point. A failed kernel before it does not stop
  // it (the kernel's error is the stream's, raised at its next synchronization).
  void wait() const;

 private:
  struct Marker;
  std::shared_ptr<Marker> marker_;  // nullptr: the stream was idle
};

// `Work.wait()`: work queued on the current stream of `device` after this call runs
// after `wait_for_collective` returned. It runs on the stream's worker (which blocks in
// it while gloo communicates) and the host returns at once, as NCCL's wait makes the
// current stream wait for the NCCL stream. An error it throws (a failed or timed-out
// collective) surfaces at the stream's next synchronization, naming `op_name` (a
// string that outlives the call), as a failed kernel's does.
void make_current_stream_wait(
    c10::DeviceIndex device, const char* op_name, std::function<void()> wait_for_collective);

} // namespace vdev
