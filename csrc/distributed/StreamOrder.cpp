#include "distributed/StreamOrder.h"

#include "runtime/Stream.h"

namespace vdev {

void run_in_stream_order(c10::DeviceIndex device, const std::function<void()>& launch) {
  current_stream(device).synchronize();
  launch();
}

} // namespace vdev
