#include "runtime/Allocator.h"

#include "profiler/DeviceActivity.h"
#include "profiler/MemoryEvents.h"
#include "runtime/AllocatorConfig.h"
#include "runtime/Device.h"
#include "runtime/KernelTemporaryCache.h"
#include "runtime/Launch.h"
#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

namespace vdev {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kSmallBlockGranularity = 512;
// Sizes below this are served from the small pool (as CUDA's 1 MiB split).
constexpr size_t kSmallPoolLimit = 1 << 20;
// Large blocks are rounded to 1/roundup_power2_divisions (default 8) of their power
// of two, so cached blocks are reused across slightly different sizes while wasting
// at most 12.5%.
size_t round_block_size(size_t nbytes) {
  auto round_up = [nbytes](size_t step) { return (nbytes + step - 1) / step * step; };
  if (nbytes < kSmallPoolLimit) {
    return round_up(kSmallBlockGranularity);
  }
  const size_t divisions =
      allocator_config().roundup_power2_divisions.load(std::memory_order_relaxed);
  const size_t power = size_t{1} << (63 - __builtin_clzll(nbytes));
  return round_up(divisions == 0 ? kSmallBlockGranularity : std::max(power / divisions, kSmallBlockGranularity));
}

bool is_oversize(size_t size) {
  return size >= allocator_config().max_split_size.load(std::memory_order_relaxed);
}

size_t current(const StatArray& stats) {
  return static_cast<size_t>(stats[static_cast<size_t>(StatType::AGGREGATE)].current);
}

// Tells observers of device memory (the profiler, memory history) about an event.
void observe(
    const DeviceStats& stats, profiler::MemoryAction action, c10::DeviceIndex device,
    const void* ptr, size_t size, c10::StreamId stream) {
  if (C10_UNLIKELY(profiler::memory_observed())) {
    profiler::report_memory(profiler::MemoryEvent{
        action, device, ptr, size, stream, current(stats.allocated_bytes),
        current(stats.reserved_bytes)});
  }
}

struct PrivatePool;

struct Block {
  void* ptr;
  size_t size;
  size_t requested;
  c10::DeviceIndex device;
  // The stream current when the block was allocated: its later work is ordered after
  // the block's frees, so it alone may reuse the block at once (as with CUDA).
  c10::StreamId stream;
  bool in_use;
  // Other streams that used the block (Tensor.record_stream).
  std::vector<c10::Stream> recorded_streams;
  // After the free: how many of them have yet to pass the point of the free.
  size_t streams_to_pass = 0;
  // At least max_split_size_mb when allocated (counted in the oversize statistics).
  bool oversize = false;
  // The graph pool the block belongs to (null: the device's shared caches).
  PrivatePool* pool = nullptr;
};

// A graph's private memory pool (as CUDA graphs'): the allocations made on a stream
// while it captures come from it, so replays write the same memory; its free blocks
// are reused only by allocations into the pool (the captures sharing it), and its
// memory returns to the runtime once no graph uses the pool.
struct PrivatePool {
  // Graphs using the pool (captured into it, not yet reset).
  int graphs = 0;
  // Its blocks, in use or free.
  size_t blocks = 0;
  ska::flat_hash_map<size_t, std::vector<Block*>> free_blocks;
};

void update(StatArray& stats, bool small, int64_t delta) {
  for (auto type : {StatType::AGGREGATE, small ? StatType::SMALL_POOL : StatType::LARGE_POOL}) {
    auto& stat = stats[static_cast<size_t>(type)];
    if (delta >= 0) {
      stat.increase(static_cast<size_t>(delta));
    } else {
      stat.decrease(static_cast<size_t>(-delta));
    }
  }
}

std::string format_bytes(size_t nbytes) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed;
  if (nbytes >= (size_t{1} << 30)) {
    out << static_cast<double>(nbytes) / (1 << 30) << " GiB";
  } else if (nbytes >= (size_t{1} << 20)) {
    out << static_cast<double>(nbytes) / (1 << 20) << " MiB";
  } else {
    out << static_cast<double>(nbytes) / (1 << 10) << " KiB";
  }
  out << " (" << nbytes << " bytes)";
  return out.str();
}

