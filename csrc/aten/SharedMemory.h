#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Tensor.h>

namespace vdev {

// Device memory shared between processes, as CUDA's IPC memory is: a vdev storage
// shared with another process lives in a memfd (anonymous shared memory) that both
// processes map, so writes in one are seen in the other, and the memory lives until
// every process has dropped it (the kernel counts the mappings). As with CUDA's IPC,
// the sender's allocator statistics keep counting the memory while the sender holds
// it, and a receiver's mapping is not an allocation of the receiver's allocator.

// Moves the memory of `tensor`'s storage into shared memory, once (as CPU storages
// move on share_memory_()), and returns the file descriptor of that memory, after the
// device's queued work completed. The descriptor belongs to the storage: duplicate it
// to send it.
VDEV_API int share_device_memory(const at::Tensor& tensor);

// A uint8 vdev tensor of `nbytes` over the shared memory `fd` (which it takes over),
// on `device`. Its storage cannot be resized.
VDEV_API at::Tensor tensor_from_shared_memory(int fd, size_t nbytes, c10::DeviceIndex device);

} // namespace vdev
