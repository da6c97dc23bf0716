// Tests of the vdev runtime's C API. `runtime_tests --list` prints the test names;
// `runtime_tests NAME` runs one and exits 0 if it passed (tests/test_runtime_library.py
// runs each in its own process, some with VDEV_* settings in the environment).

#include "vdev_runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define CHECK(condition)                                                                  \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      throw Failure(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #condition); \
    }                                                                                     \
  } while (0)

#define CHECK_OK(call)                                                                    \
  do {                                                                                    \
    vdrtError_t check_ok_error = (call);                                                  \
    if (check_ok_error != vdrtSuccess) {                                                  \
      throw Failure(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #call " -> " + \
                    vdrtGetErrorName(check_ok_error) + ": " + vdrtGetLastErrorMessage());  \
    }                                                                                     \
  } while (0)

std::map<std::string, std::function<void()>>& registry() {
  static std::map<std::string, std::function<void()>> tests;
  return tests;
}

struct Register {
  Register(const char* name, std::function<void()> test) {
    registry().emplace(name, std::move(test));
  }
};

#define TEST(name)                                  \
  void name();                                      \
  Register register_##name(#name, &name);           \
  void name()

// A host function that blocks its stream until the test opens the gate: makes "work is
// still queued" states deterministic.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> reached{false};

  static void wait(void* data) {
    auto* gate = static_cast<Gate*>(data);
    gate->reached = true;
    while (!gate->open) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void wait_reached() {
    while (!reached) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
};

// Launches a C++ callable as a host function.
void launch(vdrtStream_t stream, std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  CHECK_OK(vdrtLaunchHostFunc(
      stream,
      [](void* data) {
        std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()>*>(data));
        (*owned)();
      },
      heap));
}

vdrtStream_t new_stream(int device = 0, int priority = 0) {
  vdrtStream_t stream = nullptr;
  CHECK_OK(vdrtStreamCreate(device, &stream, priority));
  return stream;
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::atoi(text);
}

// ---- errors ----

TEST(error_names_and_last_error) {
  CHECK(std::strcmp(vdrtGetErrorName(vdrtErrorNotReady), "vdrtErrorNotReady") == 0);
  CHECK(std::strcmp(vdrtGetErrorString(vdrtErrorMemoryAllocation), "out of memory") == 0);
  CHECK(std::strcmp(vdrtGetErrorName(static_cast<vdrtError_t>(999)), "vdrtErrorUnknown") == 0);
  CHECK(vdrtGetLastError() == vdrtSuccess);
  void* ptr = nullptr;
  CHECK(vdrtMalloc(1000, &ptr, 8) == vdrtErrorInvalidDevice);
  CHECK(std::strstr(vdrtGetLastErrorMessage(), "device 1000 does not exist") != nullptr);
  CHECK(vdrtPeekAtLastError() == vdrtErrorInvalidDevice);
  CHECK(vdrtGetLastError() == vdrtErrorInvalidDevice);
  CHECK(vdrtGetLastError() == vdrtSuccess);
  CHECK(vdrtMalloc(0, nullptr, 8) == vdrtErrorInvalidValue);
  CHECK(vdrtLaunchHostFunc(nullptr, [](void*) {}, nullptr) == vdrtErrorInvalidValue);
  CHECK(vdrtReportLaunchFailure("not in a host function") == vdrtErrorInvalidValue);
}

// ---- devices ----

TEST(device_count_and_properties) {
  int count = -1;
  CHECK_OK(vdrtGetDeviceCount(&count));
  CHECK(count == env_int("VDEV_DEVICE_COUNT", 2));
  for (int device = 0; device < count; ++device) {
    vdrtDeviceProp prop;
    CHECK_OK(vdrtGetDeviceProperties(&prop, device));
    CHECK(std::strstr(prop.name, "vdev") != nullptr);
    CHECK(prop.totalGlobalMem > 0);
    CHECK(prop.memoryAlignment == 64);
    CHECK(prop.multiProcessorCount >= 1);
    CHECK(prop.streamPriorityLeast == 0 && prop.streamPriorityGreatest == -3);
  }
  vdrtDeviceProp prop;
  CHECK(vdrtGetDeviceProperties(&prop, count) == vdrtErrorInvalidDevice);
  CHECK(vdrtGetDeviceProperties(&prop, -1) == vdrtErrorInvalidDevice);
}

TEST(malformed_device_count_gives_default_and_reports) {
  int count = -1;
  CHECK(vdrtGetDeviceCount(&count) == vdrtErrorInvalidConfiguration);
  CHECK(count == 2);
  CHECK(std::strstr(vdrtGetLastErrorMessage(), "VDEV_DEVICE_COUNT='many'") != nullptr);
}

TEST(memory_limit_is_the_capacity) {
  const size_t limit = static_cast<size_t>(std::atoll(std::getenv("VDEV_MEMORY_LIMIT")));
  vdrtDeviceProp prop;
  CHECK_OK(vdrtGetDeviceProperties(&prop, 0));
  CHECK(prop.totalGlobalMem == limit);
  size_t free_bytes = 0;
  size_t total = 0;
  CHECK_OK(vdrtMemGetInfo(0, &free_bytes, &total));
  CHECK(total == limit && free_bytes == limit);
  void* first = nullptr;
  CHECK_OK(vdrtMalloc(0, &first, limit / 2));
  CHECK_OK(vdrtMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == limit - limit / 2);
  void* second = nullptr;
  CHECK(vdrtMalloc(0, &second, limit / 2 + 64) == vdrtErrorMemoryAllocation);
  CHECK(std::strstr(vdrtGetLastErrorMessage(), "out of memory") != nullptr);
  // Each device has its own capacity.
  CHECK_OK(vdrtMalloc(1, &second, limit / 2 + 64));
  CHECK_OK(vdrtFree(second));
  CHECK_OK(vdrtFree(first));
  CHECK_OK(vdrtMalloc(0, &first, limit));
  CHECK_OK(vdrtFree(first));
}

TEST(malformed_memory_limit_is_reported) {
  void* ptr = nullptr;
  CHECK(vdrtMalloc(0, &ptr, 64) == vdrtErrorInvalidConfiguration);
  CHECK(std::strstr(vdrtGetLastErrorMessage(), "VDEV_MEMORY_LIMIT='12k'") != nullptr);
  size_t free_bytes = 0;
  size_t total = 0;
  CHECK(vdrtMemGetInfo(0, &free_bytes, &total) == vdrtErrorInvalidConfiguration);
}

// ---- memory ----

TEST(malloc_free_alignment_and_attributes) {
  size_t free_before = 0;
  size_t total = 0;
  CHECK_OK(vdrtMemGetInfo(0, &free_before, &total));
  void* ptr = nullptr;
  CHECK_OK(vdrtMalloc(0, &ptr, 1000));
  CHECK(ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 64 == 0);
  size_t free_after = 0;
  CHECK_OK(vdrtMemGetInfo(0, &free_after, &total));
  CHECK(free_before - free_after == 1024);  // rounded to the alignment
  vdrtPointerAttributes attributes;
  CHECK_OK(vdrtPointerGetAttributes(&attributes, static_cast<char*>(ptr) + 999));
  CHECK(attributes.type == vdrtMemoryTypeDevice && attributes.device == 0);
  CHECK(attributes.base == ptr && attributes.size == 1024);
  int on_stack = 0;
  CHECK_OK(vdrtPointerGetAttributes(&attributes, &on_stack));
  CHECK(attributes.type == vdrtMemoryTypeUnregistered && attributes.device == -1);
  CHECK(vdrtFree(static_cast<char*>(ptr) + 64) == vdrtErrorInvalidValue);  // not a base
  CHECK(vdrtFree(&on_stack) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtFree(ptr));
  CHECK_OK(vdrtMemGetInfo(0, &free_after, &total));
  CHECK(free_after == free_before);
  CHECK_OK(vdrtMalloc(0, &ptr, 0));
  CHECK(ptr == nullptr);
  CHECK_OK(vdrtFree(nullptr));
}

