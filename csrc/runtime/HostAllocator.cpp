#include "runtime/HostAllocator.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace vdev {
namespace {

constexpr size_t kAlignment = 64;

class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    }
    const size_t size = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, size);
    TORCH_CHECK_WITH(
        OutOfMemoryError, ptr != nullptr, "Failed to allocate ", nbytes,
        " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.emplace(static_cast<const char*>(ptr), size);
    }
    return c10::DataPtr(ptr, ptr, &release, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // Any address inside a block counts, as views of pinned tensors are pinned too.
  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(static_cast<const char*>(ptr));
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return static_cast<const char*>(ptr) < it->first + it->second;
  }

 private:
  static void release(void* ptr);

  std::mutex mutex_;
  std::map<const char*, size_t> blocks_;
};

PinnedHostAllocator& instance() {
  static PinnedHostAllocator* allocator = new PinnedHostAllocator();
  return *allocator;
}

void PinnedHostAllocator::release(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(instance().mutex_);
    instance().blocks_.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
}

} // namespace

c10::Allocator* pinned_host_allocator() {
  return &instance();
}

bool is_pinned_pointer(const void* ptr) {
  return ptr != nullptr && instance().contains(ptr);
}

} // namespace vdev
