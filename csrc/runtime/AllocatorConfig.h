#pragma once

// The caching allocator's options, in the form of CUDA's PYTORCH_CUDA_ALLOC_CONF
// ("key:value,key:value"), read from PYTORCH_VDEV_ALLOC_CONF at start-up and set by
// torch.vdev.memory._set_allocator_settings. The options CUDA documents that apply to
// host memory:
//  - max_split_size_mb: blocks of at least this size are "oversize" (counted in the
//    oversize_allocations / oversize_segments statistics). vdev never splits a block
//    (each is its own host allocation), so no block is ever split whatever the size.
//  - garbage_collection_threshold (0 < t < 1): before reserving a new segment that
//    would take reserved memory above t * capacity, cached blocks are released.
//  - roundup_power2_divisions (a power of two, or 0 for none): sizes of 1 MiB and more
//    round up to one of that many steps per power of two (default 8).
//  - expandable_segments: accepted and ignored, with a warning. Expandable segments
//    avoid fragmentation inside the large segments CUDA splits into blocks; vdev's
//    blocks never share a segment, so there is none to avoid.
// CUDA's CUDA-specific options (pinned_use_cuda_host_register, release_lock_on_cudamalloc,
// backend) and unknown keys are errors naming the key.

#include <torch_vdev/Backend.h>

#include <atomic>
#include <cstddef>
#include <string>

namespace vdev {

struct AllocatorConfig {
  std::atomic<size_t> max_split_size{SIZE_MAX};
  std::atomic<double> garbage_collection_threshold{0.0};
  std::atomic<size_t> roundup_power2_divisions{8};
};

AllocatorConfig& allocator_config();

// Applies "key:value,..." over the current settings; throws naming a bad key or value.
VDEV_API void set_allocator_settings(const std::string& settings);
// The current settings in that form.
VDEV_API std::string allocator_settings();

} // namespace vdev
