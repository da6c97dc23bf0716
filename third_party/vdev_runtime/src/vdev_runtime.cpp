// The vdev device runtime (see include/vdev_runtime.h for the contract).
//
// Structure: a leaked process-wide Runtime holds the configuration, the map of
// allocations (device and pinned) and the streams of each device. A stream is a queue
// of Work items run in order by the stream's worker thread, started at its first
// asynchronous launch. Everything a stream does (host functions, copies, memsets,
// event records and waits) goes through submit(), the one place that decides whether
// work is queued, run at once (launch blocking) or, on a capturing stream, recorded
// into the capture's graph.
//
// Captures: a Capture holds the nodes recorded so far and the streams taking part;
// each stream and event in a capture knows the capture's frontier it stands at (the
// nodes later work depends on). All capture state is guarded by one mutex, taken only
// while a capture is under way (an atomic count says whether one is).

#include "vdev_runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

struct vdrtStream;
struct vdrtEvent;

namespace {

constexpr int kDefaultDeviceCount = 2;
constexpr long kMaxDeviceCount = 64;
constexpr size_t kDeviceAlignment = 64;
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -3;
constexpr int kVersionMajor = 1;
constexpr int kVersionMinor = 0;

using Clock = std::chrono::steady_clock;

thread_local vdrtError_t tls_last_error = vdrtSuccess;
thread_local std::string tls_last_message;

vdrtError_t fail(vdrtError_t error, std::string message) {
  tls_last_error = error;
  tls_last_message = std::move(message);
  return error;
}

vdrtError_t invalid(const char* function, const char* what) {
  return fail(vdrtErrorInvalidValue, std::string(function) + ": " + what);
}

size_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size)
                                    : SIZE_MAX;
}

bool env_flag(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && std::strcmp(text, "1") == 0;
}

struct Config {
  int device_count = kDefaultDeviceCount;
  std::string device_count_problem;  // empty if VDEV_DEVICE_COUNT is well formed
  size_t capacity = 0;
  std::string capacity_problem;      // empty if VDEV_MEMORY_LIMIT is well formed

  Config() {
    const char* count = std::getenv("VDEV_DEVICE_COUNT");
    if (count != nullptr && *count != '\0') {
      char* end = nullptr;
      long value = std::strtol(count, &end, 10);
      if (*end != '\0' || value < 0 || value > kMaxDeviceCount) {
        device_count_problem = std::string("VDEV_DEVICE_COUNT='") + count +
            "' is not a whole number from 0 to " + std::to_string(kMaxDeviceCount) +
            "; using " + std::to_string(kDefaultDeviceCount) + " devices";
      } else {
        device_count = static_cast<int>(value);
      }
    }
    const char* limit = std::getenv("VDEV_MEMORY_LIMIT");
    if (limit == nullptr || *limit == '\0') {
      capacity = physical_memory_bytes();
    } else {
      char* end = nullptr;
      unsigned long long value = std::strtoull(limit, &end, 10);
      if (*end != '\0' || limit[0] == '-') {
        capacity_problem =
            std::string("VDEV_MEMORY_LIMIT='") + limit + "' is not a whole number of bytes";
      }
      capacity = static_cast<size_t>(value);
    }
  }
};

struct Capture;

std::atomic<vdrtHostWaitHook> host_wait_hook{nullptr};

// Runs `wait`, which blocks the calling thread on queued work, through the host's hook.
template <typename Wait>
void block_host(Wait&& wait) {
  const vdrtHostWaitHook hook = host_wait_hook.load(std::memory_order_acquire);
  if (hook == nullptr) {
    wait();
    return;
  }
  hook([](void* context) { (*static_cast<std::remove_reference_t<Wait>*>(context))(); }, &wait);
}

struct Allocation {
  size_t size;
  int device;  // -1 for pinned host memory
};

// A record of the event's state, shared with the queued work that completes it, so an
// event may be destroyed while a record is pending.
struct EventState {
  explicit EventState(bool timing) : timing(timing) {}

  const bool timing;
  std::mutex mutex;
  std::condition_variable completed_changed;
  // Records are numbered in record order. Records on different streams complete in any
  // order, and a wait is for one record (CUDA's, the latest when the wait was made), so
  // the event keeps the records not yet complete; few are, and the vector keeps its
  // capacity, so recording allocates nothing once the event was used.
  uint64_t recorded = 0;
  std::vector<uint64_t> pending;
  Clock::time_point time{};  // when the latest record completed
  std::weak_ptr<vdrtStream> stream;  // of the last record
  // Last recorded in this capture (guarded by capture_mutex), at this frontier.
  std::shared_ptr<Capture> capture;
  std::vector<size_t> capture_frontier;

  // The next record, for work that will complete it (mutex held).
  uint64_t add_record() {
    pending.push_back(++recorded);
    return recorded;
  }

  // A record whose work was refused: dropped unrun, or (launch blocking) run and then
  // reporting a failure. Either way no wait for it may hold (mutex held).
  void abandon(uint64_t record) {
    if (!done(record)) {
      remove_pending(record);
    }
  }

  // (mutex held; `pending` is in no order)
  void remove_pending(uint64_t record) {
    *std::find(pending.begin(), pending.end(), record) = pending.back();
    pending.pop_back();
  }

  // Whether `record` is complete; record 0 (none) is (mutex held).
  bool done(uint64_t record) const {
    return std::find(pending.begin(), pending.end(), record) == pending.end();
  }

  void complete(uint64_t record) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      remove_pending(record);
      if (timing && record == recorded) {
        time = Clock::now();  // an earlier record completing later is not the event's point
      }
    }
    completed_changed.notify_all();
  }

  void wait_for(uint64_t record) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done(record)) {
        return;
      }
    }
    block_host([&] {
      std::unique_lock<std::mutex> lock(mutex);
      completed_changed.wait(lock, [&] { return done(record); });
    });
  }
};

struct Work {
  vdrtHostFn fn;
  void* data;
  // Called with `data` once the work can no longer run; null: the launcher owns it.
  vdrtHostFn destroy = nullptr;
  const char* name = nullptr;
};

void drop(const Work& work) {
  if (work.destroy != nullptr) {
    work.destroy(work.data);
  }
}

template <class Item>
void destroy_as(void* data) {
  delete static_cast<Item*>(data);
}

// Work whose data is an Item owned by the runtime, run by Item::run.
template <class Item>
Work owned_work(Item* item, const char* name) {
  return Work{&Item::run, item, &destroy_as<Item>, name};
}

// ---- capture state ----

struct Node {
  vdrtHostFn fn;
  std::shared_ptr<void> data;  // destroyed with the last graph holding the node
  const char* name;
  std::vector<size_t> dependencies;  // indices of earlier nodes
};

// Nodes in recording order, which respects their dependencies.
struct GraphBody {
  std::vector<Node> nodes;
};

struct Capture {
  Capture(unsigned long long id, vdrtStreamCaptureMode mode, vdrtStream* origin)
      : id(id), mode(mode), thread(std::this_thread::get_id()), origin(origin) {}

  const unsigned long long id;
  const vdrtStreamCaptureMode mode;
  const std::thread::id thread;
  vdrtStream* const origin;
  bool invalidated = false;
  std::string failure;  // why it was invalidated
  std::vector<Node> nodes;
  std::vector<vdrtStream*> streams;  // the origin first, then the streams that joined
  std::vector<std::weak_ptr<EventState>> events;  // recorded in the capture
};

std::mutex capture_mutex;
std::atomic<int> captures_under_way{0};
// Guarded by capture_mutex.
std::vector<std::shared_ptr<Capture>> active_captures;
unsigned long long last_capture_id = 0;

