#pragma once

// The public C++ API of the vdev backend, named like torch.vdev (and torch::cuda).
//
// Linking TorchVdev::torch_vdev is all an app needs for vdev tensors: loading
// libtorch_vdev registers the backend, so torch::Device("vdev:0") and its generic
// name torch::Device("privateuseone:0") work. This header adds the device runtime.
//
// Where a function takes a device, -1 means the current device; any other index
// outside 0..device_count()-1 throws a c10::Error naming the index and the valid
// range, and changes nothing.

#include <torch_vdev/Backend.h>

#include <cstddef>
#include <cstdint>

namespace vdev {

// Number of vdev devices, fixed for the process by VDEV_DEVICE_COUNT (default 2).
VDEV_API c10::DeviceIndex device_count() noexcept;

// The current device is per thread, as with CUDA; every thread starts on device 0.
VDEV_API c10::DeviceIndex current_device();
VDEV_API void set_device(c10::DeviceIndex index);

// Waits for the work queued on every stream of the device; a queued kernel's failure
// is raised here.
VDEV_API void synchronize(c10::DeviceIndex device = -1);

// Seeds the current device's default generator. (torch::manual_seed seeds CPU and
// every vdev device.) vdev generators draw what a CPU generator of equal seed draws.
VDEV_API void manual_seed(uint64_t seed);

// Bytes of device memory held by tensors now, and the peak since the start.
VDEV_API size_t memory_allocated(c10::DeviceIndex device = -1);
VDEV_API size_t max_memory_allocated(c10::DeviceIndex device = -1);

// Returns every device's cached, unused memory to the system.
VDEV_API void empty_cache();

} // namespace vdev
