#include "inductor/GeneratedKernel.h"

#include <mutex>
#include <string>
#include <unordered_set>

namespace vdev {
namespace {

// Device activities and operators keep names of static storage: kernel names are
// interned once, while profiling.
const char* interned(const char* name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  return names->emplace(name).first->c_str();
}

} // namespace

GeneratedKernelScope::GeneratedKernelScope(const char* name, c10::DeviceIndex device) {
  auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
  const bool recording = profiler::recording();
  if (C10_LIKELY(!callbacks && !recording)) {
    return;
  }
  name = interned(name);
  // The operator first: starting it gives the device activity its correlation id.
  if (callbacks) {
    operator_.emplace(std::move(*callbacks));
    operator_->before(std::string_view(name));
  }
  if (recording) {
    activity_.emplace(profiler::ActivityKind::kKernel, name, device);
  }
}

} // namespace vdev

void* torch_vdev_generated_kernel_begin(const char* name, int device) {
  auto scope = std::make_unique<vdev::GeneratedKernelScope>(name, static_cast<c10::DeviceIndex>(device));
  return scope->profiled() ? scope.release() : nullptr;
}

void torch_vdev_generated_kernel_end(void* scope) {
  delete static_cast<vdev::GeneratedKernelScope*>(scope);
}