const char* mode_name(vdrtStreamCaptureMode mode) {
  switch (mode) {
    case vdrtStreamCaptureModeGlobal: return "global";
    case vdrtStreamCaptureModeThreadLocal: return "thread_local";
    case vdrtStreamCaptureModeRelaxed: return "relaxed";
  }
  return "unknown";
}

void invalidate(Capture& capture, const std::string& why) {
  if (!capture.invalidated) {
    capture.invalidated = true;
    capture.failure = why;
  }
}

// Fails with `error` and invalidates `capture` (capture_mutex held).
vdrtError_t refuse(Capture& capture, vdrtError_t error, const std::string& what) {
  invalidate(capture, what);
  return fail(error, what + "; capture " + std::to_string(capture.id) + " is invalidated");
}

// An operation outside any capture (launching on or waiting for a stream that is not
// capturing): forbidden by each global capture, and by thread-local and global
// captures of the calling thread. Invalidates the captures forbidding it
// (capture_mutex held).
vdrtError_t forbid_uncaptured(const char* function, const char* what) {
  std::string forbidding;
  for (const auto& capture : active_captures) {
    const bool forbids = capture->mode == vdrtStreamCaptureModeGlobal ||
        (capture->mode == vdrtStreamCaptureModeThreadLocal &&
         capture->thread == std::this_thread::get_id());
    if (forbids) {
      invalidate(
          *capture, std::string(function) + ": " + what + " while this capture was under way");
      forbidding += (forbidding.empty() ? "" : ", ") + std::to_string(capture->id) + " (" +
          mode_name(capture->mode) + " mode)";
    }
  }
  if (forbidding.empty()) {
    return vdrtSuccess;
  }
  return fail(
      vdrtErrorStreamCaptureImplicit,
      std::string(function) + ": " + what + " is not permitted while capture " + forbidding +
          " is under way; the capture is invalidated (capture in \"relaxed\" mode, or "
          "use the capturing stream)");
}

std::atomic<bool> launch_blocking{env_flag("VDEV_LAUNCH_BLOCKING")};

// How long an idle worker keeps polling its queue, and a host waiting for a stream
// keeps polling it, before it sleeps (VDEV_WORKER_SPIN_US, microseconds). Waking a sleeping thread costs the launching
// thread a futex call and the kernel tens of microseconds of latency; a host issuing
// small ops back to back finds a polling worker instead.
int64_t read_worker_spin_ns() {
  const char* text = std::getenv("VDEV_WORKER_SPIN_US");
  if (text == nullptr || *text == '\0') {
    return 50 * 1000;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  return *end == '\0' && value >= 0 ? static_cast<int64_t>(value) * 1000 : 50 * 1000;
}
const int64_t worker_spin_ns = read_worker_spin_ns();

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The stream whose work this thread runs (worker or launch-blocking caller), and the
// failure a running host function reported.
thread_local vdrtStream* tls_running_stream = nullptr;
thread_local bool tls_work_failed = false;
thread_local std::string tls_work_failure;
// True while this thread runs a graph launch's recorded work.
thread_local bool tls_running_graph = false;
// True on the streams' worker threads.
thread_local bool tls_is_worker = false;

}  // namespace

struct vdrtEvent {
  std::shared_ptr<EventState> state;
};

struct vdrtStream : std::enable_shared_from_this<vdrtStream> {
  static constexpr uint32_t kMagic = 0x76647274;  // "vdrt"

  vdrtStream(int device, int priority) : device(device), priority(priority) {}
  ~vdrtStream() {
    magic = 0;
  }

  // Handles are checked by this tag rather than looked up: the check runs on every launch.
  uint32_t magic = kMagic;
  const int device;
  const int priority;

  std::mutex mutex;  // guards everything below; the atomics change under it too
  std::condition_variable work_queued;
  std::condition_variable work_done;
  std::deque<Work> queue;
  // Read without the lock by queries and synchronizations of an idle stream, which
  // the host makes around every operation it runs itself.
  std::atomic<uint64_t> submitted{0};
  std::atomic<uint64_t> completed{0};
  // The lowest `completed` a host sleeping in wait_idle needs (kNoSleeper: none). The
  // worker wakes sleepers once it is reached, not at every work item: a host that
  // synchronizes behind a deep queue would otherwise wake per kernel and take the
  // worker's core and lock each time.
  static constexpr uint64_t kNoSleeper = UINT64_MAX;
  uint64_t wake_sleepers_at = kNoSleeper;
  bool stopping = false;
  std::thread worker;
  // The first failure since the stream was last synchronized.
  std::atomic<bool> failed{false};
  std::string failure;
  // Held while one work item runs: the worker and launch-blocking callers take turns.
  std::mutex running;
  // The capture the stream takes part in, and the nodes its next work depends on
  // (guarded by capture_mutex).
  std::shared_ptr<Capture> capture;
  std::vector<size_t> capture_frontier;

  void run(const Work& work) {
    std::lock_guard<std::mutex> turn(running);
    vdrtStream* outer = tls_running_stream;
    tls_running_stream = this;
    tls_work_failed = false;
    work.fn(work.data);
    drop(work);
    tls_running_stream = outer;
    if (tls_work_failed) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failed) {
        failed = true;
        failure = std::move(tls_work_failure);
      }
    }
  }

  // Polls `ready` for up to the spin time (VDEV_WORKER_SPIN_US); true once it holds.
  template <typename Ready>
  static bool poll(Ready&& ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(worker_spin_ns);
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) {
          return true;
        }
        cpu_relax();
      }
      // On a machine with more busy threads than cores, the thread being waited for
      // may need this core.
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
    }
  }

  void work_loop() {
    tls_is_worker = true;
    // Named for profilers and /proc/<pid>/task/<tid>/comm (15 characters at most).
    pthread_setname_np(pthread_self(), ("vdev_stream_" + std::to_string(device)).substr(0, 15).c_str());
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      if (queue.empty() && !stopping && worker_spin_ns > 0) {
        lock.unlock();
        poll([&] { return submitted.load(std::memory_order_acquire) != completed.load(std::memory_order_relaxed); });
        lock.lock();
      }
      work_queued.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) {
        return;
      }
      Work work = queue.front();
      queue.pop_front();
      lock.unlock();
      run(work);
      lock.lock();
      completed += 1;
      if (completed.load(std::memory_order_relaxed) >= wake_sleepers_at) {
        wake_sleepers_at = kNoSleeper;
        // Unlocked first, so that a woken host does not block on the lock at once.
        lock.unlock();
        work_done.notify_all();
        lock.lock();
      }
    }
  }

  // Adds a node to the stream's capture (capture_mutex held).
  vdrtError_t record(const Work& work, const char* function) {
    Capture& active = *capture;
    if (active.invalidated) {
      return fail(
          vdrtErrorStreamCaptureInvalidated,
          std::string(function) + ": capture " + std::to_string(active.id) +
              " was invalidated by an earlier error: " + active.failure);
    }
    std::shared_ptr<void> data =
        work.destroy != nullptr ? std::shared_ptr<void>(work.data, work.destroy)
                                : std::shared_ptr<void>(work.data, [](void*) {});
    active.nodes.push_back(Node{work.fn, std::move(data), work.name, std::move(capture_frontier)});
    capture_frontier = {active.nodes.size() - 1};
    return vdrtSuccess;
  }

  // The one entry point of stream work. `launch`: work launched by the caller (host
  // functions, copies, memsets, graphs), which a capturing stream records; event
  // records and waits reach here only outside captures.
  vdrtError_t submit(Work work, const char* function, bool launch = true) {
    if (launch && captures_under_way.load(std::memory_order_acquire) != 0) {
      vdrtError_t error = vdrtSuccess;
      {
        std::lock_guard<std::mutex> lock(capture_mutex);
        if (capture != nullptr) {
          error = record(work, function);
          if (error == vdrtSuccess) {
            return vdrtSuccess;
          }
        } else {
          error = forbid_uncaptured(function, "launching work on a stream that is not capturing");
        }
      }
      if (error != vdrtSuccess) {
        drop(work);
        return error;
      }
    }
    if (launch_blocking.load(std::memory_order_relaxed)) {
      wait_idle();
      run(work);
      return take_failure();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!worker.joinable()) {
        worker = std::thread([this] { work_loop(); });
      }
      queue.push_back(work);
      submitted += 1;
    }
    work_queued.notify_one();
    return vdrtSuccess;
  }

  bool idle() const {
    // `completed` first: it never exceeds `submitted`, so equal values mean idle.
    const uint64_t done = completed.load(std::memory_order_acquire);
    return done == submitted.load(std::memory_order_acquire);
  }

  void wait_idle() {
    if (idle()) {
      return;
    }
    // Polled first, as the worker polls for work: a host that synchronizes right after
    // small kernels (a data-dependent op, .item()) finds them done, and neither thread
    // sleeps (waking one costs tens of microseconds).
    const uint64_t target = submitted.load();
    if (worker_spin_ns > 0 && poll([&] { return completed.load(std::memory_order_acquire) >= target; })) {
      return;
    }
    block_host([&] {
      std::unique_lock<std::mutex> lock(mutex);
      while (completed.load() < target) {
        // Woken sleepers all clear it; those still short of their target set it again.
        wake_sleepers_at = std::min(wake_sleepers_at, target);
        work_done.wait(lock);
      }
    });
  }

  vdrtError_t take_failure() {
    if (!failed.load(std::memory_order_acquire)) {
      return vdrtSuccess;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed) {
      return vdrtSuccess;
    }
    failed = false;
    return fail(vdrtErrorLaunchFailure, std::move(failure));
  }

  vdrtError_t synchronize() {
    if (tls_running_stream == this) {
      return fail(
          vdrtErrorWouldDeadlock,
          "a stream's own work cannot wait for that stream to complete");
    }
    wait_idle();
    return take_failure();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work_queued.notify_one();
    if (worker.joinable()) {
      worker.join();
    }
  }
};