// Capacity and free bytes as the runtime counts them: it holds every segment.
std::pair<size_t, size_t> runtime_memory_info(c10::DeviceIndex device) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  check_runtime(vdrtMemGetInfo(device, &free_bytes, &total_bytes), "vdrtMemGetInfo");
  return {free_bytes, total_bytes};
}

// Segments are returned to the runtime outside the pools' lock: vdrtFree first waits
// for the device's streams, whose kernels free memory (taking the lock) as they end.
void free_segments(const std::vector<void*>& segments) {
  for (void* segment : segments) {
    check_runtime(vdrtFree(segment), "vdrtFree");
  }
}

void free_device_block(void* ptr);

// The pools' lock. It is held for a few hash-map operations at a time (the rare
// segment allocation and cache release aside), so a waiter spins briefly, then
// yields. Unlocking is a plain store where a mutex's unlock is a second atomic
// read-modify-write (~5 ns); every allocation and free of every op takes the lock.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < kSpinsBeforeYielding) {
          pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

  void unlock() {
    locked_.store(false, std::memory_order_release);
  }

 private:
  static constexpr int kSpinsBeforeYielding = 64;

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> locked_{false};
};

// The free blocks allocated on one stream, by size. Vectors per size in an
// open-addressing map, not a multimap: once warm, taking and returning a block
// allocates nothing (this runs for every tensor, on the per-op path of small ops).
struct StreamCache {
  c10::StreamId stream;
  ska::flat_hash_map<size_t, std::vector<Block*>> free_blocks;
};

struct DevicePool {
  // A list searched in order, not a map: programs allocate on few streams, and the
  // first one (usually the default stream) is found at once.
  std::vector<StreamCache> cached;
  size_t cached_blocks = 0;
  // Freed blocks that recorded streams may still use, queued per stream by the point
  // marked in that stream when the block was freed (points increase along a queue).
  // A block is reusable once the host has observed each of its streams past its point.
  std::unordered_map<c10::Stream, std::deque<std::pair<uint64_t, Block*>>> pending;
  DeviceStats stats;
  std::map<c10::MempoolId_t, PrivatePool> private_pools;
  // Captures under way on the device's streams, by capture id, and the pools they
  // allocate from.
  std::vector<std::pair<unsigned long long, PrivatePool*>> capture_routes;
};

// Whether any capture routes allocations to a private pool: the allocation path asks
// the runtime for its stream's capture only then.
std::atomic<int> capture_routes_under_way{0};

class Pools {
 public:
  // Every device has the runtime's one capacity (VDEV_MEMORY_LIMIT).
  Pools()
      : capacity_(device_count() > 0 ? runtime_memory_info(0).second : 0),
        devices_(std::max<c10::DeviceIndex>(device_count(), 1)) {}

