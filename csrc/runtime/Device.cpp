#include "runtime/Device.h"

#include "aten/Fallback.h"

#include <vdev_runtime.h>

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <string>

namespace vdev {
namespace {

c10::DeviceIndex read_device_count() noexcept {
  int count = 0;
  vdrtError_t status = vdrtGetDeviceCount(&count);
  if (status == vdrtErrorInvalidConfiguration) {
    // deviceCount() must not throw (DeviceGuardImplInterface contract): the runtime
    // falls back to its default count, and the problem is a warning.
    TORCH_WARN(vdrtGetLastErrorMessage());
    vdrtGetLastError();
  }
  return static_cast<c10::DeviceIndex>(count);
}

thread_local c10::DeviceIndex tls_current_device = 0;

std::atomic<bool> initialized{false};
std::atomic<bool> in_bad_fork{false};

void mark_child_bad() {
  in_bad_fork = true;
}

} // namespace

void lazy_init() {
  if (C10_LIKELY(initialized.load(std::memory_order_relaxed) && !in_bad_fork.load(std::memory_order_relaxed))) {
    return;
  }
  TORCH_CHECK(
      !in_bad_fork,
      "Cannot re-initialize ", kBackendName, " in forked subprocess. To use ", kBackendName,
      " with multiprocessing, you must use the 'spawn' start method");
  static std::once_flag register_fork_handler;
  std::call_once(register_fork_handler, [] {
    pthread_atfork(nullptr, nullptr, &mark_child_bad);
  });
  // For C++ apps; torch_vdev's import has registered them already.
  register_direct_fallbacks();
  initialized = true;
}

bool is_initialized() {
  return initialized && !in_bad_fork;
}

bool is_in_bad_fork() {
  return in_bad_fork;
}

c10::DeviceIndex device_count() noexcept {
  static const c10::DeviceIndex count = read_device_count();
  return count;
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      "Invalid device index ", static_cast<int>(index), " for ", kBackendName,
      ": there ", device_count() == 1 ? "is " : "are ", static_cast<int>(device_count()),
      " ", kBackendName, " device(s), valid indices are 0..",
      static_cast<int>(device_count()) - 1, " (set VDEV_DEVICE_COUNT to change the count)");
}

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_current_device = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  check_device_index(index);
  c10::DeviceIndex previous = tls_current_device;
  tls_current_device = index;
  return previous;
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index == -1) {
    return tls_current_device;
  }
  check_device_index(index);
  return index;
}

} // namespace vdev

namespace vdev {
namespace {
// Registered at load time so C++ apps that link libtorch_vdev get "vdev" devices too.
struct RegisterBackendName {
  RegisterBackendName() {
    c10::register_privateuse1_backend(kBackendName);
  }
} register_backend_name;
} // namespace
} // namespace vdev
