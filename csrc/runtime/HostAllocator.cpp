#include "runtime/HostAllocator.h"

#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace vdev {
namespace {

// vdev copies run when submitted, non_blocking ones included, so by the time a stream
// could be recorded on a pinned block its copies are over: the event is complete.
struct CompletedEvent {};

class PinnedMemory final
    : public at::CachingHostAllocatorImpl<c10::Stream, CompletedEvent> {
 public:
  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(static_cast<const char*>(ptr));
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return static_cast<const char*>(ptr) < it->first + it->second;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    // Page-locked memory is made of whole pages.
    *ptr = std::aligned_alloc(page, (size + page - 1) / page * page);
    TORCH_CHECK_WITH(
        OutOfMemoryError, *ptr != nullptr, "Failed to allocate ", size,
        " bytes of pinned host memory");
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.emplace(static_cast<const char*>(*ptr), size);
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.erase(static_cast<const char*>(block->ptr_));
    }
    std::free(block->ptr_);
  }

  void record_stream(std::optional<std::vector<CompletedEvent>>& events, c10::Stream stream)
      override {
    events->emplace_back();
  }

  bool query_event(CompletedEvent& event) override {
    return true;
  }

  c10::Stream get_current_stream() const override {
    return current_stream(current_device());
  }

  bool stream_is_capturing(c10::Stream stream) const override {
    return false;
  }

  std::mutex mutex_;
  std::map<const char*, size_t> blocks_;  // every pinned block, in use or cached
};

void free_pinned(void* block);

class PinnedHostAllocator final
    : public at::CachingHostAllocatorInterface<PinnedMemory, &free_pinned> {
 public:
  bool contains(const void* ptr) {
    return impl_->contains(ptr);
  }
};

PinnedHostAllocator& instance() {
  // Leaked on purpose: pinned tensors may be freed during static destruction.
  static auto* allocator = new PinnedHostAllocator();
  return *allocator;
}

void free_pinned(void* block) {
  instance().free(block);
}

} // namespace

at::HostAllocator* pinned_host_allocator() {
  return &instance();
}

bool is_pinned_pointer(const void* ptr) {
  return ptr != nullptr && instance().contains(ptr);
}

REGISTER_HOST_ALLOCATOR(kDeviceType, &instance())

} // namespace vdev
