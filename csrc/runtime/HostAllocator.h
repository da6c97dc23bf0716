#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/CachingHostAllocator.h>

namespace vdev {

// Pinned ("page-locked") host memory, cached like CUDA's pinned memory by ATen's
// CachingHostAllocator and registered as vdev's host allocator. vdev's device memory
// is host RAM already, so pinning changes no copy speed; what it keeps is CUDA's
// behaviour: pin_memory(), is_pinned(), caching, statistics and empty_host_cache().
VDEV_API at::HostAllocator* pinned_host_allocator();

// True for any address inside a pinned block (views of pinned tensors are pinned too).
bool is_pinned_pointer(const void* ptr);

} // namespace vdev