TEST(pinned_host_memory) {
  void* pinned = nullptr;
  CHECK_OK(vdrtMallocHost(&pinned, 10));
  const long page = sysconf(_SC_PAGESIZE);
  CHECK(reinterpret_cast<uintptr_t>(pinned) % static_cast<uintptr_t>(page) == 0);
  vdrtPointerAttributes attributes;
  CHECK_OK(vdrtPointerGetAttributes(&attributes, static_cast<char*>(pinned) + 5));
  CHECK(attributes.type == vdrtMemoryTypeHost && attributes.base == pinned);
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 64));
  CHECK(vdrtFreeHost(device) == vdrtErrorInvalidValue);
  CHECK(vdrtFree(pinned) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtFree(device));
  CHECK_OK(vdrtFreeHost(pinned));
  CHECK_OK(vdrtPointerGetAttributes(&attributes, pinned));
  CHECK(attributes.type == vdrtMemoryTypeUnregistered);
}

TEST(synchronous_copies_and_memset) {
  std::vector<int> host(256);
  for (int i = 0; i < 256; ++i) {
    host[static_cast<size_t>(i)] = i;
  }
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(vdrtMalloc(0, &a, 1024));
  CHECK_OK(vdrtMalloc(1, &b, 1024));
  CHECK_OK(vdrtMemcpy(a, host.data(), 1024, vdrtMemcpyHostToDevice));
  CHECK_OK(vdrtMemcpy(b, a, 1024, vdrtMemcpyDeviceToDevice));
  std::vector<int> back(256, -1);
  CHECK_OK(vdrtMemcpy(back.data(), b, 1024, vdrtMemcpyDeviceToHost));
  CHECK(back == host);
  CHECK_OK(vdrtMemset(static_cast<char*>(a) + 4, 0, 8));
  CHECK_OK(vdrtMemcpy(back.data(), a, 16, vdrtMemcpyDeviceToHost));
  CHECK(back[0] == 0 && back[1] == 0 && back[2] == 0 && back[3] == 3);
  // Device sides must lie inside device memory, and inside one allocation.
  CHECK(vdrtMemcpy(host.data(), back.data(), 8, vdrtMemcpyHostToDevice) == vdrtErrorInvalidValue);
  CHECK(vdrtMemcpy(back.data(), a, 1025, vdrtMemcpyDeviceToHost) == vdrtErrorInvalidValue);
  CHECK(vdrtMemset(host.data(), 0, 4) == vdrtErrorInvalidValue);
  CHECK(vdrtMemcpy(back.data(), a, 8, static_cast<vdrtMemcpyKind>(7)) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtMemcpy(back.data(), host.data(), 8, vdrtMemcpyHostToHost));
  CHECK_OK(vdrtFree(a));
  CHECK_OK(vdrtFree(b));
}

TEST(async_copies_are_queued_in_stream_order) {
  vdrtStream_t stream = new_stream();
  void* device = nullptr;
  void* pinned = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 4096));
  CHECK_OK(vdrtMallocHost(&pinned, 4096));
  std::memset(pinned, 7, 4096);
  Gate gate;
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  CHECK_OK(vdrtMemcpyAsync(device, pinned, 4096, vdrtMemcpyHostToDevice, stream));
  CHECK_OK(vdrtMemsetAsync(device, 1, 16, stream));
  std::vector<unsigned char> out(4096, 0);
  CHECK_OK(vdrtMemcpyAsync(out.data(), device, 4096, vdrtMemcpyDeviceToHost, stream));
  gate.wait_reached();
  sleep_ms(5);
  CHECK(out[100] == 0);  // queued behind the gate: not copied yet
  CHECK(vdrtStreamQuery(stream) == vdrtErrorNotReady);
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(out[0] == 1 && out[15] == 1 && out[16] == 7 && out[4095] == 7);
  CHECK_OK(vdrtStreamQuery(stream));
  CHECK(vdrtMemcpyAsync(out.data(), pinned, 8, vdrtMemcpyDeviceToHost, stream) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtFree(device));
  CHECK_OK(vdrtFreeHost(pinned));
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(queued_count_counts_the_work_queued_for_the_worker) {
  vdrtStream_t stream = new_stream();
  vdrtStream_t other = new_stream();
  unsigned long long count = 1;
  CHECK_OK(vdrtStreamGetQueuedCount(stream, &count));
  CHECK(count == 0);
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 64));
  Gate gate;
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  CHECK_OK(vdrtMemsetAsync(device, 0, 64, stream));
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
  CHECK_OK(vdrtEventRecord(event, other));
  CHECK_OK(vdrtStreamWaitEvent(stream, event));
  CHECK_OK(vdrtStreamGetQueuedCount(stream, &count));
  CHECK(count == 3);  // counted when queued, before the gate lets them run
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK_OK(vdrtStreamQuery(stream));
  CHECK_OK(vdrtStreamGetQueuedCount(stream, &count));
  CHECK(count == 3);  // synchronizing and querying queue nothing
  CHECK_OK(vdrtStreamGetQueuedCount(other, &count));
  CHECK(count == 1);
  CHECK(vdrtStreamGetQueuedCount(stream, nullptr) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtEventDestroy(event));
  CHECK_OK(vdrtFree(device));
  CHECK_OK(vdrtStreamDestroy(stream));
  CHECK_OK(vdrtStreamDestroy(other));
}

TEST(free_waits_for_queued_work) {
  vdrtStream_t stream = new_stream();
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 64));
  std::atomic<bool> ran{false};
  launch(stream, [&] {
    sleep_ms(30);
    std::memset(device, 0, 64);  // still valid: the free waits
    ran = true;
  });
  CHECK_OK(vdrtFree(device));
  CHECK(ran);
  CHECK_OK(vdrtStreamDestroy(stream));
}

// ---- streams ----

TEST(streams_priorities_and_devices) {
  int count = 0;
  CHECK_OK(vdrtGetDeviceCount(&count));
  for (int requested : {1, 0, -1, -3, -7}) {
    vdrtStream_t stream = new_stream(count - 1, requested);
    int priority = 99;
    int device = -1;
    CHECK_OK(vdrtStreamGetPriority(stream, &priority));
    CHECK_OK(vdrtStreamGetDevice(stream, &device));
    CHECK(priority == std::max(-3, std::min(0, requested)));
    CHECK(device == count - 1);
    CHECK_OK(vdrtStreamDestroy(stream));
  }
  vdrtStream_t stream = nullptr;
  CHECK(vdrtStreamCreate(count, &stream, 0) == vdrtErrorInvalidDevice);
  vdrtStream_t default_stream = nullptr;
  vdrtStream_t again = nullptr;
  CHECK_OK(vdrtDeviceGetDefaultStream(0, &default_stream));
  CHECK_OK(vdrtDeviceGetDefaultStream(0, &again));
  CHECK(default_stream == again);
  CHECK(vdrtStreamDestroy(default_stream) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtStreamQuery(default_stream));
}