  // `host_written`: for a kernel running on the calling thread, which writes the block
  // at once (see RouteCpuAllocationsTo).
  c10::DataPtr allocate(c10::DeviceIndex device, size_t nbytes, c10::Device reported, bool host_written = false) {
    check_device_index(device);
    lazy_init();
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, reported);
    }
    const size_t size = round_block_size(nbytes);
    const bool small = size < kSmallPoolLimit;
    const c10::StreamId stream = current_stream_id(device);
    const unsigned long long capture =
        C10_UNLIKELY(capture_routes_under_way.load(std::memory_order_acquire) != 0)
        ? stream_capture_id(device, stream)
        : 0;
    std::unique_lock<SpinLock> lock(lock_);
    DevicePool& pool = devices_[device];
    PrivatePool* private_pool = capture != 0 ? capture_pool(pool, capture) : nullptr;
    reclaim_pending(pool, /*all=*/false);
    Block* block = private_pool != nullptr ? take_from_private_pool(*private_pool, size)
                                           : take_cached(pool, stream, size);
    const bool reused = block != nullptr;
    if (block == nullptr) {
      void* ptr = allocate_segment(device, stream, pool, size, nbytes, lock);
      block = blocks_.emplace(ptr, std::make_unique<Block>(Block{ptr, size, nbytes, device, stream, true, {}}))
                  .first->second.get();
      if (private_pool != nullptr) {
        block->pool = private_pool;
        private_pool->blocks += 1;
      }
      if (!small && is_oversize(size)) {
        block->oversize = true;
        pool.stats.oversize_segments.increase(1);
      }
    } else {
      // A cached block keeps its entry (size, device and stream are unchanged).
      block->requested = nbytes;
      block->in_use = true;
    }
    update(pool.stats.allocation, small, 1);
    update(pool.stats.active, small, 1);
    update(pool.stats.allocated_bytes, small, static_cast<int64_t>(size));
    update(pool.stats.active_bytes, small, static_cast<int64_t>(size));
    update(pool.stats.requested_bytes, small, static_cast<int64_t>(nbytes));
    if (block->oversize) {
      pool.stats.oversize_allocations.increase(1);
    }
    observe(pool.stats, profiler::MemoryAction::kAlloc, device, block->ptr, size, stream);
    c10::DataPtr data(block->ptr, block->ptr, &free_device_block, reported);
    if (host_written && reused) {
      // The block's earlier users are ordered before later work on its stream, not before
      // the host: another thread may have freed it while its kernels were still queued,
      // after this thread last waited for the stream. The host writes it once they ran.
      lock.unlock();
      synchronize_current_stream(device);
    }
    return data;
  }

  // A block freed with recorded streams stays active (not allocated, not reusable)
  // until those streams pass the point of the free, as CUDA's does until its events
  // complete.
  void release(void* ptr) {
    std::unique_lock<SpinLock> lock(lock_);
    auto it = blocks_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != blocks_.end() && it->second->in_use, "vdev: freeing unknown pointer");
    Block& block = *it->second;
    DevicePool& pool = devices_[block.device];
    const bool small = block.size < kSmallPoolLimit;
    update(pool.stats.allocation, small, -1);
    update(pool.stats.allocated_bytes, small, -static_cast<int64_t>(block.size));
    update(pool.stats.requested_bytes, small, -static_cast<int64_t>(block.requested));
    if (block.oversize) {
      pool.stats.oversize_allocations.decrease(1);
    }
    block.in_use = false;
    observe(
        pool.stats, profiler::MemoryAction::kFreeRequested, block.device, block.ptr, block.size,
        block.stream);
    if (block.pool != nullptr) {
      // Graphs' replays order the pool's reuse: recorded streams do not delay it.
      block.recorded_streams.clear();
      if (block.pool->graphs > 0) {
        cache_in_private_pool(pool, block);
        return;
      }
      std::vector<void*> segments;
      release_private_block(pool, block, segments);
      lock.unlock();
      free_segments(segments);
      return;
    }
    if (block.recorded_streams.empty()) {
      cache_block(pool, block);
      return;
    }
    for (const c10::Stream& stream : block.recorded_streams) {
      pool.pending[stream].emplace_back(mark_stream_point(stream), &block);
    }
    block.streams_to_pass = block.recorded_streams.size();
    block.recorded_streams.clear();
  }

  void record_stream(void* ptr, c10::Stream stream) {
    std::lock_guard<SpinLock> lock(lock_);
    auto it = blocks_.find(ptr);
    TORCH_CHECK(
        it != blocks_.end() && it->second->in_use,
        "record_stream: the tensor's memory is not a live block of ", kBackendName,
        "'s allocator");
    Block& block = *it->second;
    if (stream.device_index() == block.device && stream.id() == block.stream) {
      return;
    }
    auto& recorded = block.recorded_streams;
    if (std::find(recorded.begin(), recorded.end(), stream) == recorded.end()) {
      recorded.push_back(stream);
    }
  }

  bool owns(const void* ptr) {
    std::lock_guard<SpinLock> lock(lock_);
    return blocks_.count(const_cast<void*>(ptr)) != 0;
  }

  // Like CUDA's, emptying the cache waits for the streams of freed blocks (vdrtFree
  // waits for the device's streams).
  void empty_cache() {
    std::vector<void*> segments;
    {
      std::lock_guard<SpinLock> lock(lock_);
      for (auto& pool : devices_) {
        reclaim_pending(pool, /*all=*/true);
        release_cached(pool, segments);
      }
    }
    free_segments(segments);
  }

  DeviceStats stats(c10::DeviceIndex device) {
    check_device_index(device);
    std::lock_guard<SpinLock> lock(lock_);
    return devices_[device].stats;
  }

  template <typename Reset>
  void reset(c10::DeviceIndex device, Reset reset_stat) {
    check_device_index(device);
    std::lock_guard<SpinLock> lock(lock_);
    DeviceStats& stats = devices_[device].stats;
    for (StatArray* array :
         {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
          &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
          &stats.inactive_split_bytes, &stats.requested_bytes}) {
      for (Stat& stat : *array) {
        reset_stat(stat);
      }
    }
    reset_stat(stats.oversize_allocations);
    reset_stat(stats.oversize_segments);
  }

  void reset_accumulated(c10::DeviceIndex device) {
    reset(device, [](Stat& stat) { stat.reset_accumulated(); });
    std::lock_guard<SpinLock> lock(lock_);
    DeviceStats& stats = devices_[device].stats;
    stats.num_alloc_retries = 0;
    stats.num_ooms = 0;
    stats.num_device_alloc = 0;
    stats.num_device_free = 0;
  }

  size_t capacity() const {
    return capacity_;
  }

  bool in_graph_pool(void* ptr) {
    std::lock_guard<SpinLock> lock(lock_);
    auto it = blocks_.find(ptr);
    return it != blocks_.end() && it->second->pool != nullptr;
  }

  std::vector<BlockState> blocks() {
    std::lock_guard<SpinLock> lock(lock_);
    std::vector<BlockState> states;
    states.reserve(blocks_.size());
    for (const auto& [ptr, block] : blocks_) {
      const BlockState::State state = block->in_use ? BlockState::kAllocated
          : block->streams_to_pass > 0             ? BlockState::kPendingFree
                                                   : BlockState::kCached;
      states.push_back(BlockState{
          block->device, block->ptr, block->size, block->in_use ? block->requested : 0,
          block->stream, state});
    }
    return states;
  }

  // Allocations on the streams of capture `capture` (on `device`) come from `pool_id`,
  // which the capturing graph uses from now on.
  void begin_allocate_to_pool(
      c10::DeviceIndex device, c10::MempoolId_t pool_id, unsigned long long capture) {
    std::lock_guard<SpinLock> lock(lock_);
    DevicePool& pool = devices_[device];
    PrivatePool& private_pool = pool.private_pools[pool_id];
    private_pool.graphs += 1;
    pool.capture_routes.emplace_back(capture, &private_pool);
    capture_routes_under_way.fetch_add(1, std::memory_order_release);
  }

  void end_allocate_to_pool(c10::DeviceIndex device, unsigned long long capture) {
    std::lock_guard<SpinLock> lock(lock_);
    auto& routes = devices_[device].capture_routes;
    auto it = std::find_if(routes.begin(), routes.end(), [capture](const auto& route) {
      return route.first == capture;
    });
    TORCH_INTERNAL_ASSERT(it != routes.end(), "vdev: no allocations were routed for capture ", capture);
    routes.erase(it);
    capture_routes_under_way.fetch_sub(1, std::memory_order_release);
  }

  // A graph stops using `pool_id`; the last one returns its free blocks to the runtime
  // (blocks still in use follow when freed).
  void release_pool(c10::DeviceIndex device, c10::MempoolId_t pool_id) {
    std::vector<void*> segments;
    {
      std::lock_guard<SpinLock> lock(lock_);
      DevicePool& pool = devices_[device];
      auto it = pool.private_pools.find(pool_id);
      TORCH_INTERNAL_ASSERT(it != pool.private_pools.end() && it->second.graphs > 0);
      PrivatePool& private_pool = it->second;
      if (--private_pool.graphs > 0) {
        return;
      }
      std::vector<Block*> free_blocks;
      for (auto& [size, blocks] : private_pool.free_blocks) {
        free_blocks.insert(free_blocks.end(), blocks.begin(), blocks.end());
      }
      private_pool.free_blocks.clear();
      for (Block* block : free_blocks) {
        // Cached blocks count as inactive: made active again to leave as a freed one.
        const bool small = block->size < kSmallPoolLimit;
        update(pool.stats.active, small, 1);
        update(pool.stats.active_bytes, small, static_cast<int64_t>(block->size));
        release_private_block(pool, *block, segments);
      }
    }
    free_segments(segments);
  }


 private:
  static PrivatePool* capture_pool(DevicePool& pool, unsigned long long capture) {
    for (const auto& [id, private_pool] : pool.capture_routes) {
      if (id == capture) {
        return private_pool;
      }
    }
    return nullptr;
  }

  static Block* take_from_private_pool(PrivatePool& private_pool, size_t size) {
    auto it = private_pool.free_blocks.find(size);
    if (it == private_pool.free_blocks.end() || it->second.empty()) {
      return nullptr;
    }
    Block* block = it->second.back();
    it->second.pop_back();
    return block;
  }

  static void cache_in_private_pool(DevicePool& pool, Block& block) {
    const bool small = block.size < kSmallPoolLimit;
    update(pool.stats.active, small, -1);
    update(pool.stats.active_bytes, small, -static_cast<int64_t>(block.size));
    block.pool->free_blocks[block.size].push_back(&block);
    observe(
        pool.stats, profiler::MemoryAction::kFreeCompleted, block.device, block.ptr, block.size,
        block.stream);
  }

  // Returns a freed (active, not allocated) block of a pool no graph uses to the
  // runtime, and the pool once it holds no blocks.
  void release_private_block(DevicePool& pool, Block& block, std::vector<void*>& segments) {
    const bool small = block.size < kSmallPoolLimit;
    update(pool.stats.active, small, -1);
    update(pool.stats.active_bytes, small, -static_cast<int64_t>(block.size));
    observe(
        pool.stats, profiler::MemoryAction::kFreeCompleted, block.device, block.ptr, block.size,
        block.stream);
    PrivatePool* private_pool = block.pool;
    release_segment(pool, block, segments);
    if (--private_pool->blocks == 0 && private_pool->graphs == 0) {
      for (auto it = pool.private_pools.begin(); it != pool.private_pools.end(); ++it) {
        if (&it->second == private_pool) {
          pool.private_pools.erase(it);
          break;
        }
      }
    }
  }
  static StreamCache& stream_cache(DevicePool& pool, c10::StreamId stream) {
    for (StreamCache& cache : pool.cached) {
      if (cache.stream == stream) {
        return cache;
      }
    }
    return pool.cached.emplace_back(StreamCache{stream, {}});
  }

  static Block* take_cached(DevicePool& pool, c10::StreamId stream, size_t size) {
    auto& free_blocks = stream_cache(pool, stream).free_blocks;
    auto it = free_blocks.find(size);
    if (it == free_blocks.end() || it->second.empty()) {
      return nullptr;
    }
    Block* block = it->second.back();
    it->second.pop_back();
    pool.cached_blocks -= 1;
    return block;
  }

  static void cache_block(DevicePool& pool, Block& block) {
    const bool small = block.size < kSmallPoolLimit;
    update(pool.stats.active, small, -1);
    update(pool.stats.active_bytes, small, -static_cast<int64_t>(block.size));
    stream_cache(pool, block.stream).free_blocks[block.size].push_back(&block);
    pool.cached_blocks += 1;
    observe(
        pool.stats, profiler::MemoryAction::kFreeCompleted, block.device, block.ptr, block.size,
        block.stream);
  }

  // Moves pending blocks whose streams all passed their points (or, with `all`, every
  // pending block) to the cache of their allocation stream.
  void reclaim_pending(DevicePool& pool, bool all) {
    for (auto it = pool.pending.begin(); it != pool.pending.end();) {
      auto& [stream, queue] = *it;
      while (!queue.empty() && (all || stream_passed(stream, queue.front().first))) {
        Block& block = *queue.front().second;
        queue.pop_front();
        if (--block.streams_to_pass == 0) {
          cache_block(pool, block);
        }
      }
      it = queue.empty() ? pool.pending.erase(it) : std::next(it);
    }
  }

  void* allocate_segment(
      c10::DeviceIndex device, c10::StreamId stream, DevicePool& pool, size_t size,
      size_t requested, std::unique_lock<SpinLock>& lock) {
    auto reserved_bytes = [&pool] { return current(pool.stats.reserved_bytes); };
    std::vector<void*> released;
    const double gc_threshold =
        allocator_config().garbage_collection_threshold.load(std::memory_order_relaxed);
    if (gc_threshold > 0) {
      // Give cached blocks back rather than reserve past the threshold.
      const auto limit = static_cast<size_t>(gc_threshold * static_cast<double>(capacity_));
      if (reserved_bytes() + size > limit && pool.cached_blocks > 0) {
        release_cached(pool, released, limit > size ? limit - size : 0);
      }
    }
    if (reserved_bytes() + size > capacity_ && (pool.cached_blocks > 0 || !pool.pending.empty())) {
      // As CUDA's allocator, wait for the streams of freed blocks and free the cache.
      pool.stats.num_alloc_retries += 1;
      reclaim_pending(pool, /*all=*/true);
      release_cached(pool, released);
    }
    if (!released.empty()) {
      lock.unlock();
      free_segments(released);
      lock.lock();
    }
    void* ptr = nullptr;
    vdrtError_t status = reserved_bytes() + size > capacity_ ? vdrtErrorMemoryAllocation
                                                            : vdrtMalloc(device, &ptr, size);
    if (status == vdrtErrorMemoryAllocation) {
      vdrtGetLastError();
      pool.stats.num_ooms += 1;
      observe(pool.stats, profiler::MemoryAction::kOom, device, nullptr, size, stream);
      const size_t reserved = reserved_bytes();
      const size_t allocated = static_cast<size_t>(
          pool.stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
      TORCH_CHECK_WITH(
          OutOfMemoryError, false,
          kBackendName, " out of memory. Tried to allocate ", format_bytes(requested), " on ",
          kBackendName, ":", static_cast<int>(device), ". The device has a capacity of ",
          format_bytes(capacity_), " of which ",
          format_bytes(capacity_ > reserved ? capacity_ - reserved : 0), " is free; ",
          format_bytes(allocated), " is allocated by PyTorch and ", format_bytes(reserved),
          " is reserved. Set VDEV_MEMORY_LIMIT (bytes) to change the capacity. To see what "
          "holds the memory, print torch.vdev.memory_summary(), or record allocations with "
          "torch.vdev.memory._record_memory_history() and inspect "
          "torch.vdev.memory._dump_snapshot() with torch.cuda._memory_viz "
          "(https://pytorch.org/memory_viz).");
    }
    check_runtime(status, "vdrtMalloc");
    update(pool.stats.segment, size < kSmallPoolLimit, 1);
    update(pool.stats.reserved_bytes, size < kSmallPoolLimit, static_cast<int64_t>(size));
    pool.stats.num_device_alloc += 1;
    observe(pool.stats, profiler::MemoryAction::kSegmentAlloc, device, ptr, size, stream);
    return ptr;
  }

  // Takes cached blocks out until the pool reserves at most `keep_reserved` bytes (all
  // of them by default), for the caller to free once it released the lock.
  void release_cached(DevicePool& pool, std::vector<void*>& segments, size_t keep_reserved = 0) {
    for (StreamCache& cache : pool.cached) {
      for (auto& [size, blocks] : cache.free_blocks) {
        while (!blocks.empty() && current(pool.stats.reserved_bytes) > keep_reserved) {
          Block* block = blocks.back();
          blocks.pop_back();
          pool.cached_blocks -= 1;
          release_segment(pool, *block, segments);
        }
      }
    }
    if (pool.cached_blocks == 0) {
      pool.cached.clear();
    }
  }

  // Forgets a block that is neither in use nor cached; its segment joins `segments`
  // for the caller to free once it released the lock.
  void release_segment(DevicePool& pool, Block& block, std::vector<void*>& segments) {
    const size_t size = block.size;
    const c10::DeviceIndex device = block.device;
    const c10::StreamId stream = block.stream;
    const bool oversize = block.oversize;
    void* ptr = block.ptr;
    blocks_.erase(ptr);  // destroys the block
    segments.push_back(ptr);
    update(pool.stats.segment, size < kSmallPoolLimit, -1);
    update(pool.stats.reserved_bytes, size < kSmallPoolLimit, -static_cast<int64_t>(size));
    if (oversize) {
      pool.stats.oversize_segments.decrease(1);
    }
    pool.stats.num_device_free += 1;
    observe(pool.stats, profiler::MemoryAction::kSegmentFree, device, ptr, size, stream);
  }

  const size_t capacity_;
  SpinLock lock_;
  std::vector<DevicePool> devices_;
  // Every block, in use, pending or cached: one open-addressing lookup per free. The
  // blocks stay put while the map grows: caches and pending queues point to them.
  ska::flat_hash_map<void*, std::unique_ptr<Block>> blocks_;
};

