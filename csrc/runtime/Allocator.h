#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/CachingDeviceAllocator.h>

#include <vector>

namespace c10 {
struct StorageImpl;
} // namespace c10

namespace vdev {

// Device memory comes from the device runtime (vdrtMalloc: 64-byte aligned host RAM
// under each device's capacity, VDEV_MEMORY_LIMIT) and is cached per device and stream
// like CUDA's caching allocator, with the same statistics; running out of capacity
// raises torch.OutOfMemoryError.
class VDEV_API CachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
};

VDEV_API CachingAllocator& caching_allocator();

// Allocates device memory of `device` whose DataPtr reports `reported_device`.
// CPU kernels run on CPU aliases of device memory, so memory they allocate on
// a device's behalf is reported as CPU until it is adopted (see adopt_device_memory).
c10::DataPtr allocate_device_memory(
    c10::DeviceIndex device, size_t nbytes, c10::Device reported_device);

// True if `data_ptr` owns a block of this allocator (whatever device it reports).
bool owns_device_memory(const c10::DataPtr& data_ptr);

// Makes a DataPtr of `device`'s memory that was reported as CPU report `device` again.
void adopt_device_memory(c10::DataPtr& data_ptr, c10::DeviceIndex device);

// Copies `count` bytes between blocks of device memory on the current stream of
// `src`'s device, after the work queued there (as CUDA's cudaMemcpyAsync): a copy on
// the host would read memory queued kernels have not written yet.
void copy_device_memory(void* dest, const void* src, size_t count);

// Grows or shrinks a device storage as CUDA's resize_bytes_cuda: new memory from its
// allocator, the bytes kept copied by copy_device_memory.
VDEV_API void resize_device_storage(c10::StorageImpl* storage, size_t nbytes);

// An allocator that hands out `device`'s memory reported as CPU: the allocator of
// CPU alias storages, so a CPU kernel that resizes an alias allocates device memory.
c10::Allocator* cpu_view_allocator(c10::DeviceIndex device);

// While alive, CPU allocations on this thread come from `device`'s memory, so CPU
// kernels run on a device's behalf produce outputs that need no copy to become vdev.
class RouteCpuAllocationsTo {
 public:
  explicit RouteCpuAllocationsTo(c10::DeviceIndex device);
  ~RouteCpuAllocationsTo();
  RouteCpuAllocationsTo(const RouteCpuAllocationsTo&) = delete;
  RouteCpuAllocationsTo& operator=(const RouteCpuAllocationsTo&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Called on a stream's worker thread, which runs only kernels: the CPU memory its CPU
// kernels allocate (their temporaries) comes from the kernel temporary cache
// (KernelTemporaryCache.h) from here on.
void serve_cpu_allocations_from_kernel_temporary_cache();

// The device a pointer into device memory belongs to; throws for other pointers.
c10::Device device_of_pointer(const void* ptr);

// The allocator's blocks (each is its own segment: blocks are never split).
struct BlockState {
  c10::DeviceIndex device;
  void* ptr;
  size_t size;
  // Bytes asked for, while allocated.
  size_t requested;
  // The stream it was allocated on.
  c10::StreamId stream;
  // In use; freed but still used by streams it was recorded on; cached for reuse.
  enum State { kAllocated, kPendingFree, kCached } state;
};
VDEV_API std::vector<BlockState> memory_blocks();

// Graph memory pools (as CUDA graphs'). While capture `capture` (the runtime's id)
// is under way on `device`, allocations on its streams come from private pool `pool`,
// whose memory the capturing graph uses until it calls release_pool. Pools are shared
// by graphs that name the same id; a pool's free blocks serve only allocations into
// it, and its memory returns to the runtime when its last graph releases it.
void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, unsigned long long capture);
void end_allocate_to_pool(c10::DeviceIndex device, unsigned long long capture);
void release_pool(c10::DeviceIndex device, c10::MempoolId_t pool);
// True if `data_ptr` is a block of a graph's private pool: the graph's replays write
// it by address, so its memory cannot move.
bool in_graph_pool(const c10::DataPtr& data_ptr);

// Per-device capacity in bytes.
VDEV_API size_t memory_capacity(c10::DeviceIndex device);

} // namespace vdev