TEST(launch_returns_before_the_work_runs) {
  vdrtStream_t stream = new_stream();
  Gate gate;
  std::atomic<bool> ran{false};
  const auto start = Clock::now();
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  launch(stream, [&] { ran = true; });
  CHECK(ms_since(start) < 1000);
  gate.wait_reached();
  CHECK(!ran);
  CHECK(vdrtStreamQuery(stream) == vdrtErrorNotReady);
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(ran);
  CHECK_OK(vdrtStreamQuery(stream));
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(work_runs_in_order_on_the_stream_worker) {
  vdrtStream_t stream = new_stream();
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 2000; ++i) {
    launch(stream, [&order, &threads, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(order.size() == 2000);
  for (int i = 0; i < 2000; ++i) {
    CHECK(order[static_cast<size_t>(i)] == i);
  }
  for (const auto& id : threads) {
    CHECK(id == threads.front() && id != std::this_thread::get_id());
  }
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(streams_run_concurrently) {
  // Work on `first` waits for work on `second`: it completes only if they overlap.
  vdrtStream_t first = new_stream();
  vdrtStream_t second = new_stream(0, -3);
  std::atomic<bool> second_ran{false};
  std::atomic<bool> first_saw_it{false};
  launch(first, [&] {
    const auto start = Clock::now();
    while (!second_ran && ms_since(start) < 5000) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    first_saw_it = second_ran.load();
  });
  launch(second, [&] { second_ran = true; });
  CHECK_OK(vdrtStreamSynchronize(first));
  CHECK(first_saw_it);
  CHECK_OK(vdrtStreamDestroy(first));
  CHECK_OK(vdrtStreamDestroy(second));
}

TEST(destroy_waits_for_queued_work) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) {
    launch(stream, [&] {
      sleep_ms(2);
      done += 1;
    });
  }
  CHECK_OK(vdrtStreamDestroy(stream));
  CHECK(done == 10);
}

TEST(device_synchronize_waits_for_every_stream) {
  std::vector<vdrtStream_t> streams = {new_stream(), new_stream(), new_stream(0, -2)};
  vdrtStream_t default_stream = nullptr;
  CHECK_OK(vdrtDeviceGetDefaultStream(0, &default_stream));
  streams.push_back(default_stream);
  vdrtStream_t other_device = new_stream(1);
  std::atomic<int> done{0};
  Gate other_gate;
  CHECK_OK(vdrtLaunchHostFunc(other_device, &Gate::wait, &other_gate));
  for (vdrtStream_t stream : streams) {
    launch(stream, [&] {
      sleep_ms(20);
      done += 1;
    });
  }
  CHECK_OK(vdrtDeviceSynchronize(0));  // does not wait for device 1's gate
  CHECK(done == 4);
  CHECK(vdrtStreamQuery(other_device) == vdrtErrorNotReady);
  other_gate.open = true;
  CHECK_OK(vdrtDeviceSynchronize(1));
  for (size_t i = 0; i < 3; ++i) {
    CHECK_OK(vdrtStreamDestroy(streams[i]));
  }
  CHECK_OK(vdrtStreamDestroy(other_device));
  CHECK(vdrtDeviceSynchronize(99) == vdrtErrorInvalidDevice);
}

TEST(waiting_on_its_own_stream_is_refused) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> sync_result{-1};
  std::atomic<int> device_result{-1};
  std::atomic<int> destroy_result{-1};
  launch(stream, [&] {
    sync_result = vdrtStreamSynchronize(stream);
    device_result = vdrtDeviceSynchronize(0);
    destroy_result = vdrtStreamDestroy(stream);
  });
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(sync_result == vdrtErrorWouldDeadlock);
  CHECK(device_result == vdrtErrorWouldDeadlock);
  CHECK(destroy_result == vdrtErrorWouldDeadlock);
  CHECK_OK(vdrtStreamDestroy(stream));
}

// ---- events ----

TEST(event_query_and_synchronize_follow_the_stream) {
  vdrtStream_t stream = new_stream();
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
  CHECK_OK(vdrtEventQuery(event));  // never recorded
  CHECK_OK(vdrtEventSynchronize(event));
  Gate gate;
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  CHECK_OK(vdrtEventRecord(event, stream));
  CHECK(vdrtEventQuery(event) == vdrtErrorNotReady);
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    CHECK_OK(vdrtEventSynchronize(event));
    synchronized = true;
  });
  sleep_ms(20);
  CHECK(!synchronized);
  gate.open = true;
  waiter.join();
  CHECK(synchronized);
  CHECK_OK(vdrtEventQuery(event));
  CHECK(vdrtEventCreate(&event, 8) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(rerecording_moves_the_event) {
  vdrtStream_t blocked = new_stream();
  vdrtStream_t free_stream = new_stream();
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
  Gate gate;
  CHECK_OK(vdrtLaunchHostFunc(blocked, &Gate::wait, &gate));
  CHECK_OK(vdrtEventRecord(event, blocked));
  CHECK(vdrtEventQuery(event) == vdrtErrorNotReady);
  CHECK_OK(vdrtEventRecord(event, free_stream));
  CHECK_OK(vdrtStreamSynchronize(free_stream));
  CHECK_OK(vdrtEventQuery(event));  // the last record is complete
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(blocked));
  CHECK_OK(vdrtEventQuery(event));
  CHECK_OK(vdrtEventDestroy(event));
  CHECK_OK(vdrtStreamDestroy(blocked));
  CHECK_OK(vdrtStreamDestroy(free_stream));
}