namespace {

class Runtime {
 public:
  const Config config;

  Runtime()
      : used_(new std::atomic<size_t>[static_cast<size_t>(config.device_count)]()),
        devices_(new DeviceStreams[static_cast<size_t>(config.device_count)]) {}

  bool valid_device(int device) const {
    return device >= 0 && device < config.device_count;
  }

  vdrtError_t check_device(int device, const char* function) const {
    if (valid_device(device)) {
      return vdrtSuccess;
    }
    return fail(
        vdrtErrorInvalidDevice,
        std::string(function) + ": device " + std::to_string(device) + " does not exist (" +
            std::to_string(config.device_count) + " devices)");
  }

  vdrtError_t check_capacity_config() const {
    if (config.capacity_problem.empty()) {
      return vdrtSuccess;
    }
    return fail(vdrtErrorInvalidConfiguration, config.capacity_problem);
  }

  // ---- allocations ----

  vdrtError_t allocate_device(int device, void** ptr, size_t size) {
    size_t rounded = (size + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    std::atomic<size_t>& used = used_[static_cast<size_t>(device)];
    size_t before = used.fetch_add(rounded);
    if (before + rounded > config.capacity || before + rounded < before) {
      used.fetch_sub(rounded);
      return fail(
          vdrtErrorMemoryAllocation,
          "out of memory allocating " + std::to_string(size) + " bytes on device " +
              std::to_string(device) + ": " + std::to_string(before) + " of " +
              std::to_string(config.capacity) + " bytes are allocated");
    }
    void* memory = std::aligned_alloc(kDeviceAlignment, rounded);
    if (memory == nullptr) {
      used.fetch_sub(rounded);
      return fail(
          vdrtErrorMemoryAllocation,
          "the host could not provide " + std::to_string(size) + " bytes for device " +
              std::to_string(device));
    }
    remember(memory, Allocation{rounded, device});
    *ptr = memory;
    return vdrtSuccess;
  }

  vdrtError_t free_device(void* ptr) {
    Allocation allocation{};
    if (!lookup_base(ptr, &allocation) || allocation.device < 0) {
      return invalid("vdrtFree", "the pointer was not returned by vdrtMalloc");
    }
    // Like cudaFree: no queued work may still use the memory.
    synchronize_device(allocation.device, /*take_failures=*/false);
    forget(ptr);
    std::free(ptr);
    used_[static_cast<size_t>(allocation.device)].fetch_sub(allocation.size);
    return vdrtSuccess;
  }

  size_t used(int device) const {
    return used_[static_cast<size_t>(device)].load();
  }

  void remember(void* ptr, Allocation allocation) {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    allocations_.emplace(static_cast<const char*>(ptr), allocation);
  }

  void forget(void* ptr) {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    allocations_.erase(static_cast<const char*>(ptr));
  }

  bool lookup_base(const void* ptr, Allocation* allocation) {
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    auto it = allocations_.find(static_cast<const char*>(ptr));
    if (it == allocations_.end()) {
      return false;
    }
    *allocation = it->second;
    return true;
  }

  // The allocation containing `ptr`, if any.
  bool lookup(const void* ptr, const char** base, Allocation* allocation) {
    const char* address = static_cast<const char*>(ptr);
    std::lock_guard<std::mutex> lock(allocations_mutex_);
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin()) {
      return false;
    }
    --it;
    // A zero-size range still contains its own start (ranges are never empty here).
    if (address >= it->first + it->second.size) {
      return false;
    }
    *base = it->first;
    *allocation = it->second;
    return true;
  }

  // True if [ptr, ptr + count) lies in one allocation of device memory.
  bool in_device_memory(const void* ptr, size_t count, int* device) {
    const char* base = nullptr;
    Allocation allocation{};
    if (!lookup(ptr, &base, &allocation) || allocation.device < 0) {
      return false;
    }
    const size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - base);
    if (count > allocation.size - offset) {
      return false;
    }
    *device = allocation.device;
    return true;
  }

  // ---- streams ----

  vdrtStream* default_stream(int device) {
    DeviceStreams& streams = devices_[static_cast<size_t>(device)];
    std::call_once(streams.default_created, [&] {
      streams.default_stream = add_stream(device, kLeastPriority);
    });
    return streams.default_stream;
  }

  vdrtStream* add_stream(int device, int priority) {
    auto stream = std::make_shared<vdrtStream>(device, priority);
    std::lock_guard<std::mutex> lock(streams_mutex_);
    std::call_once(process_handlers_registered_, [] {
      std::atexit(&Runtime::drain_all_streams);
      // A fork copies only the forking thread: a worker in the middle of a kernel may
      // hold a lock or a one-time initialisation (a function's static) that the child
      // would then wait for forever, even in host-only work. The parent forks once its
      // streams' work is complete.
      pthread_atfork(&Runtime::drain_all_streams, nullptr, nullptr);
    });
    devices_[static_cast<size_t>(device)].streams.push_back(stream);
    return stream.get();
  }

  vdrtError_t destroy_stream(vdrtStream* stream) {
    if (stream == default_stream(stream->device)) {
      return invalid("vdrtStreamDestroy", "a device's default stream cannot be destroyed");
    }
    if (tls_running_stream == stream) {
      return fail(vdrtErrorWouldDeadlock, "vdrtStreamDestroy: a stream cannot destroy itself");
    }
    stream->wait_idle();
    stream->stop();
    std::shared_ptr<vdrtStream> owner;  // destroyed after the lock is released
    std::lock_guard<std::mutex> lock(streams_mutex_);
    auto& streams = devices_[static_cast<size_t>(stream->device)].streams;
    auto it = std::find_if(
        streams.begin(), streams.end(), [&](const auto& owned) { return owned.get() == stream; });
    owner = std::move(*it);
    streams.erase(it);
    return vdrtSuccess;
  }