Pools& pools() {
  // Leaked on purpose: tensors may be freed during static destruction.
  static Pools* instance = new Pools();
  return *instance;
}

void free_device_block(void* ptr) {
  if (ptr != nullptr) {
    pools().release(ptr);
  }
}

// The CPU allocator installed process-wide: it serves ordinary CPU allocations
// from the allocator it replaced, a thread's allocations from device memory while
// that thread runs a CPU kernel for a device (RouteCpuAllocationsTo), and a stream
// worker's from the kernel temporary cache. One thread-local read tells them apart.
constexpr c10::DeviceIndex kNotRouted = -1;
constexpr c10::DeviceIndex kStreamWorker = -2;
thread_local c10::DeviceIndex tls_route_device = kNotRouted;

class RoutingCpuAllocator final : public c10::Allocator {
 public:
  explicit RoutingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex route = tls_route_device;
    if (C10_UNLIKELY(route != kNotRouted)) {
      if (route != kStreamWorker) {
        return pools().allocate(route, nbytes, c10::Device(c10::kCPU), /*host_written=*/true);
      }
      if (nbytes > 0) {
        return kernel_temporary_cache().allocate(nbytes);
      }
    }
    return base_->allocate(nbytes);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_either;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  // raw_deallocate may run after routing ended, so it asks which memory it holds.
  static void free_either(void* ptr);