TEST(elapsed_time_is_measured_on_the_stream) {
  vdrtStream_t stream = new_stream();
  vdrtEvent_t start = nullptr;
  vdrtEvent_t end = nullptr;
  CHECK_OK(vdrtEventCreate(&start, vdrtEventDefault));
  CHECK_OK(vdrtEventCreate(&end, vdrtEventDefault));
  Gate gate;
  // The host records both events at once, but the stream reaches the second only
  // after 50 ms of work, and reaches the first only when the gate opens.
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  CHECK_OK(vdrtEventRecord(start, stream));
  launch(stream, [] { sleep_ms(50); });
  CHECK_OK(vdrtEventRecord(end, stream));
  float ms = -1;
  CHECK(vdrtEventElapsedTime(&ms, start, end) == vdrtErrorNotReady);
  sleep_ms(100);  // host time that must not count
  gate.open = true;
  CHECK_OK(vdrtEventSynchronize(end));
  CHECK_OK(vdrtEventElapsedTime(&ms, start, end));
  CHECK(ms >= 49.0f && ms < 95.0f);
  CHECK_OK(vdrtEventElapsedTime(&ms, end, start));
  CHECK(ms <= -49.0f);
  vdrtEvent_t untimed = nullptr;
  vdrtEvent_t unrecorded = nullptr;
  CHECK_OK(vdrtEventCreate(&untimed, vdrtEventDisableTiming));
  CHECK_OK(vdrtEventCreate(&unrecorded, vdrtEventDefault));
  CHECK_OK(vdrtEventRecord(untimed, stream));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(vdrtEventElapsedTime(&ms, start, untimed) == vdrtErrorTimingDisabled);
  CHECK(vdrtEventElapsedTime(&ms, start, unrecorded) == vdrtErrorInvalidResourceHandle);
  for (vdrtEvent_t event : {start, end, untimed, unrecorded}) {
    CHECK_OK(vdrtEventDestroy(event));
  }
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(stream_wait_event_orders_streams) {
  vdrtStream_t producer = new_stream();
  vdrtStream_t consumer = new_stream(1);  // across devices too
  vdrtEvent_t ready = nullptr;
  CHECK_OK(vdrtEventCreate(&ready, vdrtEventDisableTiming));
  CHECK_OK(vdrtStreamWaitEvent(consumer, ready));  // never recorded: no wait
  Gate gate;
  std::atomic<int> value{0};
  std::atomic<int> seen{-1};
  CHECK_OK(vdrtLaunchHostFunc(producer, &Gate::wait, &gate));
  launch(producer, [&] { value = 42; });
  CHECK_OK(vdrtEventRecord(ready, producer));
  CHECK_OK(vdrtStreamWaitEvent(consumer, ready));
  launch(consumer, [&] { seen = value.load(); });
  // Recording the event again later does not move the wait.
  launch(producer, [] { sleep_ms(200); });
  CHECK_OK(vdrtEventRecord(ready, producer));
  sleep_ms(20);
  CHECK(seen == -1);
  CHECK(vdrtStreamQuery(consumer) == vdrtErrorNotReady);
  gate.open = true;
  const auto start = Clock::now();
  CHECK_OK(vdrtStreamSynchronize(consumer));
  CHECK(seen == 42);
  CHECK(ms_since(start) < 150);  // did not wait for the later record
  CHECK_OK(vdrtEventDestroy(ready));  // while its last record is still queued
  CHECK_OK(vdrtStreamSynchronize(producer));
  CHECK_OK(vdrtStreamDestroy(producer));
  CHECK_OK(vdrtStreamDestroy(consumer));
}

// A record of the event on another stream, completing first, neither releases a wait
// for the earlier record nor completes it for a host that waited before the re-record
// (CUDA waits for the record made before the wait call).
thread_local bool is_event_waiter = false;
std::atomic<bool> event_waiter_blocked{false};

void noting_wait_hook(void (*wait)(void* context), void* context) {
  if (is_event_waiter) {
    event_waiter_blocked = true;
  }
  wait(context);
}

TEST(waits_are_for_their_record_when_another_stream_records_the_event_again) {
  CHECK_OK(vdrtSetHostWaitHook(&noting_wait_hook));
  vdrtStream_t slow = new_stream();
  vdrtStream_t idle = new_stream();
  vdrtStream_t consumer = new_stream();
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
  Gate gate;
  std::atomic<int> value{0};
  std::atomic<int> seen{-1};
  CHECK_OK(vdrtLaunchHostFunc(slow, &Gate::wait, &gate));
  launch(slow, [&] { value = 42; });
  CHECK_OK(vdrtEventRecord(event, slow));
  CHECK_OK(vdrtStreamWaitEvent(consumer, event));
  launch(consumer, [&] { seen = value.load(); });
  std::atomic<bool> synchronized{false};
  std::thread waiter([&] {
    is_event_waiter = true;
    CHECK_OK(vdrtEventSynchronize(event));
    synchronized = true;
  });
  while (!event_waiter_blocked) {
    sleep_ms(1);
  }
  // Recorded again on an idle stream: that record completes at once.
  CHECK_OK(vdrtEventRecord(event, idle));
  CHECK_OK(vdrtStreamSynchronize(idle));
  CHECK_OK(vdrtEventQuery(event));  // the latest record is complete
  CHECK_OK(vdrtEventSynchronize(event));  // a host wait after it is for that record
  sleep_ms(20);
  // Noted, then checked once the waiter has joined, so a failure names its check.
  const int seen_before_the_gate = seen;
  const vdrtError_t consumer_before_the_gate = vdrtStreamQuery(consumer);
  const bool synchronized_before_the_gate = synchronized;
  // A wait made now is for the idle stream's record: it does not hold its stream.
  vdrtStream_t later_consumer = new_stream();
  const vdrtError_t later_wait = vdrtStreamWaitEvent(later_consumer, event);
  const vdrtError_t later_synchronize = vdrtStreamSynchronize(later_consumer);
  gate.open = true;
  const vdrtError_t consumer_synchronize = vdrtStreamSynchronize(consumer);
  const vdrtError_t slow_synchronize = vdrtStreamSynchronize(slow);  // past the gate
  waiter.join();
  CHECK(seen_before_the_gate == -1);
  CHECK(consumer_before_the_gate == vdrtErrorNotReady);
  CHECK(!synchronized_before_the_gate);
  CHECK_OK(later_wait);
  CHECK_OK(later_synchronize);
  CHECK_OK(consumer_synchronize);
  CHECK_OK(slow_synchronize);
  CHECK(seen == 42);
  CHECK(synchronized);
  CHECK_OK(vdrtEventQuery(event));
  CHECK_OK(vdrtSetHostWaitHook(nullptr));
  CHECK_OK(vdrtEventDestroy(event));
  for (vdrtStream_t stream : {slow, idle, consumer, later_consumer}) {
    CHECK_OK(vdrtStreamDestroy(stream));
  }
}

// The latest record decides the query and the elapsed time, whichever completes first.
TEST(an_earlier_record_completing_last_does_not_move_the_event) {
  vdrtStream_t slow = new_stream();
  vdrtStream_t fast = new_stream();
  vdrtEvent_t start = nullptr;
  vdrtEvent_t end = nullptr;
  CHECK_OK(vdrtEventCreate(&start, vdrtEventDefault));
  CHECK_OK(vdrtEventCreate(&end, vdrtEventDefault));
  Gate gate;
  CHECK_OK(vdrtEventRecord(start, fast));
  launch(fast, [] { sleep_ms(30); });
  CHECK_OK(vdrtLaunchHostFunc(slow, &Gate::wait, &gate));
  CHECK_OK(vdrtEventRecord(end, slow));
  CHECK_OK(vdrtEventRecord(end, fast));
  CHECK_OK(vdrtStreamSynchronize(fast));
  CHECK_OK(vdrtEventQuery(end));
  float ms = -1;
  CHECK_OK(vdrtEventElapsedTime(&ms, start, end));
  const float fast_ms = ms;
  CHECK(fast_ms >= 29.0f);
  sleep_ms(50);
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(slow));
  CHECK_OK(vdrtEventElapsedTime(&ms, start, end));
  CHECK(ms == fast_ms);  // the slow stream's earlier record did not move the time
  CHECK_OK(vdrtEventDestroy(start));
  CHECK_OK(vdrtEventDestroy(end));
  CHECK_OK(vdrtStreamDestroy(slow));
  CHECK_OK(vdrtStreamDestroy(fast));
}

// ---- launch failures ----

void failing_kernel(void* message) {
  vdrtReportLaunchFailure(static_cast<const char*>(message));
}

TEST(launch_failure_surfaces_at_the_next_synchronization) {
  vdrtStream_t stream = new_stream();
  std::atomic<bool> later_ran{false};
  CHECK_OK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("index 9 is out of bounds")));
  CHECK_OK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("second failure")));
  launch(stream, [&] { later_ran = true; });
  while (vdrtStreamQuery(stream) == vdrtErrorNotReady) {  // queries do not report it
    sleep_ms(1);
  }
  CHECK(vdrtStreamSynchronize(stream) == vdrtErrorLaunchFailure);
  CHECK(std::strcmp(vdrtGetLastErrorMessage(), "index 9 is out of bounds") == 0);  // the first
  CHECK(later_ran);
  CHECK_OK(vdrtStreamSynchronize(stream));  // reported once; the stream stays usable
  launch(stream, [] {});
  CHECK_OK(vdrtStreamSynchronize(stream));

  CHECK_OK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("seen by the device")));
  CHECK(vdrtDeviceSynchronize(0) == vdrtErrorLaunchFailure);
  CHECK(std::strcmp(vdrtGetLastErrorMessage(), "seen by the device") == 0);

  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDisableTiming));
  CHECK_OK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("seen by the event")));
  CHECK_OK(vdrtEventRecord(event, stream));
  CHECK(vdrtEventSynchronize(event) == vdrtErrorLaunchFailure);
  CHECK(std::strcmp(vdrtGetLastErrorMessage(), "seen by the event") == 0);
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK_OK(vdrtEventDestroy(event));
  CHECK_OK(vdrtStreamDestroy(stream));
}

