#pragma once

#include <c10/core/Device.h>

namespace vdev {

// The one C++ definition of the backend's name; everything else derives from it.
inline constexpr char kBackendName[] = "vdev";
inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;

inline c10::Device make_device(c10::DeviceIndex index) {
  return c10::Device(kDeviceType, index);
}

// The export macro for symbols of libtorch_vdev that C++ apps may use.
#define VDEV_API __attribute__((visibility("default")))

} // namespace vdev
