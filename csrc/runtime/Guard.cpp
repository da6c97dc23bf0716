#include "profiler/DeviceActivity.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace vdev {
namespace {

// Stream and event operations initialise vdev (lazy_init), so that, as with CUDA, they
// fail in a process forked after the parent initialised it.
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
    lazy_init();
    return stream_from_pool(
        device.index(), is_high_priority ? kHighestStreamPriority : kLowestStreamPriority);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    lazy_init();
    return stream_from_pool(device.index(), priority);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    lazy_init();
    return vdev::exchange_stream(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  void record(
      void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    lazy_init();
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ", static_cast<int>(device_index),
        " does not match recording stream's device index ",
        static_cast<int>(stream.device_index()), ".");
    profiler::ActivityScope activity("vdevEventRecord", stream);
    record_event(event, stream, flag);
  }

  void block(void* event, const c10::Stream& stream) const override {
    lazy_init();
    profiler::ActivityScope activity("vdevStreamWaitEvent", stream);
    wait_event(event, stream);
  }

  bool queryEvent(void* event) const override {
    lazy_init();
    return query_event(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    destroy_event(event);
  }

  void synchronizeEvent(void* event) const override {
    lazy_init();
    profiler::ActivityScope activity(
        profiler::ActivityKind::kRuntime, "vdevEventSynchronize", current_device());
    synchronize_event(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/)
      const override {
    lazy_init();
    return elapsed_milliseconds(start, end);
  }

  bool queryStream(const c10::Stream& stream) const override {
    lazy_init();
    return query_stream(stream);
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    lazy_init();
    return is_stream_capturing(stream);
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    lazy_init();
    profiler::ActivityScope activity("vdevStreamSynchronize", stream);
    synchronize_stream(stream);
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    lazy_init();
    synchronize_device(resolve_device_index(device_index));
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream)
      const override {
    caching_allocator().recordStream(data_ptr, stream);
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(resolve_device_index(device.index()));
    // Kernels are ATen's CPU kernels, so a dtype is supported if vdev can allocate it
    // and copy it to and from the host.
    c10::DeviceCapability capability;
    auto& types = capability.capability_data.supported_scalar_types;
    // Quantized tensors need a quantizer, which vdev's factories do not make.
    types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = 0;
    types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
    // No copy kernel moves sub-byte integers, on any device.
    types.has_UInt1 = types.has_UInt2 = types.has_UInt3 = types.has_UInt4 = 0;
    types.has_UInt5 = types.has_UInt6 = types.has_UInt7 = 0;
    types.has_Int1 = types.has_Int2 = types.has_Int3 = types.has_Int4 = 0;
    types.has_Int5 = types.has_Int6 = types.has_Int7 = 0;
    return capability;
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