// ---- host waits ----

std::atomic<int> hooked_waits{0};

void counting_wait_hook(void (*wait)(void* context), void* context) {
  hooked_waits += 1;
  wait(context);
}

TEST(only_blocking_waits_run_through_the_host_wait_hook) {
  CHECK_OK(vdrtSetHostWaitHook(&counting_wait_hook));
  vdrtStream_t stream = new_stream();
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
  // Complete work: no wait blocks, so the hook is not called.
  CHECK_OK(vdrtEventRecord(event, stream));
  while (vdrtStreamQuery(stream) == vdrtErrorNotReady) {
    sleep_ms(1);
  }
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK_OK(vdrtEventSynchronize(event));
  CHECK_OK(vdrtDeviceSynchronize(0));
  CHECK(hooked_waits == 0);
  // Queued work: each wait blocks inside the hook.
  const std::function<vdrtError_t()> waits[] = {
      [&] { return vdrtStreamSynchronize(stream); },
      [&] { return vdrtEventSynchronize(event); },
      [&] { return vdrtDeviceSynchronize(0); },
  };
  int expected = 0;
  for (const auto& wait : waits) {
    Gate gate;
    CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
    CHECK_OK(vdrtEventRecord(event, stream));
    gate.wait_reached();
    std::thread opener([&] {
      sleep_ms(20);
      gate.open = true;
    });
    CHECK_OK(wait());
    opener.join();
    expected += 1;
    CHECK(hooked_waits == expected);
  }
  CHECK_OK(vdrtSetHostWaitHook(nullptr));
  CHECK_OK(vdrtEventDestroy(event));
  CHECK_OK(vdrtStreamDestroy(stream));
}

// ---- launch blocking ----

TEST(launch_blocking_runs_work_before_returning) {
  CHECK_OK(vdrtSetLaunchBlocking(1));
  CHECK(vdrtGetLaunchBlocking() == 1);
  vdrtStream_t stream = new_stream();
  std::thread::id ran_on;
  launch(stream, [&] {
    sleep_ms(20);
    ran_on = std::this_thread::get_id();
  });
  CHECK(ran_on == std::this_thread::get_id());  // ran, on the calling thread
  CHECK_OK(vdrtStreamQuery(stream));
  CHECK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("at once")) ==
        vdrtErrorLaunchFailure);
  CHECK(std::strcmp(vdrtGetLastErrorMessage(), "at once") == 0);
  CHECK_OK(vdrtStreamSynchronize(stream));  // already reported
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 64));
  int value = 5;
  CHECK_OK(vdrtMemcpyAsync(device, &value, sizeof value, vdrtMemcpyHostToDevice, stream));
  CHECK(*static_cast<int*>(device) == 5);
  vdrtEvent_t start = nullptr;
  vdrtEvent_t end = nullptr;
  CHECK_OK(vdrtEventCreate(&start, vdrtEventDefault));
  CHECK_OK(vdrtEventCreate(&end, vdrtEventDefault));
  CHECK_OK(vdrtEventRecord(start, stream));
  CHECK_OK(vdrtEventQuery(start));
  launch(stream, [] { sleep_ms(10); });
  CHECK_OK(vdrtEventRecord(end, stream));
  float ms = 0;
  CHECK_OK(vdrtEventElapsedTime(&ms, start, end));
  CHECK(ms >= 9.0f);
  CHECK_OK(vdrtSetLaunchBlocking(0));
  CHECK_OK(vdrtFree(device));
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(launch_blocking_from_the_environment) {
  CHECK(vdrtGetLaunchBlocking() == 1);
  vdrtStream_t stream = new_stream();
  bool ran = false;
  launch(stream, [&] { ran = true; });
  CHECK(ran);
  CHECK_OK(vdrtStreamDestroy(stream));
}

// ---- threads ----

TEST(many_host_threads_share_a_stream) {
  // The stream serializes its work, so an unsynchronized counter stays exact.
  vdrtStream_t stream = new_stream();
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        launch(stream, [&counter] { counter += 1; });
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(counter == 8 * 500);
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(sleeping_synchronizations_return_at_their_own_points) {
  // Two host threads sleep in synchronizations of one stream that end at different
  // points: each returns once the work before its call is done, whatever the other
  // waits for (the worker wakes sleepers once the nearest point is reached, and one
  // woken early must sleep again until its own).
  vdrtStream_t stream = new_stream();
  Gate first_gate, second_gate;
  std::atomic<int> done{0};
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &first_gate));
  launch(stream, [&] { done += 1; });
  std::atomic<bool> early_returned{false};
  std::thread early([&] {
    CHECK_OK(vdrtStreamSynchronize(stream));
    CHECK(done.load() >= 1);
    early_returned = true;
  });
  sleep_ms(20);  // past the polling: the early thread sleeps
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &second_gate));
  launch(stream, [&] { done += 1; });
  std::atomic<bool> late_returned{false};
  std::thread late([&] {
    CHECK_OK(vdrtStreamSynchronize(stream));
    CHECK(done.load() == 2);
    late_returned = true;
  });
  sleep_ms(20);
  CHECK(!early_returned && !late_returned);
  first_gate.open = true;
  early.join();
  second_gate.wait_reached();
  sleep_ms(20);
  CHECK(!late_returned);
  second_gate.open = true;
  late.join();
  CHECK(late_returned);
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(stream_workers_are_named_for_their_device) {
  vdrtStream_t stream = new_stream();
  std::string name;
  launch(stream, [&] {
    char buffer[16] = {};
    CHECK(pthread_getname_np(pthread_self(), buffer, sizeof(buffer)) == 0);
    name = buffer;
  });
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(name == "vdev_stream_0");
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(concurrent_allocation_and_streams) {
  size_t free_before = 0;
  size_t total = 0;
  CHECK_OK(vdrtMemGetInfo(0, &free_before, &total));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 50; ++i) {
          vdrtStream_t stream = new_stream(0, -(i % 4));
          void* ptr = nullptr;
          CHECK_OK(vdrtMalloc(0, &ptr, static_cast<size_t>(64 * (t + i + 1))));
          CHECK_OK(vdrtMemsetAsync(ptr, t, 64, stream));
          vdrtEvent_t event = nullptr;
          CHECK_OK(vdrtEventCreate(&event, vdrtEventDefault));
          CHECK_OK(vdrtEventRecord(event, stream));
          CHECK_OK(vdrtEventSynchronize(event));
          CHECK(static_cast<unsigned char*>(ptr)[63] == t);
          CHECK_OK(vdrtEventDestroy(event));
          CHECK_OK(vdrtFree(ptr));
          CHECK_OK(vdrtStreamDestroy(stream));
        }
      } catch (const Failure& failure) {
        std::fprintf(stderr, "%s\n", failure.what());
        failures += 1;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CHECK(failures == 0);
  size_t free_after = 0;
  CHECK_OK(vdrtMemGetInfo(0, &free_after, &total));
  CHECK(free_after == free_before);
}

// ---- graphs: stream capture ----

// Launches a C++ callable that the runtime owns: replayable, destroyed by the runtime.
vdrtError_t launch_owned(vdrtStream_t stream, std::function<void()> fn, const char* name = "fn") {
  return vdrtLaunchHostFuncOwned(
      stream, [](void* data) { (*static_cast<std::function<void()>*>(data))(); },
      new std::function<void()>(std::move(fn)),
      [](void* data) { delete static_cast<std::function<void()>*>(data); }, name);
}

