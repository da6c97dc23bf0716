#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>

namespace vdev {

// Streams are ordered queues of work. vdev runs every kernel synchronously on the
// calling thread, so a stream's work is complete when submitted; what streams keep is
// their identity (pools, priorities, the current stream per thread and device) and
// the host's view of their progress (below), so code written for CUDA streams runs
// unchanged and the caching allocator can keep CUDA's cross-stream reuse rules.

// Priorities follow the range PyTorch exposes for CUDA: 0 is the default and lowest,
// down to -3, the highest. Other values are clamped into the range.
inline constexpr int kLowestStreamPriority = 0;
inline constexpr int kHighestStreamPriority = -3;

VDEV_API c10::Stream current_stream(c10::DeviceIndex device);
// current_stream(device).id() without the device check, for the device of an existing
// tensor: asked on every allocation.
c10::StreamId current_stream_id(c10::DeviceIndex device);
VDEV_API c10::Stream default_stream(c10::DeviceIndex device);
// One of a fixed pool of streams per device and priority, handed out round robin.
VDEV_API c10::Stream stream_from_pool(c10::DeviceIndex device, int priority);
// Sets the current stream of the stream's device on this thread; returns the previous one.
VDEV_API c10::Stream exchange_stream(c10::Stream stream);
VDEV_API int stream_priority(const c10::Stream& stream);
// Throws unless `stream` is a stream of a vdev device that this runtime hands out.
VDEV_API void check_stream(const c10::Stream& stream);

// The host's view of stream progress. Work is done at submission, but, as with CUDA,
// the host only knows a stream got past a point once it synchronizes with the stream
// after that point: observe_stream (Stream.synchronize/query, blocking copies between
// host and device, .item()), observe_device (device synchronize) or an event recorded
// after the point being queried or synchronized.
//
// A new point in `stream`'s work; returns its position.
uint64_t mark_stream_point(const c10::Stream& stream);
// True once the host observed `stream` at or after `point`.
bool stream_passed(const c10::Stream& stream, uint64_t point);
VDEV_API void observe_stream(const c10::Stream& stream);
// observe_stream(current_stream(device)) for the device of an existing tensor.
void observe_current_stream(c10::DeviceIndex device);
VDEV_API void observe_device(c10::DeviceIndex device);

// Events mark a point of their stream when recorded; querying or synchronizing one
// observes its stream up to that point. Work is done at submission, so a recorded
// event is always complete.
void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag);
void destroy_event(void* event) noexcept;
void observe_event(void* event);
double elapsed_milliseconds(void* start, void* end);

} // namespace vdev
