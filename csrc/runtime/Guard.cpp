#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace vdev {
namespace {

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kDeviceType;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    check_type(device);
    return make_device(vdev::exchange_device(device.index()));
  }

  c10::Device getDevice() const override {
    return make_device(current_device());
  }

  void setDevice(c10::Device device) const override {
    check_type(device);
    vdev::set_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < device_count()) {
      vdev::set_device(device.index());
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return current_stream(device.index());
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(device.index());
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool is_high_priority) const override {
    return stream_from_pool(device.index(), is_high_priority ? -1 : 0);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return stream_from_pool(device.index(), priority);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return vdev::exchange_stream(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  void record(
      void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ", static_cast<int>(device_index),
        " does not match recording stream's device index ",
        static_cast<int>(stream.device_index()), ".");
    record_event(event, stream, flag);
  }

  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {
    // Recorded work is already complete, so a stream never has to wait.
  }

  bool queryEvent(void* event) const override {
    return event_completed(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    destroy_event(event);
  }

  void synchronizeEvent(void* /*event*/) const override {}

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/)
      const override {
    return elapsed_milliseconds(start, end);
  }

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream& /*stream*/) const override {}

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_device_index(device_index);
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream)
      const override {
    caching_allocator().recordStream(data_ptr, stream);
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(resolve_device_index(device.index()));
    // Every dtype runs, since kernels are ATen's CPU kernels.
    return c10::DeviceCapability();
  }

 private:
  static void check_type(c10::Device device) {
    TORCH_CHECK(
        device.type() == kDeviceType, "Expected a ", kBackendName, " device, got ", device);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

} // namespace
} // namespace vdev