// Counts its destructions: shows when the runtime destroys recorded data.
struct Tracked {
  std::atomic<int>* runs;
  std::atomic<int>* destroyed;
  static void run(void* data) {
    *static_cast<Tracked*>(data)->runs += 1;
  }
  static void destroy(void* data) {
    auto* tracked = static_cast<Tracked*>(data);
    *tracked->destroyed += 1;
    delete tracked;
  }
};

vdrtStreamCaptureStatus capture_status(vdrtStream_t stream, unsigned long long* id = nullptr) {
  vdrtStreamCaptureStatus status = vdrtStreamCaptureStatusNone;
  CHECK_OK(vdrtStreamGetCaptureInfo(stream, &status, id));
  return status;
}

// The stream works normally: launched work runs and synchronizing succeeds.
void check_usable(vdrtStream_t stream) {
  std::atomic<int> ran{0};
  CHECK_OK(launch_owned(stream, [&] { ran += 1; }));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(ran == 1);
}

TEST(launches_of_one_graph_exec_run_in_launch_order_across_streams) {
  // The first launch is held behind a gate on its stream; the second, on a free stream,
  // must wait for it (as CUDA orders a graph exec's launches), and they never overlap.
  vdrtStream_t held = new_stream();
  vdrtStream_t free_stream = new_stream();
  std::atomic<int> launch{0};
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  CHECK_OK(vdrtStreamBeginCapture(held, vdrtStreamCaptureModeGlobal));
  CHECK_OK(launch_owned(held, [&] {
    overlapped = overlapped || running.fetch_add(1) != 0;
    sleep_ms(5);
    launch += 1;
    running -= 1;
  }));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(held, &graph));
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  std::atomic<bool> gate{false};
  CHECK_OK(launch_owned(held, [&] {
    while (!gate) {
      sleep_ms(1);
    }
  }));
  CHECK_OK(vdrtGraphLaunch(exec, held));
  CHECK_OK(vdrtGraphLaunch(exec, free_stream));
  std::atomic<int> seen_after_second{-1};
  CHECK_OK(launch_owned(free_stream, [&] { seen_after_second = launch.load(); }));
  sleep_ms(50);
  CHECK(launch == 0 && seen_after_second == -1);  // the second launch waits for the first
  gate = true;
  CHECK_OK(vdrtStreamSynchronize(free_stream));
  CHECK(seen_after_second == 2 && !overlapped);
  CHECK_OK(vdrtStreamSynchronize(held));
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK_OK(vdrtStreamDestroy(free_stream));
  CHECK_OK(vdrtStreamDestroy(held));
}

TEST(capture_records_launches_and_replays_them) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> runs{0};
  std::atomic<int> destroyed{0};
  unsigned long long id = 0;
  CHECK(capture_status(stream) == vdrtStreamCaptureStatusNone);
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK(capture_status(stream, &id) == vdrtStreamCaptureStatusActive && id != 0);
  CHECK_OK(vdrtLaunchHostFuncOwned(
      stream, &Tracked::run, new Tracked{&runs, &destroyed}, &Tracked::destroy, "tracked"));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  CHECK(graph != nullptr && capture_status(stream) == vdrtStreamCaptureStatusNone);
  sleep_ms(20);
  CHECK(runs == 0);  // recorded, not run
  size_t count = 0;
  CHECK_OK(vdrtGraphGetNodeCount(graph, &count));
  CHECK(count == 1);
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  CHECK_OK(vdrtGraphDestroy(graph));  // the executable graph keeps the work
  for (int replay = 0; replay < 3; ++replay) {
    CHECK_OK(vdrtGraphLaunch(exec, stream));
  }
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(runs == 3 && destroyed == 0);
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK(destroyed == 1);
  // A second capture on the stream has a new id.
  unsigned long long second = 0;
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK(capture_status(stream, &second) == vdrtStreamCaptureStatusActive && second > id);
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  CHECK_OK(vdrtGraphDestroy(graph));
  check_usable(stream);
  CHECK_OK(vdrtStreamDestroy(stream));
}

// Records in *data whether the run is one that runs again.
void note_runs_again(void* data) {
  int runs_again = -1;
  CHECK_OK(vdrtHostFuncRunsAgain(&runs_again));
  static_cast<std::atomic<int>*>(data)->store(runs_again);
}

TEST(host_functions_know_whether_they_run_again) {
  int runs_again = -1;
  CHECK(vdrtHostFuncRunsAgain(&runs_again) == vdrtErrorInvalidValue);  // not in a host function
  vdrtStream_t stream = new_stream();
  std::atomic<int> launched{-1};
  CHECK_OK(vdrtLaunchHostFunc(stream, &note_runs_again, &launched));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(launched == 0);
  std::atomic<int> recorded{-1};
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK_OK(vdrtLaunchHostFunc(stream, &note_runs_again, &recorded));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  CHECK_OK(vdrtGraphLaunch(exec, stream));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(recorded == 1);
  // Work launched after a replay is its only run again.
  launched = -1;
  CHECK_OK(vdrtLaunchHostFunc(stream, &note_runs_again, &launched));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(launched == 0);
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK_OK(vdrtStreamDestroy(stream));
}

// Records in *data whether the run is on a stream's worker thread.
void note_on_worker(void* data) {
  int on_worker = -1;
  CHECK_OK(vdrtHostFuncOnWorker(&on_worker));
  static_cast<std::atomic<int>*>(data)->store(on_worker);
}

