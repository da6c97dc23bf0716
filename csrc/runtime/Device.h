#pragma once

#include <torch_vdev/Backend.h>

namespace vdev {

// Number of vdev devices, fixed for the process by VDEV_DEVICE_COUNT (default 2).
VDEV_API c10::DeviceIndex device_count() noexcept;

// Throws a c10::Error naming the index and the valid range unless 0 <= index < device_count().
VDEV_API void check_device_index(c10::DeviceIndex index);

// The current device is per thread, as with CUDA.
VDEV_API c10::DeviceIndex current_device();
VDEV_API void set_device(c10::DeviceIndex index);
// Sets the device and returns the previous one.
VDEV_API c10::DeviceIndex exchange_device(c10::DeviceIndex index);

// Marks the backend initialised (first allocation, torch.vdev.init(), the device and
// stream functions of torch.vdev). Like CUDA, a process forked after that cannot use
// vdev: this throws in such a child, and every kernel touching device memory calls it.
VDEV_API void lazy_init();
VDEV_API bool is_initialized();
VDEV_API bool is_in_bad_fork();

// Resolves a possibly index-less vdev device (or -1) to a concrete, validated index.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);

} // namespace vdev