  c10::Allocator* base_;
};

RoutingCpuAllocator& routing_cpu_allocator() {
  static RoutingCpuAllocator* instance = new RoutingCpuAllocator(c10::GetCPUAllocator());
  return *instance;
}

void RoutingCpuAllocator::free_either(void* ptr) {
  if (ptr != nullptr && kernel_temporary_cache().owns(ptr)) {
    KernelTemporaryCache::free_block(ptr);
  } else if (ptr != nullptr && pools().owns(ptr)) {
    pools().release(ptr);
  } else {
    routing_cpu_allocator().base_->raw_deleter()(ptr);
  }
}

class CpuViewAllocator final : public c10::Allocator {
 public:
  explicit CpuViewAllocator(c10::DeviceIndex device) : device_(device) {}

  c10::DataPtr allocate(size_t nbytes) override {
    // A kernel on the calling thread resizing an alias writes the memory at once.
    return pools().allocate(device_, nbytes, c10::Device(c10::kCPU), /*host_written=*/tls_route_device >= 0);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_device_block;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    copy_device_memory(dest, src, count);
  }

 private:
  c10::DeviceIndex device_;
};

} // namespace

c10::DataPtr CachingAllocator::allocate(size_t nbytes) {
  c10::DeviceIndex device = current_device();
  return pools().allocate(device, nbytes, make_device(device));
}

