#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <functional>
#include <memory>

typedef struct vdrtStream* vdrtStream_t;

namespace vdev {

// Streams are ordered queues of work. Each c10 stream id of a device maps to a stream
// of the device runtime (third_party/vdev_runtime), created at first use, whose worker
// thread runs the stream's work in order. This file adapts them to c10: pools and
// priorities, the current stream per thread and device, events, and the host's view
// of stream progress that the caching allocator's cross-stream reuse rules need.

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
// The device runtime's stream behind a checked c10 stream (created at first use).
vdrtStream_t runtime_stream(const c10::Stream& stream);

// The host's view of stream progress. As with CUDA, the host only knows a stream got
// past a point once it synchronized with the stream after that point (stream and device
// synchronization, a successful query, blocking copies between host and device,
// .item()), or with an event recorded after the point.
//
// A new point in `stream`'s work; returns its position.
uint64_t mark_stream_point(const c10::Stream& stream);
// True once the host observed `stream` at or after `point`.
bool stream_passed(const c10::Stream& stream, uint64_t point);

// The runtime's id of the capture stream `id` of `device` takes part in (0: none).
unsigned long long stream_capture_id(c10::DeviceIndex device, c10::StreamId id);
VDEV_API bool is_stream_capturing(const c10::Stream& stream);

// Waiting for streams. A kernel's failure on a stream surfaces here as a c10::Error.
// While the stream captures a graph, waiting for it is refused (as CUDA's
// cudaErrorStreamCaptureUnsupported) and invalidates the capture.
VDEV_API void synchronize_stream(const c10::Stream& stream);
// True if the stream's work is complete.
VDEV_API bool query_stream(const c10::Stream& stream);
// synchronize_stream(current_stream(device)) for the device of an existing tensor:
// what an op that runs on the calling thread calls first. `op_name` names the op in
// the error raised if the stream is capturing a graph.
VDEV_API void synchronize_current_stream(c10::DeviceIndex device, const char* op_name = nullptr);
VDEV_API void synchronize_device(c10::DeviceIndex device);

// Every wait of the host that blocks on queued work (the ones above, events, blocking
// copies, a generator's state waiting for its draws) runs as hook(wait, context), which
// must call wait(context) once. Only waits that block call it: a wait for complete work
// returns at once. The Python module's hook releases the GIL the waiting thread holds,
// since the queued work may need it (gloo's threads run Python future callbacks).
using HostWaitHook = void (*)(void (*wait)(void* context), void* context);
VDEV_API void set_host_wait_hook(HostWaitHook hook);

// Events (c10's void* event handles). Recording one queues a marker on the stream; it
// completes, and is timed, when the stream's worker reaches it.
void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag);
void destroy_event(void* event) noexcept;
bool query_event(void* event);
void synchronize_event(void* event);
// Work queued on `stream` after this waits for the event's last record (and its
// check, below).
void wait_event(void* event, const c10::Stream& stream);
double elapsed_milliseconds(void* start, void* end);

// A check that events recorded on this thread carry while the scope lives, for work
// whose failure the stream it ran on does not see (vccl's collectives: their failures
// stay theirs, so the process group stays usable). A stream that waits for such an
// event runs the check after the wait, as a kernel named `op_name`: what it throws
// becomes that stream's error, raised at its next synchronization, as a failed
// kernel's. A host that synchronizes with the event runs it too and raises it. So a
// collective's failure reaches the streams that wait for it, as NCCL's reaches every
// stream of its CUDA context.
class VDEV_API EventCheckScope {
 public:
  EventCheckScope(const char* op_name, std::function<void()> check);
  ~EventCheckScope();
  EventCheckScope(const EventCheckScope&) = delete;
  EventCheckScope& operator=(const EventCheckScope&) = delete;

  struct Check {
    const char* op_name;
    std::function<void()> run;
  };

 private:
  std::shared_ptr<const Check> previous_;
};

} // namespace vdev
