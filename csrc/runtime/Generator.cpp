#include "runtime/Generator.h"

#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/CallOnce.h>

#include <deque>

namespace vdev {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : GeneratorImpl(device, at::detail::createCPUGenerator()) {}

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device, at::Generator cpu)
    : c10::GeneratorImpl(make_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(std::move(cpu)) {}

at::Generator GeneratorImpl::cpu_generator() const {
  std::lock_guard<std::mutex> lock(holder_mutex_);
  return cpu_;
}

at::Generator GeneratorImpl::cpu_generator_for_launch(c10::DeviceIndex device) {
  const uint64_t bit = uint64_t{1} << device;
  if ((launch_devices_.load(std::memory_order_relaxed) & bit) == 0) {
    launch_devices_.fetch_or(bit);
  }
  return cpu_generator();
}

void GeneratorImpl::wait_for_draws() const {
  // Nothing is queued in a process that has not initialised vdev (a forked child
  // seeding its generators included).
  const uint64_t devices = launch_devices_.load();
  if (devices == 0 || !is_initialized()) {
    return;
  }
  for (c10::DeviceIndex device = 0; device < 64; ++device) {
    if ((devices >> device) & 1) {
      synchronize_device(device);
    }
  }
}

std::unique_lock<std::mutex> GeneratorImpl::access_state() const {
  wait_for_draws();
  // The kernels lock the CPU generator's mutex: taken after waiting for them.
  return std::unique_lock<std::mutex>(cpu_generator().mutex());
}

void GeneratorImpl::set_current_seed(uint64_t seed) {
  auto lock = access_state();
  cpu_generator().set_current_seed(seed);
}

void GeneratorImpl::set_offset(uint64_t offset) {
  auto lock = access_state();
  cpu_generator().set_offset(offset);
}

uint64_t GeneratorImpl::get_offset() const {
  auto lock = access_state();
  return cpu_generator().get_offset();
}

uint64_t GeneratorImpl::current_seed() const {
  auto lock = access_state();
  return cpu_generator().current_seed();
}

uint64_t GeneratorImpl::seed() {
  auto lock = access_state();
  return cpu_generator().seed();
}

void GeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  auto lock = access_state();
  cpu_generator().unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  auto lock = access_state();
  return cpu_generator().unsafeGetGeneratorImpl()->get_state();
}

void GeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<GeneratorImpl*>(state.get());
  TORCH_CHECK(
      other != nullptr, "graphsafe_set_state: expected a ", kBackendName, " generator's state, got one of ",
      state->device());
  wait_for_draws();
  other->wait_for_draws();
  at::Generator shared = other->cpu_generator();
  std::lock_guard<std::mutex> lock(holder_mutex_);
  cpu_ = std::move(shared);
  // Kernels drawing from the shared state are waited for through either generator.
  launch_devices_.fetch_or(other->launch_devices_.load());
}

c10::intrusive_ptr<c10::GeneratorImpl> GeneratorImpl::graphsafe_get_state() const {
  wait_for_draws();
  auto state = c10::intrusive_ptr<GeneratorImpl>::unsafe_steal_from_new(
      new GeneratorImpl(device().index(), cpu_generator()));
  state->launch_devices_.store(launch_devices_.load());
  return state;
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  auto lock = access_state();
  return new GeneratorImpl(device().index(), cpu_generator().clone());
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

GeneratorImpl& vdev_generator(const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  if (!generator.has_value() || !generator->defined()) {
    return *static_cast<GeneratorImpl*>(default_generator(device).unsafeGetGeneratorImpl());
  }
  TORCH_CHECK(
      generator->device().type() == kDeviceType, "Expected a '", kBackendName,
      "' device type for generator but found '", generator->device().type(), "'");
  return *static_cast<GeneratorImpl*>(generator->unsafeGetGeneratorImpl());
}

at::Generator cpu_generator_for(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  return vdev_generator(generator, device).cpu_generator();
}

at::Generator cpu_generator_for_launch(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device) {
  return vdev_generator(generator, device).cpu_generator_for_launch(device);
}

} // namespace vdev
