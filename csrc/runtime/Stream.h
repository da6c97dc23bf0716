#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace vdev {

// Streams are ordered queues of work. vdev runs every kernel synchronously on the
// calling thread, so a stream's work is always complete; what streams keep is
// their identity (pools, priorities, the current stream per thread and device),
// so code written for CUDA streams runs unchanged.
VDEV_API c10::Stream current_stream(c10::DeviceIndex device);
VDEV_API c10::Stream default_stream(c10::DeviceIndex device);
// One of a fixed pool of streams per device and priority, handed out round robin.
VDEV_API c10::Stream stream_from_pool(c10::DeviceIndex device, int priority);
// Sets the current stream of the stream's device on this thread; returns the previous one.
VDEV_API c10::Stream exchange_stream(c10::Stream stream);

// Events. Work is done when submitted, so recording an event completes it at once.
void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag);
void destroy_event(void* event) noexcept;
bool event_completed(void* event);
double elapsed_milliseconds(void* start, void* end);

} // namespace vdev
