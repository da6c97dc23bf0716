#pragma once

// device_count, current_device and set_device are public (torch_vdev/vdev.h).
#include <torch_vdev/vdev.h>

namespace vdev {

// Throws a c10::Error naming the index and the valid range unless 0 <= index < device_count().
VDEV_API void check_device_index(c10::DeviceIndex index);

// Sets the device and returns the previous one.
VDEV_API c10::DeviceIndex exchange_device(c10::DeviceIndex index);

// Marks the backend initialised (first allocation, torch.vdev.init(), the device and
// stream functions of torch.vdev). Like CUDA, a process forked after that cannot use
// vdev: this throws in such a child, and every kernel touching device memory calls it.
VDEV_API void lazy_init();
VDEV_API bool is_initialized();
VDEV_API bool is_in_bad_fork();

// Resolves -1 (an index-less vdev device) to the current device and validates any other index.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);

} // namespace vdev
