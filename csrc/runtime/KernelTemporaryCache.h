#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace vdev {

// CPU memory that CPU kernels allocate for themselves while they run on a stream's
// worker (oneDNN's reorders and scratchpads, functional kernels' results, batch norm's
// statistics), kept for reuse as CUDA kernels' workspaces come from the caching
// allocator. Freed to glibc, a worker's arena gives its top back to the system at each
// step and every step faults its pages in again (hundreds of page faults per CNN
// training step); a cached block keeps its pages.
//
// Blocks are host memory, not device memory: they are not in memory_stats(), and the
// profiler's CPU memory events see a block allocated when it is handed out and freed
// when it comes back, as with c10's CPU allocator. A block may be freed on any thread.
// Free blocks are kept up to kMaxCachedBytes; empty_cache() frees them all.
class VDEV_API KernelTemporaryCache {
 public:
  // Sizes are rounded up to one of eight sizes per power of two (at least 64 bytes),
  // so a free block fits requests up to 12.5% smaller.
  static size_t rounded_size(size_t nbytes);

  // A block of at least `nbytes` (> 0) bytes, 64-byte aligned (as c10::alloc_cpu),
  // reporting device CPU; freed through free_block.
  c10::DataPtr allocate(size_t nbytes);

  // Whether `ptr` is a block handed out by the cache and not yet freed. Cheap when
  // no block is out, as on threads that only run eager CPU work.
  bool owns(const void* ptr) const;

  static void free_block(void* ptr);

  // Frees the cached free blocks.
  void release_cached();

  struct Stats {
    int64_t allocations = 0;  // blocks handed out
    int64_t reuses = 0;       // of which were cached blocks
    int64_t in_use_blocks = 0;
    int64_t cached_blocks = 0;
    int64_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  friend KernelTemporaryCache& kernel_temporary_cache();

  // Free blocks the cache keeps at most; blocks freed beyond it go back to the system.
  static constexpr size_t kMaxCachedBytes = size_t{512} << 20;

  void free(void* ptr);

  mutable std::mutex mutex_;
  // Every block the cache holds, in use or free, with its (rounded) size.
  std::unordered_map<const void*, size_t> sizes_;
  std::unordered_map<size_t, std::vector<void*>> free_by_size_;
  size_t cached_bytes_ = 0;
  int64_t cached_blocks_ = 0;
  int64_t allocations_ = 0;
  int64_t reuses_ = 0;
  std::atomic<int64_t> in_use_blocks_{0};
};

VDEV_API KernelTemporaryCache& kernel_temporary_cache();

} // namespace vdev
