#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"
#include "runtime/HostAllocator.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>

namespace vdev {
namespace {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  // Device memory needs no context: a device is ready as soon as it exists.
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < device_count();
  }

  void init() const override {
    TORCH_CHECK(device_count() > 0, "No ", kBackendName, " devices (VDEV_DEVICE_COUNT=0)");
    lazy_init();
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(resolve_device_index(device_index));
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return make_generator(device_index);
  }

  c10::Device getDeviceFromPtr(void* data) const override {
    return device_of_pointer(data);
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned_pointer(data);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_host_allocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_device_storage(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} register_hooks;

} // namespace
} // namespace vdev
