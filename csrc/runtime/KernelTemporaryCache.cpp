#include "runtime/KernelTemporaryCache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <c10/util/llvmMathExtras.h>

#include <pthread.h>

namespace vdev {

size_t KernelTemporaryCache::rounded_size(size_t nbytes) {
  constexpr size_t kMinimum = 64;
  if (nbytes <= kMinimum) {
    return kMinimum;
  }
  // Steps of an eighth of the power of two below nbytes.
  const size_t step = (size_t{1} << (63 - c10::llvm::countLeadingZeros(static_cast<uint64_t>(nbytes - 1)))) / 8;
  return (nbytes + step - 1) / step * step;
}

c10::DataPtr KernelTemporaryCache::allocate(size_t nbytes) {
  TORCH_INTERNAL_ASSERT(nbytes > 0);
  const size_t size = rounded_size(nbytes);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_ += 1;
    auto found = free_by_size_.find(size);
    if (found != free_by_size_.end() && !found->second.empty()) {
      ptr = found->second.back();
      found->second.pop_back();
      cached_bytes_ -= size;
      cached_blocks_ -= 1;
      reuses_ += 1;
    }
  }
  if (ptr == nullptr) {
    ptr = c10::alloc_cpu(size);  // throws c10::Error when out of memory, as c10's allocator
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_.emplace(ptr, size);
  }
  in_use_blocks_.fetch_add(1, std::memory_order_relaxed);
  c10::profiledCPUMemoryReporter().New(ptr, nbytes);
  return {ptr, ptr, &KernelTemporaryCache::free_block, c10::Device(c10::kCPU)};
}

bool KernelTemporaryCache::owns(const void* ptr) const {
  if (in_use_blocks_.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return sizes_.count(ptr) != 0;
}

void KernelTemporaryCache::free_block(void* ptr) {
  if (ptr != nullptr) {
    kernel_temporary_cache().free(ptr);
  }
}

void KernelTemporaryCache::free(void* ptr) {
  c10::profiledCPUMemoryReporter().Delete(ptr);
  in_use_blocks_.fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = sizes_.find(ptr);
    TORCH_INTERNAL_ASSERT(found != sizes_.end(), "kernel temporary cache: freeing an unknown block");
    const size_t size = found->second;
    if (cached_bytes_ + size <= kMaxCachedBytes) {
      free_by_size_[size].push_back(ptr);
      cached_bytes_ += size;
      cached_blocks_ += 1;
      return;
    }
    sizes_.erase(found);
  }
  c10::free_cpu(ptr);
}

void KernelTemporaryCache::release_cached() {
  std::unordered_map<size_t, std::vector<void*>> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released.swap(free_by_size_);
    for (const auto& [size, blocks] : released) {
      for (void* ptr : blocks) {
        sizes_.erase(ptr);
      }
    }
    cached_bytes_ = 0;
    cached_blocks_ = 0;
  }
  for (const auto& [size, blocks] : released) {
    for (void* ptr : blocks) {
      c10::free_cpu(ptr);
    }
  }
}

KernelTemporaryCache::Stats KernelTemporaryCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats stats;
  stats.allocations = allocations_;
  stats.reuses = reuses_;
  stats.in_use_blocks = in_use_blocks_.load(std::memory_order_relaxed);
  stats.cached_blocks = cached_blocks_;
  stats.cached_bytes = static_cast<int64_t>(cached_bytes_);
  return stats;
}

KernelTemporaryCache& kernel_temporary_cache() {
  // Never destroyed: blocks may be freed by static destructors after it would be.
  static KernelTemporaryCache* cache = [] {
    // A child forked while a worker held the lock would otherwise block on it in the
    // raw deleter its CPU kernels free through.
    pthread_atfork(
        [] { kernel_temporary_cache().mutex_.lock(); }, [] { kernel_temporary_cache().mutex_.unlock(); },
        [] { kernel_temporary_cache().mutex_.unlock(); });
    return new KernelTemporaryCache();
  }();
  return *cache;
}

} // namespace vdev
