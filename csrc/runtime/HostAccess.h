#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace vdev {

// The one way an op gets to run on the calling thread instead of being launched on a
// stream (vdev::launch): it waits for the work queued on `device`'s current stream,
// as CUDA's host-side accesses of device memory do, and is counted under `op_name`
// (host_op_stats). Ops that read values on the host (.item(), copies to pageable
// memory), ops whose output sizes depend on data, and ops without a C++ meta kernel
// come through here; a kernel failure on the stream surfaces here as a c10::Error.
VDEV_API void synchronize_for_host_op(c10::DeviceIndex device, const char* op_name);

// How many times each op ran on the calling thread (synchronize_for_host_op) since the
// last reset.
VDEV_API std::unordered_map<std::string, int64_t> host_op_stats();
VDEV_API void reset_host_op_stats();

} // namespace vdev