TEST(host_functions_know_whether_they_run_on_a_worker) {
  int on_worker = -1;
  CHECK(vdrtHostFuncOnWorker(&on_worker) == vdrtErrorInvalidValue);  // not in a host function
  vdrtStream_t stream = new_stream();
  std::atomic<int> queued{-1};
  CHECK_OK(vdrtLaunchHostFunc(stream, &note_on_worker, &queued));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(queued == 1);
  std::atomic<int> blocking{-1};
  CHECK_OK(vdrtSetLaunchBlocking(1));
  CHECK_OK(vdrtLaunchHostFunc(stream, &note_on_worker, &blocking));
  CHECK_OK(vdrtSetLaunchBlocking(0));
  CHECK(blocking == 0);  // ran on this thread
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(replay_runs_recorded_work_in_order_with_copies_and_memsets) {
  vdrtStream_t stream = new_stream();
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 64));
  std::vector<int> order;
  std::vector<unsigned char> host(64, 7);
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  for (int step = 0; step < 5; ++step) {
    CHECK_OK(launch_owned(stream, [&order, step] { order.push_back(step); }));
  }
  CHECK_OK(vdrtMemsetAsync(device, 3, 64, stream));
  CHECK_OK(vdrtMemcpyAsync(host.data(), device, 32, vdrtMemcpyDeviceToHost, stream));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  CHECK(order.empty() && host[0] == 7);
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  CHECK_OK(vdrtGraphLaunch(exec, stream));
  CHECK_OK(vdrtGraphLaunch(exec, stream));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK((order == std::vector<int>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  CHECK(host[0] == 3 && host[31] == 3 && host[32] == 7);
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK_OK(vdrtFree(device));
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(forked_and_joined_streams_are_captured) {
  vdrtStream_t origin = new_stream();
  vdrtStream_t side = new_stream();
  vdrtEvent_t fork = nullptr;
  vdrtEvent_t join = nullptr;
  CHECK_OK(vdrtEventCreate(&fork, vdrtEventDisableTiming));
  CHECK_OK(vdrtEventCreate(&join, vdrtEventDisableTiming));
  std::atomic<int> first{0};
  std::atomic<int> forked{0};
  std::atomic<int> last{0};
  std::atomic<int> forked_saw_first{0};
  std::atomic<int> last_saw_forked{0};
  unsigned long long origin_id = 0;
  unsigned long long side_id = 0;
  CHECK_OK(vdrtStreamBeginCapture(origin, vdrtStreamCaptureModeGlobal));
  CHECK_OK(launch_owned(origin, [&] { first += 1; }, "first"));
  CHECK_OK(vdrtEventRecord(fork, origin));
  CHECK_OK(vdrtStreamWaitEvent(side, fork));
  CHECK(capture_status(origin, &origin_id) == vdrtStreamCaptureStatusActive);
  CHECK(capture_status(side, &side_id) == vdrtStreamCaptureStatusActive && side_id == origin_id);
  CHECK_OK(launch_owned(side, [&] { forked_saw_first += first.load(); forked += 1; }, "forked"));
  CHECK_OK(vdrtEventRecord(join, side));
  CHECK_OK(vdrtStreamWaitEvent(origin, join));
  CHECK_OK(launch_owned(origin, [&] { last_saw_forked += forked.load(); last += 1; }, "last"));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(origin, &graph));
  CHECK(capture_status(side) == vdrtStreamCaptureStatusNone);
  size_t count = 0;
  CHECK_OK(vdrtGraphGetNodeCount(graph, &count));
  CHECK(count == 3 && first == 0 && forked == 0 && last == 0);
  char path[] = "/tmp/vdrt_graph_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK_OK(vdrtGraphDebugDotPrint(graph, path));
  FILE* file = std::fopen(path, "r");
  std::string dot(4096, '\0');
  dot.resize(std::fread(&dot[0], 1, dot.size(), file));
  std::fclose(file);
  std::remove(path);
  CHECK(dot.find("n0 -> n1") != std::string::npos && dot.find("n1 -> n2") != std::string::npos);
  CHECK(dot.find("forked") != std::string::npos);
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  for (int replay = 0; replay < 4; ++replay) {
    CHECK_OK(vdrtGraphLaunch(exec, origin));
  }
  CHECK_OK(vdrtStreamSynchronize(origin));
  CHECK(first == 4 && forked == 4 && last == 4);
  // Each run saw the work it depends on of the same and earlier runs: 1+2+3+4.
  CHECK(forked_saw_first == 10 && last_saw_forked == 10);
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  check_usable(side);
  CHECK_OK(vdrtEventDestroy(fork));
  CHECK_OK(vdrtEventDestroy(join));
  CHECK_OK(vdrtStreamDestroy(side));
  CHECK_OK(vdrtStreamDestroy(origin));
}

TEST(an_unjoined_fork_fails_the_capture) {
  vdrtStream_t origin = new_stream();
  vdrtStream_t side = new_stream();
  vdrtEvent_t fork = nullptr;
  CHECK_OK(vdrtEventCreate(&fork, vdrtEventDisableTiming));
  CHECK_OK(vdrtStreamBeginCapture(origin, vdrtStreamCaptureModeGlobal));
  CHECK_OK(launch_owned(origin, [] {}));
  CHECK_OK(vdrtEventRecord(fork, origin));
  CHECK_OK(vdrtStreamWaitEvent(side, fork));
  CHECK_OK(launch_owned(side, [] {}, "left_behind"));
  vdrtGraph_t graph = nullptr;
  CHECK(vdrtStreamEndCapture(side, &graph) == vdrtErrorStreamCaptureUnmatched);
  CHECK(vdrtStreamEndCapture(origin, &graph) == vdrtErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr && std::strstr(vdrtGetLastErrorMessage(), "left_behind") != nullptr);
  CHECK(capture_status(origin) == vdrtStreamCaptureStatusNone);
  CHECK(capture_status(side) == vdrtStreamCaptureStatusNone);
  check_usable(origin);
  check_usable(side);
  CHECK_OK(vdrtEventDestroy(fork));
  CHECK_OK(vdrtStreamDestroy(side));
  CHECK_OK(vdrtStreamDestroy(origin));
}

// Runs `forbidden` during a capture of a fresh stream: it must fail with `error` and
// invalidate the capture; the stream and the process stay usable.
void check_invalidates(
    vdrtStreamCaptureMode mode, vdrtError_t error, const std::function<vdrtError_t(vdrtStream_t)>& forbidden) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> runs{0};
  std::atomic<int> destroyed{0};
  CHECK_OK(vdrtStreamBeginCapture(stream, mode));
  CHECK_OK(launch_owned(stream, [] {}));
  vdrtError_t got = forbidden(stream);
  if (got != error) {
    throw Failure(std::string("expected ") + vdrtGetErrorName(error) + ", got " + vdrtGetErrorName(got));
  }
  CHECK(capture_status(stream) == vdrtStreamCaptureStatusInvalidated);
  // Later launches fail, and the runtime destroys their data.
  CHECK(vdrtLaunchHostFuncOwned(
            stream, &Tracked::run, new Tracked{&runs, &destroyed}, &Tracked::destroy, "late") ==
        vdrtErrorStreamCaptureInvalidated);
  CHECK(destroyed == 1 && runs == 0);
  vdrtGraph_t graph = nullptr;
  CHECK(vdrtStreamEndCapture(stream, &graph) == vdrtErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK(capture_status(stream) == vdrtStreamCaptureStatusNone);
  check_usable(stream);
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(waiting_for_a_capturing_stream_invalidates_the_capture) {
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureUnsupported, [](vdrtStream_t stream) {
    vdrtError_t error = vdrtStreamSynchronize(stream);
    const std::string message = vdrtGetLastErrorMessage();
    CHECK(message.find("not permitted when stream is capturing") != std::string::npos);
    CHECK(message.find("is invalidated") != std::string::npos);
    return error;
  });
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureUnsupported, &vdrtStreamQuery);
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureUnsupported, [](vdrtStream_t) {
    return vdrtDeviceSynchronize(0);
  });
  void* device = nullptr;
  CHECK_OK(vdrtMalloc(0, &device, 16));
  char host[16] = {};
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureUnsupported, [&](vdrtStream_t) {
    return vdrtMemcpy(host, device, 16, vdrtMemcpyDeviceToHost);
  });
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureUnsupported, [&](vdrtStream_t) {
    return vdrtMemset(device, 0, 16);
  });
  CHECK_OK(vdrtFree(device));
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDisableTiming));
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorCapturedEvent, [&](vdrtStream_t stream) {
    CHECK_OK(vdrtEventRecord(event, stream));
    return vdrtEventSynchronize(event);
  });
  CHECK_OK(vdrtEventSynchronize(event));  // its capture ended: an ordinary event again
  CHECK_OK(vdrtEventDestroy(event));
}

TEST(a_capturing_stream_cannot_wait_for_uncaptured_work) {
  vdrtStream_t other = new_stream();
  vdrtEvent_t event = nullptr;
  CHECK_OK(vdrtEventCreate(&event, vdrtEventDisableTiming));
  CHECK_OK(vdrtEventRecord(event, other));
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureIsolation, [&](vdrtStream_t stream) {
    return vdrtStreamWaitEvent(stream, event);
  });
  // Two captures cannot merge.
  vdrtStream_t second = new_stream();
  vdrtEvent_t captured = nullptr;
  CHECK_OK(vdrtEventCreate(&captured, vdrtEventDisableTiming));
  CHECK_OK(vdrtStreamBeginCapture(second, vdrtStreamCaptureModeRelaxed));
  CHECK_OK(vdrtEventRecord(captured, second));
  check_invalidates(vdrtStreamCaptureModeRelaxed, vdrtErrorStreamCaptureMerge, [&](vdrtStream_t stream) {
    return vdrtStreamWaitEvent(stream, captured);
  });
  CHECK(capture_status(second) == vdrtStreamCaptureStatusInvalidated);
  vdrtGraph_t graph = nullptr;
  CHECK(vdrtStreamEndCapture(second, &graph) == vdrtErrorStreamCaptureInvalidated);
  CHECK_OK(vdrtEventDestroy(captured));
  CHECK_OK(vdrtEventDestroy(event));
  CHECK_OK(vdrtStreamDestroy(second));
  CHECK_OK(vdrtStreamDestroy(other));
}