  std::vector<std::shared_ptr<vdrtStream>> streams_of(int device) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    return devices_[static_cast<size_t>(device)].streams;
  }

  vdrtError_t synchronize_device(int device, bool take_failures) {
    vdrtError_t first = vdrtSuccess;
    std::string message;
    for (const auto& stream : streams_of(device)) {
      if (stream.get() == tls_running_stream) {
        return fail(
            vdrtErrorWouldDeadlock,
            "a stream's own work cannot wait for its device to complete");
      }
      stream->wait_idle();
      if (take_failures) {
        vdrtError_t error = stream->take_failure();
        if (first == vdrtSuccess && error != vdrtSuccess) {
          first = error;
          message = tls_last_message;
        }
      }
    }
    return first == vdrtSuccess ? vdrtSuccess : fail(first, message);
  }

 private:
  struct DeviceStreams {
    std::once_flag default_created;
    vdrtStream* default_stream = nullptr;
    std::vector<std::shared_ptr<vdrtStream>> streams;
  };

  // Work still queued at exit runs to completion before static destructors (of the
  // libraries it calls into) run.
  static void drain_all_streams();

  std::unique_ptr<std::atomic<size_t>[]> used_;
  std::mutex allocations_mutex_;
  std::map<const char*, Allocation> allocations_;
  std::mutex streams_mutex_;
  std::once_flag process_handlers_registered_;
  std::unique_ptr<DeviceStreams[]> devices_;
};

Runtime& runtime() {
  // Leaked on purpose: workers and late frees may outlive static destruction.
  static Runtime* instance = new Runtime();
  return *instance;
}

void Runtime::drain_all_streams() {
  Runtime& self = runtime();
  for (int device = 0; device < self.config.device_count; ++device) {
    for (const auto& stream : self.streams_of(device)) {
      stream->wait_idle();
    }
  }
}

#define VDRT_CHECK_STREAM(stream, function)                                  \
  do {                                                                       \
    if (stream == nullptr || stream->magic != vdrtStream::kMagic) {         \
      return invalid(function, "not a stream of this runtime");             \
    }                                                                        \
  } while (0)

struct CopyWork {
  void* dst;
  const void* src;
  size_t count;

  static void run(void* data) {
    auto* work = static_cast<CopyWork*>(data);
    std::memmove(work->dst, work->src, work->count);
  }
};

struct SetWork {
  void* ptr;
  int value;
  size_t count;

  static void run(void* data) {
    auto* work = static_cast<SetWork*>(data);
    std::memset(work->ptr, work->value, work->count);
  }
};

struct RecordWork {
  std::shared_ptr<EventState> event;
  uint64_t record;

  static void run(void* data) {
    auto* work = static_cast<RecordWork*>(data);
    work->event->complete(work->record);
  }
};

struct WaitWork {
  std::shared_ptr<EventState> event;
  uint64_t record;

  static void run(void* data) {
    auto* work = static_cast<WaitWork*>(data);
    work->event->wait_for(work->record);
  }
};

// One launch of a graph: its nodes in recording order. A launch of an executable
// graph runs after the exec's previous launch, whichever stream that went to (as CUDA
// orders the launches of a cudaGraphExec_t): `launches` counts them as an event's
// records, this launch being `launch`. A launch recorded into a capture has no order.
struct GraphRun {
  std::shared_ptr<const GraphBody> body;
  std::shared_ptr<EventState> launches;
  uint64_t launch = 0;

  static void run(void* data) {
    auto* run = static_cast<GraphRun*>(data);
    if (run->launches != nullptr) {
      run->launches->wait_for(run->launch - 1);
    }
    tls_running_graph = true;
    for (const Node& node : run->body->nodes) {
      node.fn(node.data.get());
    }
    tls_running_graph = false;
    if (run->launches != nullptr) {
      run->launches->complete(run->launch);
    }
  }
};

// vdrtStreamWaitEvent while captures are under way (capture_mutex held). A stream
// waiting for an event recorded in a capture joins that capture (or, already in it,
// depends on the work before the record); a capturing stream may not wait for work
// outside its capture.
vdrtError_t wait_in_capture(vdrtStream* stream, EventState& event) {
  const std::shared_ptr<Capture>& recorded_in = event.capture;
  if (recorded_in == nullptr) {
    if (stream->capture == nullptr || event.recorded == 0) {
      return vdrtSuccess;
    }
    return refuse(
        *stream->capture, vdrtErrorStreamCaptureIsolation,
        "vdrtStreamWaitEvent: a capturing stream cannot wait for an event recorded outside "
        "its capture (dependency created on uncaptured work in another stream)");
  }
  if (stream->capture == nullptr) {
    stream->capture = recorded_in;
    stream->capture_frontier = event.capture_frontier;
    recorded_in->streams.push_back(stream);
    return vdrtSuccess;
  }
  if (stream->capture != recorded_in) {
    invalidate(*recorded_in, "vdrtStreamWaitEvent: merged with another capture");
    return refuse(
        *stream->capture, vdrtErrorStreamCaptureMerge,
        "vdrtStreamWaitEvent: the stream's capture would merge with another capture");
  }
  auto& frontier = stream->capture_frontier;
  for (size_t node : event.capture_frontier) {
    if (std::find(frontier.begin(), frontier.end(), node) == frontier.end()) {
      frontier.push_back(node);
    }
  }
  return vdrtSuccess;
}

// Before an operation that waits for or observes `stream`'s work: refused if the
// stream is capturing, or if a capture forbids it (see forbid_uncaptured).
vdrtError_t check_observable(vdrtStream* stream, const char* function) {
  if (captures_under_way.load(std::memory_order_acquire) == 0) {
    return vdrtSuccess;
  }
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (stream->capture != nullptr) {
    return refuse(
        *stream->capture, vdrtErrorStreamCaptureUnsupported,
        std::string(function) + ": operation not permitted when stream is capturing");
  }
  return forbid_uncaptured(function, "waiting for or querying a stream that is not capturing");
}

// As check_observable, for every stream of `device`.
vdrtError_t check_device_observable(int device, const char* function) {
  if (captures_under_way.load(std::memory_order_acquire) == 0) {
    return vdrtSuccess;
  }
  std::lock_guard<std::mutex> lock(capture_mutex);
  for (const auto& capture : active_captures) {
    for (vdrtStream* stream : capture->streams) {
      if (stream->device == device) {
        return refuse(
            *capture, vdrtErrorStreamCaptureUnsupported,
            std::string(function) + ": operation not permitted when stream is capturing (a "
            "stream of device " + std::to_string(device) + " is capturing)");
      }
    }
  }
  return forbid_uncaptured(function, "waiting for a device");
}

// Before querying or waiting for an event from the host.
vdrtError_t check_event_observable(EventState& state, const char* function) {
  if (captures_under_way.load(std::memory_order_acquire) == 0) {
    return vdrtSuccess;
  }
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (state.capture != nullptr) {
    return refuse(
        *state.capture, vdrtErrorCapturedEvent,
        std::string(function) +
            ": operation not permitted on an event last recorded in a capturing stream");
  }
  return forbid_uncaptured(function, "waiting for or querying an event");
}

