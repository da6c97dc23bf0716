#include "inductor/GeneratedKernel.h"

#include "profiler/DeviceActivity.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

namespace vdev {
namespace {

// Device activities and operators keep names of static storage: kernel names are
// interned once.
const char* interned(const char* name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  return names->emplace(name).first->c_str();
}

} // namespace
} // namespace vdev

const char* torch_vdev_generated_kernel_name(const char* name) {
  return vdev::interned(name);
}

const char* torch_vdev_launch_generated_kernel(
    const char* name, int device, void (*run)(void*), void* arguments, void (*destroy)(void*)) {
  std::shared_ptr<void> owned(arguments, destroy);
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    std::optional<at::RecordFunction> launching_operator;
    if (auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION)) {
      launching_operator.emplace(std::move(*callbacks));
      launching_operator->before(std::string_view(name));
    }
    vdev::launch(vdev::current_stream(index), name, [name, index, run, owned = std::move(owned)] {
      vdev::profiler::ActivityScope activity(vdev::profiler::ActivityKind::kKernel, name, index);
      run(owned.get());
    });
    return nullptr;
  } catch (const c10::Error& error) {
    thread_local std::string message;
    message = error.what_without_backtrace();
    return message.c_str();
  }
}