c10::DeleterFnPtr CachingAllocator::raw_deleter() const {
  return &free_device_block;
}

// Allocator::clone's copy: a lazy clone's copy-on-write memory materialized when first
// written. Queued like every copy between device memory.
void CachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  copy_device_memory(dest, src, count);
}

bool CachingAllocator::initialized() {
  return true;
}

void CachingAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  pools().empty_cache();
  kernel_temporary_cache().release_cached();
}

void CachingAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr) {
    return;  // empty tensors own no block
  }
  lazy_init();
  TORCH_CHECK(
      owns_device_memory(ptr), "record_stream: the tensor's memory does not come from ",
      kBackendName, "'s allocator");
  check_stream(stream);
  pools().record_stream(ptr.get(), stream);
}

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  return pools().stats(device);
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  pools().reset_accumulated(device);
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  pools().reset(device, [](Stat& stat) { stat.reset_peak(); });
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  return runtime_memory_info(device);
}

CachingAllocator& caching_allocator() {
  static CachingAllocator instance;
  return instance;
}

c10::DataPtr allocate_device_memory(
    c10::DeviceIndex device, size_t nbytes, c10::Device reported_device) {
  return pools().allocate(device, nbytes, reported_device);
}

bool owns_device_memory(const c10::DataPtr& data_ptr) {
  return data_ptr.get_deleter() == &free_device_block;
}

