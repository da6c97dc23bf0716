#pragma once

#include <c10/core/Device.h>

#include <functional>

namespace vdev {

// Collectives run in stream order with respect to the current stream of their device,
// as NCCL's do. These are the two places where collectives meet streams.

// A collective reads its inputs only after the work queued before it on the current
// stream of `device`: `launch` (which hands CPU aliases of the tensors to gloo, which
// communicates on its own threads) runs once that stream has finished the work queued
// on it so far.
void run_in_stream_order(c10::DeviceIndex device, const std::function<void()>& launch);

// `Work.wait()`: work queued on the current stream of `device` after this call runs
// after `wait_for_collective` returned. It runs on the stream's worker (which blocks in
// it while gloo communicates) and the host returns at once, as NCCL's wait makes the
// current stream wait for the NCCL stream. An error it throws (a failed or timed-out
// collective) surfaces at the stream's next synchronization, naming `op_name` (a
// string that outlives the call), as a failed kernel's does.
void make_current_stream_wait(
    c10::DeviceIndex device, const char* op_name, std::function<void()> wait_for_collective);

} // namespace vdev
