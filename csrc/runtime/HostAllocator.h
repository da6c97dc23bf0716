#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/CachingHostAllocator.h>

namespace vdev {

// Pinned ("page-locked") host memory from the device runtime (vdrtMallocHost), cached
// like CUDA's pinned memory by ATen's CachingHostAllocator and registered as vdev's
// host allocator: pin_memory(), is_pinned(), caching, statistics, empty_host_cache().
// A block used by streams (record_stream) is reused once runtime events recorded on
// them at its free complete.
VDEV_API at::HostAllocator* pinned_host_allocator();

// True for any address inside a pinned block (views of pinned tensors are pinned too).
bool is_pinned_pointer(const void* ptr);

} // namespace vdev