// Checks a copy's device sides; sets *device to the device whose default stream a
// synchronous copy waits for (-1: none).
vdrtError_t check_copy(
    const char* function, void* dst, const void* src, size_t count, vdrtMemcpyKind kind,
    int* device) {
  *device = -1;
  if (count == 0) {
    return vdrtSuccess;
  }
  if (dst == nullptr || src == nullptr) {
    return invalid(function, "null pointer");
  }
  int src_device = -1;
  int dst_device = -1;
  switch (kind) {
    case vdrtMemcpyHostToHost:
      return vdrtSuccess;
    case vdrtMemcpyHostToDevice:
      if (!runtime().in_device_memory(dst, count, &dst_device)) {
        return invalid(function, "the destination range is not inside device memory");
      }
      *device = dst_device;
      return vdrtSuccess;
    case vdrtMemcpyDeviceToHost:
      if (!runtime().in_device_memory(src, count, &src_device)) {
        return invalid(function, "the source range is not inside device memory");
      }
      *device = src_device;
      return vdrtSuccess;
    case vdrtMemcpyDeviceToDevice:
      if (!runtime().in_device_memory(src, count, &src_device) ||
          !runtime().in_device_memory(dst, count, &dst_device)) {
        return invalid(function, "the source or destination range is not inside device memory");
      }
      *device = dst_device;
      return vdrtSuccess;
  }
  return invalid(function, "unknown copy kind");
}

}  // namespace

extern "C" {

const char* vdrtGetErrorName(vdrtError_t error) {
  switch (error) {
    case vdrtSuccess: return "vdrtSuccess";
    case vdrtErrorInvalidValue: return "vdrtErrorInvalidValue";
    case vdrtErrorInvalidDevice: return "vdrtErrorInvalidDevice";
    case vdrtErrorMemoryAllocation: return "vdrtErrorMemoryAllocation";
    case vdrtErrorNotReady: return "vdrtErrorNotReady";
    case vdrtErrorInvalidConfiguration: return "vdrtErrorInvalidConfiguration";
    case vdrtErrorLaunchFailure: return "vdrtErrorLaunchFailure";
    case vdrtErrorInvalidResourceHandle: return "vdrtErrorInvalidResourceHandle";
    case vdrtErrorTimingDisabled: return "vdrtErrorTimingDisabled";
    case vdrtErrorWouldDeadlock: return "vdrtErrorWouldDeadlock";
    case vdrtErrorStreamCaptureUnsupported: return "vdrtErrorStreamCaptureUnsupported";
    case vdrtErrorStreamCaptureInvalidated: return "vdrtErrorStreamCaptureInvalidated";
    case vdrtErrorStreamCaptureMerge: return "vdrtErrorStreamCaptureMerge";
    case vdrtErrorStreamCaptureUnmatched: return "vdrtErrorStreamCaptureUnmatched";
    case vdrtErrorStreamCaptureUnjoined: return "vdrtErrorStreamCaptureUnjoined";
    case vdrtErrorStreamCaptureIsolation: return "vdrtErrorStreamCaptureIsolation";
    case vdrtErrorStreamCaptureImplicit: return "vdrtErrorStreamCaptureImplicit";
    case vdrtErrorStreamCaptureWrongThread: return "vdrtErrorStreamCaptureWrongThread";
    case vdrtErrorCapturedEvent: return "vdrtErrorCapturedEvent";
    case vdrtErrorIllegalState: return "vdrtErrorIllegalState";
  }
  return "vdrtErrorUnknown";
}

const char* vdrtGetErrorString(vdrtError_t error) {
  switch (error) {
    case vdrtSuccess: return "no error";
    case vdrtErrorInvalidValue: return "invalid argument";
    case vdrtErrorInvalidDevice: return "invalid device ordinal";
    case vdrtErrorMemoryAllocation: return "out of memory";
    case vdrtErrorNotReady: return "device not ready";
    case vdrtErrorInvalidConfiguration: return "invalid configuration in the environment";
    case vdrtErrorLaunchFailure: return "a launched function failed";
    case vdrtErrorInvalidResourceHandle: return "invalid resource handle";
    case vdrtErrorTimingDisabled: return "event created without timing";
    case vdrtErrorWouldDeadlock: return "operation would deadlock";
    case vdrtErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case vdrtErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case vdrtErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case vdrtErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case vdrtErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case vdrtErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case vdrtErrorStreamCaptureImplicit: return "operation not permitted on a stream that is not capturing while a capture is under way";
    case vdrtErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case vdrtErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case vdrtErrorIllegalState: return "the stream is already capturing";
  }
  return "unknown error";
}

vdrtError_t vdrtGetLastError(void) {
  vdrtError_t error = tls_last_error;
  tls_last_error = vdrtSuccess;
  return error;
}

vdrtError_t vdrtPeekAtLastError(void) {
  return tls_last_error;
}

const char* vdrtGetLastErrorMessage(void) {
  return tls_last_message.c_str();
}

vdrtError_t vdrtGetDeviceCount(int* count) {
  if (count == nullptr) {
    return invalid("vdrtGetDeviceCount", "null pointer");
  }
  const Config& config = runtime().config;
  *count = config.device_count;
  if (!config.device_count_problem.empty()) {
    return fail(vdrtErrorInvalidConfiguration, config.device_count_problem);
  }
  return vdrtSuccess;
}

vdrtError_t vdrtGetDeviceProperties(vdrtDeviceProp* prop, int device) {
  if (prop == nullptr) {
    return invalid("vdrtGetDeviceProperties", "null pointer");
  }
  Runtime& rt = runtime();
  if (vdrtError_t error = rt.check_device(device, "vdrtGetDeviceProperties")) {
    return error;
  }
  if (vdrtError_t error = rt.check_capacity_config()) {
    return error;
  }
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "vdev virtual device %d", device);
  prop->totalGlobalMem = rt.config.capacity;
  prop->memoryAlignment = kDeviceAlignment;
  prop->multiProcessorCount = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  prop->major = kVersionMajor;
  prop->minor = kVersionMinor;
  prop->streamPriorityLeast = kLeastPriority;
  prop->streamPriorityGreatest = kGreatestPriority;
  return vdrtSuccess;
}

vdrtError_t vdrtDeviceSynchronize(int device) {
  if (vdrtError_t error = runtime().check_device(device, "vdrtDeviceSynchronize")) {
    return error;
  }
  if (vdrtError_t error = check_device_observable(device, "vdrtDeviceSynchronize")) {
    return error;
  }
  return runtime().synchronize_device(device, /*take_failures=*/true);
}

vdrtError_t vdrtMalloc(int device, void** ptr, size_t size) {
  Runtime& rt = runtime();
  if (ptr == nullptr) {
    return invalid("vdrtMalloc", "null pointer");
  }
  if (vdrtError_t error = rt.check_device(device, "vdrtMalloc")) {
    return error;
  }
  if (vdrtError_t error = rt.check_capacity_config()) {
    return error;
  }
  if (size == 0) {
    *ptr = nullptr;
    return vdrtSuccess;
  }
  return rt.allocate_device(device, ptr, size);
}

vdrtError_t vdrtFree(void* ptr) {
  return ptr == nullptr ? vdrtSuccess : runtime().free_device(ptr);
}

vdrtError_t vdrtMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  Runtime& rt = runtime();
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return invalid("vdrtMemGetInfo", "null pointer");
  }
  if (vdrtError_t error = rt.check_device(device, "vdrtMemGetInfo")) {
    return error;
  }
  if (vdrtError_t error = rt.check_capacity_config()) {
    return error;
  }
  const size_t used = rt.used(device);
  *total_bytes = rt.config.capacity;
  *free_bytes = rt.config.capacity > used ? rt.config.capacity - used : 0;
  return vdrtSuccess;
}

vdrtError_t vdrtMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr) {
    return invalid("vdrtMallocHost", "null pointer");
  }
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = std::max<size_t>(1, (size + page - 1) / page) * page;
  void* memory = std::aligned_alloc(page, rounded);
  if (memory == nullptr) {
    return fail(
        vdrtErrorMemoryAllocation,
        "failed to allocate " + std::to_string(size) + " bytes of pinned host memory");
  }
  runtime().remember(memory, Allocation{rounded, -1});
  *ptr = memory;
  return vdrtSuccess;
}

