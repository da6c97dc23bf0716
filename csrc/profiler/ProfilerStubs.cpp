// The legacy profiler's device hooks (torch.autograd.profiler.profile(use_device="vdev")
// without Kineto): an event is the time it was recorded, as device work runs when
// submitted, so the device time of an op is the time between its two events.
#include "profiler/DeviceActivity.h"
#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace vdev::profiler {
namespace {

struct VdevProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(
      c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
      int64_t* cpu_ns) const override {
    if (device != nullptr) {
      *device = current_device();
    }
    const int64_t now = now_ns();
    *event = std::make_shared<int64_t>(now);
    if (cpu_ns != nullptr) {
      *cpu_ns = now;
    }
  }

  // Microseconds, as CUDA's stubs report.
  float elapsed(
      const torch::profiler::impl::ProfilerVoidEventStub* start,
      const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    const int64_t start_ns = *static_cast<const int64_t*>(start->get());
    const int64_t end_ns = *static_cast<const int64_t*>(end->get());
    return static_cast<float>(end_ns - start_ns) / 1000.0f;
  }

  // vdev has no range annotations tool (CUDA's are NVTX's).
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::OptionalDeviceGuard guard;
    for (c10::DeviceIndex device = 0; device < device_count(); ++device) {
      guard.reset_device(make_device(device));
      op(device);
    }
  }

  void synchronize() const override {
    observe_device(current_device());
  }
};

struct RegisterStubs {
  RegisterStubs() {
    static VdevProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

} // namespace
} // namespace vdev::profiler
