#include "runtime/Generator.h"

#include "runtime/Device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/CallOnce.h>

#include <deque>
#include <mutex>

namespace vdev {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : GeneratorImpl(device, at::detail::createCPUGenerator()) {}

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device, at::Generator cpu)
    : c10::GeneratorImpl(make_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(std::move(cpu)) {}

void GeneratorImpl::set_current_seed(uint64_t seed) {
  cpu_.set_current_seed(seed);
}

void GeneratorImpl::set_offset(uint64_t offset) {
  cpu_.set_offset(offset);
}

uint64_t GeneratorImpl::get_offset() const {
  return cpu_.get_offset();
}

uint64_t GeneratorImpl::current_seed() const {
  return cpu_.current_seed();
}

uint64_t GeneratorImpl::seed() {
  return cpu_.seed();
}

void GeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  return new GeneratorImpl(device().index(), cpu_.clone());
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  check_device_index(device);
  static std::deque<c10::once_flag> once(device_count());
  static std::deque<at::Generator> generators(device_count());
  c10::call_once(once[device], [device] { generators[device] = make_generator(device); });
  return generators[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  return at::make_generator<GeneratorImpl>(resolve_device_index(device));
}

at::Generator cpu_generator_for(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return static_cast<GeneratorImpl*>(default_generator(device).unsafeGetGeneratorImpl())
        ->cpu_generator();
  }
  TORCH_CHECK(
      generator->device().type() == kDeviceType, "Expected a '", kBackendName,
      "' device type for generator but found '", generator->device().type(), "'");
  return static_cast<GeneratorImpl*>(generator->unsafeGetGeneratorImpl())->cpu_generator();
}

} // namespace vdev