vdrtError_t vdrtFreeHost(void* ptr) {
  if (ptr == nullptr) {
    return vdrtSuccess;
  }
  Allocation allocation{};
  if (!runtime().lookup_base(ptr, &allocation) || allocation.device >= 0) {
    return invalid("vdrtFreeHost", "the pointer was not returned by vdrtMallocHost");
  }
  runtime().forget(ptr);
  std::free(ptr);
  return vdrtSuccess;
}

vdrtError_t vdrtPointerGetAttributes(vdrtPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) {
    return invalid("vdrtPointerGetAttributes", "null pointer");
  }
  const char* base = nullptr;
  Allocation allocation{};
  if (ptr == nullptr || !runtime().lookup(ptr, &base, &allocation)) {
    *attributes = vdrtPointerAttributes{vdrtMemoryTypeUnregistered, -1, nullptr, 0};
  } else {
    *attributes = vdrtPointerAttributes{
        allocation.device < 0 ? vdrtMemoryTypeHost : vdrtMemoryTypeDevice, allocation.device,
        const_cast<char*>(base), allocation.size};
  }
  return vdrtSuccess;
}

vdrtError_t vdrtDeviceGetDefaultStream(int device, vdrtStream_t* stream) {
  if (stream == nullptr) {
    return invalid("vdrtDeviceGetDefaultStream", "null pointer");
  }
  if (vdrtError_t error = runtime().check_device(device, "vdrtDeviceGetDefaultStream")) {
    return error;
  }
  *stream = runtime().default_stream(device);
  return vdrtSuccess;
}

vdrtError_t vdrtStreamCreate(int device, vdrtStream_t* stream, int priority) {
  if (stream == nullptr) {
    return invalid("vdrtStreamCreate", "null pointer");
  }
  if (vdrtError_t error = runtime().check_device(device, "vdrtStreamCreate")) {
    return error;
  }
  *stream = runtime().add_stream(device, std::clamp(priority, kGreatestPriority, kLeastPriority));
  return vdrtSuccess;
}

vdrtError_t vdrtStreamDestroy(vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamDestroy");
  if (vdrtError_t error = check_observable(stream, "vdrtStreamDestroy")) {
    return error;
  }
  return runtime().destroy_stream(stream);
}

vdrtError_t vdrtStreamGetPriority(vdrtStream_t stream, int* priority) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamGetPriority");
  if (priority == nullptr) {
    return invalid("vdrtStreamGetPriority", "null pointer");
  }
  *priority = stream->priority;
  return vdrtSuccess;
}

vdrtError_t vdrtStreamGetDevice(vdrtStream_t stream, int* device) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamGetDevice");
  if (device == nullptr) {
    return invalid("vdrtStreamGetDevice", "null pointer");
  }
  *device = stream->device;
  return vdrtSuccess;
}

vdrtError_t vdrtStreamQuery(vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamQuery");
  if (vdrtError_t error = check_observable(stream, "vdrtStreamQuery")) {
    return error;
  }
  return stream->idle() ? vdrtSuccess : vdrtErrorNotReady;
}

vdrtError_t vdrtStreamSynchronize(vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamSynchronize");
  if (vdrtError_t error = check_observable(stream, "vdrtStreamSynchronize")) {
    return error;
  }
  return stream->synchronize();
}

vdrtError_t vdrtStreamWaitQueued(vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamWaitQueued");
  if (vdrtError_t error = check_observable(stream, "vdrtStreamWaitQueued")) {
    return error;
  }
  if (tls_running_stream == stream) {
    return fail(vdrtErrorWouldDeadlock, "a stream's own work cannot wait for that stream to complete");
  }
  stream->wait_idle();
  return vdrtSuccess;
}

vdrtError_t vdrtStreamGetQueuedCount(vdrtStream_t stream, unsigned long long* count) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamGetQueuedCount");
  if (count == nullptr) {
    return invalid("vdrtStreamGetQueuedCount", "null pointer");
  }
  *count = stream->submitted.load(std::memory_order_acquire);
  return vdrtSuccess;
}

vdrtError_t vdrtLaunchHostFunc(vdrtStream_t stream, vdrtHostFn fn, void* user_data) {
  VDRT_CHECK_STREAM(stream, "vdrtLaunchHostFunc");
  if (fn == nullptr) {
    return invalid("vdrtLaunchHostFunc", "null function");
  }
  return stream->submit(Work{fn, user_data}, "vdrtLaunchHostFunc");
}

vdrtError_t vdrtLaunchHostFuncOwned(
    vdrtStream_t stream, vdrtHostFn fn, void* user_data, vdrtHostFn destroy, const char* name) {
  const Work work{fn, user_data, destroy, name};
  if (stream == nullptr || stream->magic != vdrtStream::kMagic || fn == nullptr) {
    drop(work);
    VDRT_CHECK_STREAM(stream, "vdrtLaunchHostFuncOwned");
    return invalid("vdrtLaunchHostFuncOwned", "null function");
  }
  return stream->submit(work, "vdrtLaunchHostFuncOwned");
}

vdrtError_t vdrtReportLaunchFailure(const char* message) {
  if (tls_running_stream == nullptr) {
    return invalid("vdrtReportLaunchFailure", "called outside a launched host function");
  }
  if (!tls_work_failed) {
    tls_work_failed = true;
    tls_work_failure = message == nullptr ? "" : message;
  }
  return vdrtSuccess;
}

vdrtError_t vdrtHostFuncRunsAgain(int* runs_again) {
  if (tls_running_stream == nullptr) {
    return invalid("vdrtHostFuncRunsAgain", "called outside a launched host function");
  }
  if (runs_again == nullptr) {
    return invalid("vdrtHostFuncRunsAgain", "null pointer");
  }
  *runs_again = tls_running_graph ? 1 : 0;
  return vdrtSuccess;
}

vdrtError_t vdrtHostFuncOnWorker(int* on_worker) {
  if (tls_running_stream == nullptr) {
    return invalid("vdrtHostFuncOnWorker", "called outside a launched host function");
  }
  if (on_worker == nullptr) {
    return invalid("vdrtHostFuncOnWorker", "null pointer");
  }
  *on_worker = tls_is_worker ? 1 : 0;
  return vdrtSuccess;
}

vdrtError_t vdrtMemcpy(void* dst, const void* src, size_t count, vdrtMemcpyKind kind) {
  int device = -1;
  if (vdrtError_t error = check_copy("vdrtMemcpy", dst, src, count, kind, &device)) {
    return error;
  }
  if (device >= 0) {
    vdrtStream* stream = runtime().default_stream(device);
    if (vdrtError_t error = check_device_observable(device, "vdrtMemcpy")) {
      return error;
    }
    if (vdrtError_t error = stream->synchronize()) {
      return error;
    }
  }
  if (count != 0) {
    std::memmove(dst, src, count);
  }
  return vdrtSuccess;
}

vdrtError_t vdrtMemcpyAsync(
    void* dst, const void* src, size_t count, vdrtMemcpyKind kind, vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtMemcpyAsync");
  int device = -1;
  if (vdrtError_t error = check_copy("vdrtMemcpyAsync", dst, src, count, kind, &device)) {
    return error;
  }
  if (count == 0) {
    return vdrtSuccess;
  }
  return stream->submit(owned_work(new CopyWork{dst, src, count}, "memcpy"), "vdrtMemcpyAsync");
}

vdrtError_t vdrtMemset(void* ptr, int value, size_t count) {
  int device = -1;
  if (count != 0 && !runtime().in_device_memory(ptr, count, &device)) {
    return invalid("vdrtMemset", "the range is not inside device memory");
  }
  if (device >= 0) {
    if (vdrtError_t error = check_device_observable(device, "vdrtMemset")) {
      return error;
    }
    if (vdrtError_t error = runtime().default_stream(device)->synchronize()) {
      return error;
    }
    std::memset(ptr, value, count);
  }
  return vdrtSuccess;
}

