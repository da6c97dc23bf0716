#include "runtime/HostAllocator.h"

#include "runtime/Device.h"
#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <utility>

namespace vdev {
namespace {

// A runtime event recorded on a stream that used a pinned block: the block is reused
// once the stream's work up to the block's free is complete.
class StreamEvent {
 public:
  explicit StreamEvent(const c10::Stream& stream) {
    check_runtime(vdrtEventCreate(&handle_, vdrtEventDisableTiming), "vdrtEventCreate");
    check_runtime(vdrtEventRecord(handle_, runtime_stream(stream)), "vdrtEventRecord");
  }
  StreamEvent(StreamEvent&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  StreamEvent& operator=(StreamEvent&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  ~StreamEvent() {
    if (handle_ != nullptr) {
      vdrtEventDestroy(handle_);
    }
  }

  bool complete() const {
    return vdrtEventQuery(handle_) == vdrtSuccess;
  }

 private:
  vdrtEvent_t handle_ = nullptr;
};

class PinnedMemory final : public at::CachingHostAllocatorImpl<c10::Stream, StreamEvent> {
 public:
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    vdrtError_t status = vdrtMallocHost(ptr, size);
    if (status == vdrtErrorMemoryAllocation) {
      vdrtGetLastError();
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "Failed to allocate ", size, " bytes of pinned host memory");
    }
    check_runtime(status, "vdrtMallocHost");
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    check_runtime(vdrtFreeHost(block->ptr_), "vdrtFreeHost");
  }

  void record_stream(std::optional<std::vector<StreamEvent>>& events, c10::Stream stream)
      override {
    events->emplace_back(stream);
  }

  bool query_event(StreamEvent& event) override {
    return event.complete();
  }

  c10::Stream get_current_stream() const override {
    return current_stream(current_device());
  }

  bool stream_is_capturing(c10::Stream stream) const override {
    return false;
  }
};

void free_pinned(void* block);

using PinnedHostAllocator = at::CachingHostAllocatorInterface<PinnedMemory, &free_pinned>;

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
  vdrtPointerAttributes attributes;
  check_runtime(vdrtPointerGetAttributes(&attributes, ptr), "vdrtPointerGetAttributes");
  return attributes.type == vdrtMemoryTypeHost;
}

REGISTER_HOST_ALLOCATOR(kDeviceType, &instance())

} // namespace vdev