TEST(capture_modes_decide_what_other_streams_may_do) {
  vdrtStream_t other = new_stream();
  // Another thread's work on another stream: forbidden by a global capture only.
  auto from_another_thread = [other](vdrtStream_t) {
    vdrtError_t error = vdrtSuccess;
    std::string message;
    std::thread([&] {
      error = launch_owned(other, [] {});
      message = vdrtGetLastErrorMessage();
    }).join();
    if (error != vdrtSuccess) {
      CHECK(message.find("global mode") != std::string::npos);
    }
    return error;
  };
  check_invalidates(vdrtStreamCaptureModeGlobal, vdrtErrorStreamCaptureImplicit, from_another_thread);
  for (auto mode : {vdrtStreamCaptureModeThreadLocal, vdrtStreamCaptureModeRelaxed}) {
    vdrtStream_t stream = new_stream();
    CHECK_OK(vdrtStreamBeginCapture(stream, mode));
    CHECK_OK(from_another_thread(stream));
    CHECK(capture_status(stream) == vdrtStreamCaptureStatusActive);
    vdrtGraph_t graph = nullptr;
    CHECK_OK(vdrtStreamEndCapture(stream, &graph));
    CHECK_OK(vdrtGraphDestroy(graph));
    CHECK_OK(vdrtStreamDestroy(stream));
  }
  // The capturing thread's own work or waits elsewhere: forbidden unless relaxed.
  for (auto mode : {vdrtStreamCaptureModeGlobal, vdrtStreamCaptureModeThreadLocal}) {
    check_invalidates(mode, vdrtErrorStreamCaptureImplicit, [other](vdrtStream_t) {
      return launch_owned(other, [] {});
    });
    check_invalidates(mode, vdrtErrorStreamCaptureImplicit, [other](vdrtStream_t) {
      return vdrtStreamSynchronize(other);
    });
  }
  vdrtStream_t stream = new_stream();
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeRelaxed));
  check_usable(other);
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK_OK(vdrtStreamDestroy(stream));
  CHECK_OK(vdrtStreamDestroy(other));
}

TEST(ending_a_capture_checks_the_stream_and_the_thread) {
  vdrtStream_t stream = new_stream();
  vdrtGraph_t graph = nullptr;
  CHECK(vdrtStreamEndCapture(stream, &graph) == vdrtErrorStreamCaptureUnmatched);
  CHECK(vdrtStreamBeginCapture(stream, static_cast<vdrtStreamCaptureMode>(7)) == vdrtErrorInvalidValue);
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeThreadLocal));
  CHECK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal) == vdrtErrorIllegalState);
  vdrtError_t from_other = vdrtSuccess;
  std::thread([&] { from_other = vdrtStreamEndCapture(stream, &graph); }).join();
  CHECK(from_other == vdrtErrorStreamCaptureWrongThread);
  CHECK(capture_status(stream) == vdrtStreamCaptureStatusActive);
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  CHECK_OK(vdrtGraphDestroy(graph));
  // A relaxed capture may end on another thread.
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeRelaxed));
  std::thread([&] { from_other = vdrtStreamEndCapture(stream, &graph); }).join();
  CHECK_OK(from_other);
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK_OK(vdrtStreamDestroy(stream));
}

// Under launch blocking a graph launch runs before it returns; one whose kernel fails
// reports the failure, and the next launch of the graph does not wait for it forever.
TEST(a_failed_graph_launch_under_launch_blocking_does_not_hold_the_next) {
  vdrtStream_t stream = new_stream();
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK_OK(vdrtLaunchHostFunc(stream, &failing_kernel, const_cast<char*>("replayed failure")));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  CHECK_OK(vdrtSetLaunchBlocking(1));
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(vdrtGraphLaunch(exec, stream) == vdrtErrorLaunchFailure);
    CHECK(std::string(vdrtGetLastErrorMessage()).find("replayed failure") != std::string::npos);
  }
  CHECK_OK(vdrtSetLaunchBlocking(0));
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  check_usable(stream);
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(graph_launches_are_captured_too) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> runs{0};
  vdrtGraph_t inner = nullptr;
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK_OK(launch_owned(stream, [&] { runs += 1; }));
  CHECK_OK(vdrtStreamEndCapture(stream, &inner));
  vdrtGraphExec_t inner_exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&inner_exec, inner));
  vdrtGraph_t outer = nullptr;
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK_OK(vdrtGraphLaunch(inner_exec, stream));
  CHECK_OK(vdrtGraphLaunch(inner_exec, stream));
  CHECK_OK(vdrtStreamEndCapture(stream, &outer));
  CHECK_OK(vdrtGraphExecDestroy(inner_exec));  // the outer graph holds its work
  CHECK_OK(vdrtGraphDestroy(inner));
  vdrtGraphExec_t outer_exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&outer_exec, outer));
  CHECK_OK(vdrtGraphLaunch(outer_exec, stream));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(runs == 2);
  CHECK_OK(vdrtGraphExecDestroy(outer_exec));
  CHECK_OK(vdrtGraphDestroy(outer));
  CHECK_OK(vdrtStreamDestroy(stream));
}

TEST(a_graph_destroyed_while_launched_runs_then_is_destroyed) {
  vdrtStream_t stream = new_stream();
  std::atomic<int> runs{0};
  std::atomic<int> destroyed{0};
  CHECK_OK(vdrtStreamBeginCapture(stream, vdrtStreamCaptureModeGlobal));
  CHECK_OK(vdrtLaunchHostFuncOwned(
      stream, &Tracked::run, new Tracked{&runs, &destroyed}, &Tracked::destroy, "tracked"));
  vdrtGraph_t graph = nullptr;
  CHECK_OK(vdrtStreamEndCapture(stream, &graph));
  vdrtGraphExec_t exec = nullptr;
  CHECK_OK(vdrtGraphInstantiate(&exec, graph));
  Gate gate;
  CHECK_OK(vdrtLaunchHostFunc(stream, &Gate::wait, &gate));
  CHECK_OK(vdrtGraphLaunch(exec, stream));
  CHECK_OK(vdrtGraphExecDestroy(exec));
  CHECK_OK(vdrtGraphDestroy(graph));
  CHECK(runs == 0 && destroyed == 0);
  gate.open = true;
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(runs == 1 && destroyed == 1);
  // Owned work launched outside captures runs once and is destroyed after running.
  CHECK_OK(vdrtLaunchHostFuncOwned(
      stream, &Tracked::run, new Tracked{&runs, &destroyed}, &Tracked::destroy, "tracked"));
  CHECK_OK(vdrtStreamSynchronize(stream));
  CHECK(runs == 2 && destroyed == 2);
  CHECK_OK(vdrtStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& [name, test] : registry()) {
      std::printf("%s\n", name.c_str());
    }
    return 0;
  }
  if (argc != 2 || registry().count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: %s --list | TEST_NAME\n", argv[0]);
    return 2;
  }
  try {
    registry().at(argv[1])();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "FAILED %s: %s\n", argv[1], error.what());
    return 1;
  }
  std::printf("PASSED %s\n", argv[1]);
  return 0;
}