vdrtError_t vdrtMemsetAsync(void* ptr, int value, size_t count, vdrtStream_t stream) {
  VDRT_CHECK_STREAM(stream, "vdrtMemsetAsync");
  int device = -1;
  if (count == 0) {
    return vdrtSuccess;
  }
  if (!runtime().in_device_memory(ptr, count, &device)) {
    return invalid("vdrtMemsetAsync", "the range is not inside device memory");
  }
  return stream->submit(owned_work(new SetWork{ptr, value, count}, "memset"), "vdrtMemsetAsync");
}

vdrtError_t vdrtEventCreate(vdrtEvent_t* event, unsigned flags) {
  if (event == nullptr) {
    return invalid("vdrtEventCreate", "null pointer");
  }
  if ((flags & ~static_cast<unsigned>(vdrtEventDisableTiming)) != 0) {
    return invalid("vdrtEventCreate", "unknown flags");
  }
  *event = new vdrtEvent{std::make_shared<EventState>((flags & vdrtEventDisableTiming) == 0)};
  return vdrtSuccess;
}

vdrtError_t vdrtEventDestroy(vdrtEvent_t event) {
  if (event == nullptr) {
    return invalid("vdrtEventDestroy", "null event");
  }
  delete event;
  return vdrtSuccess;
}

vdrtError_t vdrtEventRecord(vdrtEvent_t event, vdrtStream_t stream) {
  if (event == nullptr) {
    return invalid("vdrtEventRecord", "null event");
  }
  VDRT_CHECK_STREAM(stream, "vdrtEventRecord");
  if (captures_under_way.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(capture_mutex);
    event->state->capture = stream->capture;
    if (stream->capture != nullptr) {
      // A point of the capture, for streams that wait for it to join (fork) or to
      // depend on the work before it (join).
      if (stream->capture->invalidated) {
        return fail(
            vdrtErrorStreamCaptureInvalidated,
            "vdrtEventRecord: capture " + std::to_string(stream->capture->id) +
                " was invalidated by an earlier error: " + stream->capture->failure);
      }
      event->state->capture_frontier = stream->capture_frontier;
      stream->capture->events.push_back(event->state);
      return vdrtSuccess;
    }
  }
  uint64_t record = 0;
  {
    std::lock_guard<std::mutex> lock(event->state->mutex);
    record = event->state->add_record();
    event->state->stream = stream->weak_from_this();
  }
  return stream->submit(
      owned_work(new RecordWork{event->state, record}, "event record"), "vdrtEventRecord",
      /*launch=*/false);
}

vdrtError_t vdrtEventQuery(vdrtEvent_t event) {
  if (event == nullptr) {
    return invalid("vdrtEventQuery", "null event");
  }
  if (vdrtError_t error = check_event_observable(*event->state, "vdrtEventQuery")) {
    return error;
  }
  std::lock_guard<std::mutex> lock(event->state->mutex);
  return event->state->done(event->state->recorded) ? vdrtSuccess : vdrtErrorNotReady;
}

vdrtError_t vdrtEventSynchronize(vdrtEvent_t event) {
  if (event == nullptr) {
    return invalid("vdrtEventSynchronize", "null event");
  }
  if (vdrtError_t error = check_event_observable(*event->state, "vdrtEventSynchronize")) {
    return error;
  }
  EventState& state = *event->state;
  uint64_t record = 0;
  std::shared_ptr<vdrtStream> stream;  // null if destroyed since
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    record = state.recorded;
    stream = state.stream.lock();
  }
  if (record == 0) {
    return vdrtSuccess;
  }
  if (stream != nullptr && stream.get() == tls_running_stream) {
    return fail(
        vdrtErrorWouldDeadlock, "a stream's own work cannot wait for an event of that stream");
  }
  state.wait_for(record);
  return stream != nullptr ? stream->take_failure() : vdrtSuccess;
}

vdrtError_t vdrtEventElapsedTime(float* milliseconds, vdrtEvent_t start, vdrtEvent_t end) {
  if (milliseconds == nullptr || start == nullptr || end == nullptr) {
    return invalid("vdrtEventElapsedTime", "null pointer");
  }
  // Locked one at a time: the two may be the same event.
  auto snapshot = [](EventState& state, Clock::time_point* time) {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!state.timing) {
      return vdrtErrorTimingDisabled;
    }
    if (state.recorded == 0) {
      return vdrtErrorInvalidResourceHandle;
    }
    if (!state.done(state.recorded)) {
      return vdrtErrorNotReady;
    }
    *time = state.time;
    return vdrtSuccess;
  };
  Clock::time_point first;
  Clock::time_point second;
  for (auto [state, time] : {std::pair{start->state.get(), &first}, std::pair{end->state.get(), &second}}) {
    vdrtError_t error = snapshot(*state, time);
    if (error == vdrtErrorTimingDisabled) {
      return fail(error, "vdrtEventElapsedTime: both events must be created with timing enabled");
    }
    if (error == vdrtErrorInvalidResourceHandle) {
      return fail(error, "vdrtEventElapsedTime: both events must be recorded");
    }
    if (error != vdrtSuccess) {
      return error;
    }
  }
  *milliseconds = std::chrono::duration<float, std::milli>(second - first).count();
  return vdrtSuccess;
}

vdrtError_t vdrtStreamWaitEvent(vdrtStream_t stream, vdrtEvent_t event) {
  if (event == nullptr) {
    return invalid("vdrtStreamWaitEvent", "null event");
  }
  VDRT_CHECK_STREAM(stream, "vdrtStreamWaitEvent");
  if (captures_under_way.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (vdrtError_t error = wait_in_capture(stream, *event->state)) {
      return error;
    }
    if (stream->capture != nullptr || event->state->capture != nullptr) {
      return vdrtSuccess;  // a dependency inside the capture
    }
  }
  uint64_t record = 0;
  {
    std::lock_guard<std::mutex> lock(event->state->mutex);
    record = event->state->recorded;
  }
  if (record == 0) {
    return vdrtSuccess;
  }
  return stream->submit(
      owned_work(new WaitWork{event->state, record}, "event wait"), "vdrtStreamWaitEvent",
      /*launch=*/false);
}

struct vdrtGraph {
  std::shared_ptr<const GraphBody> body;
};

struct vdrtGraphExec {
  explicit vdrtGraphExec(std::shared_ptr<const GraphBody> body) : body(std::move(body)) {}

  const std::shared_ptr<const GraphBody> body;
  // Its queued launches, numbered in launch order (see GraphRun); `launching` keeps a
  // number and its submission together, so numbers are queued in order and a refused
  // submission is abandoned before the next launch waits for it.
  const std::shared_ptr<EventState> launches = std::make_shared<EventState>(/*timing=*/false);
  std::mutex launching;
};

vdrtError_t vdrtStreamBeginCapture(vdrtStream_t stream, vdrtStreamCaptureMode mode) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamBeginCapture");
  if (mode != vdrtStreamCaptureModeGlobal && mode != vdrtStreamCaptureModeThreadLocal &&
      mode != vdrtStreamCaptureModeRelaxed) {
    return invalid("vdrtStreamBeginCapture", "unknown capture mode");
  }
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (stream->capture != nullptr) {
    return fail(
        vdrtErrorIllegalState,
        "vdrtStreamBeginCapture: the stream is already capturing (capture " +
            std::to_string(stream->capture->id) + ")");
  }
  auto capture = std::make_shared<Capture>(++last_capture_id, mode, stream);
  capture->streams.push_back(stream);
  stream->capture = capture;
  stream->capture_frontier.clear();
  active_captures.push_back(std::move(capture));
  captures_under_way.fetch_add(1, std::memory_order_release);
  return vdrtSuccess;
}

