#pragma once

#include <c10/core/Device.h>

#include <functional>

namespace vdev {

// Collectives run in stream order with respect to the current stream of their device,
// as NCCL's do: a collective reads its inputs only after the work queued before it on
// that stream, and `Work.wait()` returns once the collective is done, so work queued
// on the stream after the wait sees its results.
//
// `launch` starts the collective (it hands CPU aliases of the tensors to gloo, which
// communicates on its own threads). It runs once the current stream of `device` has
// finished the work queued on it so far. This is the one place where collectives meet
// streams: with asynchronous streams it is where the stream is synchronised (or
// `launch` becomes a host function enqueued on it).
void run_in_stream_order(c10::DeviceIndex device, const std::function<void()>& launch);

} // namespace vdev