void adopt_device_memory(c10::DataPtr& data_ptr, c10::DeviceIndex device) {
  data_ptr.unsafe_set_device(make_device(device));
}

void copy_device_memory(void* dest, const void* src, size_t count) {
  if (count == 0) {
    return;
  }
  const c10::DeviceIndex device = device_of_pointer(src).index();
  const c10::Stream stream = current_stream(device);
  // The source may be freed before the copy runs (a lazy clone's last sharer letting
  // go): its block waits for this stream as a recorded tensor's does.
  if (pools().owns(src)) {
    pools().record_stream(const_cast<void*>(src), stream);
  }
  launch(stream, "Memcpy DtoD (Device -> Device)", [dest, src, count, device]() {
    profiler::ActivityScope activity(
        profiler::ActivityKind::kMemcpy, "Memcpy DtoD (Device -> Device)", device, static_cast<int64_t>(count));
    std::memcpy(dest, src, count);
  });
}

void resize_device_storage(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  c10::DataPtr grown;
  if (nbytes != 0) {
    grown = storage->allocator()->allocate(nbytes);
  }
  copy_device_memory(grown.get(), storage->data(), std::min(nbytes, storage->nbytes()));
  storage->set_data_ptr_noswap(std::move(grown));
  storage->set_nbytes(nbytes);
}

