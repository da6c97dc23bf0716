// Names vdev devices through c10 alone: parsing "vdev:1" and finding the device guard
// only work if libtorch_vdev was loaded and registered the backend.
#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <iostream>

int main() {
  c10::Device device("vdev:1");
  std::cout << "device=" << device << "\n";
  std::cout << "device_count="
            << static_cast<int>(c10::impl::getDeviceGuardImpl(device.type())->deviceCount())
            << "\n";
  return 0;
}
