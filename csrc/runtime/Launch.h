#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Stream.h>

#include <functional>

namespace vdev {

// Queues `kernel` on `stream`: it runs on the stream's worker thread after the
// stream's earlier work, and this returns once it is queued (with
// VDEV_LAUNCH_BLOCKING=1, once it has run, raising its error). An exception the
// kernel throws surfaces at the stream's next synchronization as a c10::Error naming
// `op_name`. The kernel must own what it uses (the host goes on meanwhile) but device
// memory, which, as on CUDA, it does not keep alive: the caching allocator orders a
// freed block's reuse after the work queued on its stream (record_stream for others).
// Every launch goes through here. On a stream capturing a graph the kernel is
// recorded instead (csrc/graphs/): it then runs once per replay, and is destroyed
// with the graph, so what it owns lives as long as the graph.
//
// Work that runs on the calling thread instead (ops that read or write device memory
// from the host) first waits for the current stream of its device
// through synchronize_for_host_op (HostAccess.h), as CUDA's host-side accesses do.
VDEV_API void launch(const c10::Stream& stream, const char* op_name, std::function<void()> kernel);

} // namespace vdev