c10::Allocator* cpu_view_allocator(c10::DeviceIndex device) {
  static std::vector<CpuViewAllocator>* allocators = [] {
    auto* all = new std::vector<CpuViewAllocator>();
    for (c10::DeviceIndex index = 0; index < device_count(); ++index) {
      all->emplace_back(index);
    }
    return all;
  }();
  // Asked for the devices of existing tensors, on every op: an index check, not
  // check_device_index's call and message.
  TORCH_INTERNAL_ASSERT(device >= 0 && static_cast<size_t>(device) < allocators->size());
  return &(*allocators)[device];
}

RouteCpuAllocationsTo::RouteCpuAllocationsTo(c10::DeviceIndex device)
    : previous_(tls_route_device) {
  tls_route_device = device;
}

RouteCpuAllocationsTo::~RouteCpuAllocationsTo() {
  tls_route_device = previous_;
}

void serve_cpu_allocations_from_kernel_temporary_cache() {
  tls_route_device = kStreamWorker;
}

c10::Device device_of_pointer(const void* ptr) {
  vdrtPointerAttributes attributes;
  check_runtime(vdrtPointerGetAttributes(&attributes, ptr), "vdrtPointerGetAttributes");
  TORCH_CHECK(
      attributes.type == vdrtMemoryTypeDevice, "Pointer ", ptr, " is not ", kBackendName,
      " device memory");
  return make_device(static_cast<c10::DeviceIndex>(attributes.device));
}

bool in_graph_pool(const c10::DataPtr& data_ptr) {
  return owns_device_memory(data_ptr) && pools().in_graph_pool(data_ptr.get());
}

std::vector<BlockState> memory_blocks() {
  return pools().blocks();
}

void begin_allocate_to_pool(
    c10::DeviceIndex device, c10::MempoolId_t pool, unsigned long long capture) {
  pools().begin_allocate_to_pool(device, pool, capture);
}

void end_allocate_to_pool(c10::DeviceIndex device, unsigned long long capture) {
  pools().end_allocate_to_pool(device, capture);
}

void release_pool(c10::DeviceIndex device, c10::MempoolId_t pool) {
  pools().release_pool(device, pool);
}

size_t memory_capacity(c10::DeviceIndex device) {
  check_device_index(device);
  return pools().capacity();
}

REGISTER_ALLOCATOR(kDeviceType, &caching_allocator())

namespace {
struct InstallRoutingCpuAllocator {
  InstallRoutingCpuAllocator() {
    c10::SetCPUAllocator(&routing_cpu_allocator(), /*priority=*/0);
  }
} install_routing_cpu_allocator;
} // namespace

} // namespace vdev
