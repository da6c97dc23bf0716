#include "distributed/StreamOrder.h"

#include <torch_vdev/Backend.h>

#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <c10/util/Exception.h>

namespace vdev {

void run_in_stream_order(c10::DeviceIndex device, const std::function<void()>& launch) {
  current_stream(device).synchronize();
  launch();
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