vdrtError_t vdrtStreamEndCapture(vdrtStream_t stream, vdrtGraph_t* graph) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamEndCapture");
  if (graph == nullptr) {
    return invalid("vdrtStreamEndCapture", "null pointer");
  }
  *graph = nullptr;
  std::shared_ptr<Capture> capture;
  std::vector<Node> nodes;  // destroyed after the lock is released
  std::string unjoined;
  {
    std::lock_guard<std::mutex> lock(capture_mutex);
    capture = stream->capture;
    if (capture == nullptr || capture->origin != stream) {
      return fail(
          vdrtErrorStreamCaptureUnmatched,
          capture == nullptr ? "vdrtStreamEndCapture: the stream is not capturing"
                             : "vdrtStreamEndCapture: the capture was not begun on this stream "
                               "(end it on the stream that began it)");
    }
    if (capture->mode != vdrtStreamCaptureModeRelaxed &&
        capture->thread != std::this_thread::get_id()) {
      return fail(
          vdrtErrorStreamCaptureWrongThread,
          std::string("vdrtStreamEndCapture: a capture in ") + mode_name(capture->mode) +
              " mode must be ended by the thread that began it");
    }
    // Every node a joined stream stands at must be an ancestor of the origin's frontier.
    std::vector<bool> joined(capture->nodes.size(), false);
    std::vector<size_t> pending = stream->capture_frontier;
    while (!pending.empty()) {
      const size_t node = pending.back();
      pending.pop_back();
      if (!joined[node]) {
        joined[node] = true;
        const auto& dependencies = capture->nodes[node].dependencies;
        pending.insert(pending.end(), dependencies.begin(), dependencies.end());
      }
    }
    for (vdrtStream* member : capture->streams) {
      for (size_t node : member->capture_frontier) {
        if (!joined[node] && unjoined.empty()) {
          unjoined = "vdrtStreamEndCapture: work captured on a forked stream (" +
              std::string(capture->nodes[node].name != nullptr ? capture->nodes[node].name
                                                               : "host function") +
              ") was not joined back to the capturing stream (make it wait for an event "
              "recorded on the forked stream)";
        }
      }
      member->capture.reset();
      member->capture_frontier.clear();
    }
    for (const auto& weak_event : capture->events) {
      if (auto event = weak_event.lock(); event != nullptr && event->capture == capture) {
        event->capture.reset();
        event->capture_frontier.clear();
      }
    }
    active_captures.erase(std::find(active_captures.begin(), active_captures.end(), capture));
    captures_under_way.fetch_sub(1, std::memory_order_release);
    nodes = std::move(capture->nodes);
  }
  if (capture->invalidated) {
    return fail(
        vdrtErrorStreamCaptureInvalidated,
        "vdrtStreamEndCapture: capture " + std::to_string(capture->id) +
            " was invalidated by an earlier error: " + capture->failure);
  }
  if (!unjoined.empty()) {
    return fail(vdrtErrorStreamCaptureUnjoined, unjoined);
  }
  *graph = new vdrtGraph{std::make_shared<const GraphBody>(GraphBody{std::move(nodes)})};
  return vdrtSuccess;
}

vdrtError_t vdrtStreamGetCaptureInfo(
    vdrtStream_t stream, vdrtStreamCaptureStatus* status, unsigned long long* id) {
  VDRT_CHECK_STREAM(stream, "vdrtStreamGetCaptureInfo");
  if (status == nullptr) {
    return invalid("vdrtStreamGetCaptureInfo", "null pointer");
  }
  *status = vdrtStreamCaptureStatusNone;
  if (id != nullptr) {
    *id = 0;
  }
  if (captures_under_way.load(std::memory_order_acquire) == 0) {
    return vdrtSuccess;
  }
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (stream->capture != nullptr) {
    *status = stream->capture->invalidated ? vdrtStreamCaptureStatusInvalidated
                                           : vdrtStreamCaptureStatusActive;
    if (id != nullptr) {
      *id = stream->capture->id;
    }
  }
  return vdrtSuccess;
}

vdrtError_t vdrtGraphGetNodeCount(vdrtGraph_t graph, size_t* count) {
  if (graph == nullptr || count == nullptr) {
    return invalid("vdrtGraphGetNodeCount", "null pointer");
  }
  *count = graph->body->nodes.size();
  return vdrtSuccess;
}

vdrtError_t vdrtGraphDebugDotPrint(vdrtGraph_t graph, const char* path) {
  if (graph == nullptr || path == nullptr) {
    return invalid("vdrtGraphDebugDotPrint", "null pointer");
  }
  std::ofstream out(path);
  if (!out) {
    return invalid("vdrtGraphDebugDotPrint", (std::string("cannot write ") + path).c_str());
  }
  out << "digraph vdev_graph {\n";
  const auto& nodes = graph->body->nodes;
  for (size_t index = 0; index < nodes.size(); ++index) {
    out << "  n" << index << " [label=\"" << index << ": "
        << (nodes[index].name != nullptr ? nodes[index].name : "host function") << "\"];\n";
    for (size_t dependency : nodes[index].dependencies) {
      out << "  n" << dependency << " -> n" << index << ";\n";
    }
  }
  out << "}\n";
  return out ? vdrtSuccess : invalid("vdrtGraphDebugDotPrint", "write failed");
}

vdrtError_t vdrtGraphDestroy(vdrtGraph_t graph) {
  if (graph == nullptr) {
    return invalid("vdrtGraphDestroy", "null graph");
  }
  delete graph;
  return vdrtSuccess;
}

vdrtError_t vdrtGraphInstantiate(vdrtGraphExec_t* exec, vdrtGraph_t graph) {
  if (exec == nullptr || graph == nullptr) {
    return invalid("vdrtGraphInstantiate", "null pointer");
  }
  *exec = new vdrtGraphExec(graph->body);
  return vdrtSuccess;
}

vdrtError_t vdrtGraphLaunch(vdrtGraphExec_t exec, vdrtStream_t stream) {
  if (exec == nullptr) {
    return invalid("vdrtGraphLaunch", "null executable graph");
  }
  VDRT_CHECK_STREAM(stream, "vdrtGraphLaunch");
  std::lock_guard<std::mutex> launching(exec->launching);
  bool recorded = false;
  if (captures_under_way.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(capture_mutex);
    recorded = stream->capture != nullptr;
  }
  if (recorded) {
    return stream->submit(owned_work(new GraphRun{exec->body, nullptr, 0}, "graph"), "vdrtGraphLaunch");
  }
  EventState& launches = *exec->launches;
  uint64_t launch = 0;
  {
    std::lock_guard<std::mutex> lock(launches.mutex);
    launch = launches.add_record();
  }
  const vdrtError_t error =
      stream->submit(owned_work(new GraphRun{exec->body, exec->launches, launch}, "graph"), "vdrtGraphLaunch");
  if (error != vdrtSuccess) {
    std::lock_guard<std::mutex> lock(launches.mutex);
    launches.abandon(launch);
  }
  return error;
}

vdrtError_t vdrtGraphExecDestroy(vdrtGraphExec_t exec) {
  if (exec == nullptr) {
    return invalid("vdrtGraphExecDestroy", "null executable graph");
  }
  delete exec;
  return vdrtSuccess;
}

vdrtError_t vdrtSetLaunchBlocking(int blocking) {
  launch_blocking = blocking != 0;
  return vdrtSuccess;
}

vdrtError_t vdrtSetHostWaitHook(vdrtHostWaitHook hook) {
  host_wait_hook.store(hook, std::memory_order_release);
  return vdrtSuccess;
}

int vdrtGetLaunchBlocking(void) {
  return launch_blocking ? 1 : 0;
}

}  // extern "C"
