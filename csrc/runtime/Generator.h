#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Generator.h>

namespace vdev {

// A vdev generator keeps its state in a CPU generator that it shares with the CPU
// kernels run on its behalf, so a seeded vdev run draws exactly what CPU draws.
class GeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit GeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator holding this generator's state.
  const at::Generator& cpu_generator() const {
    return cpu_;
  }

 private:
  GeneratorImpl(c10::DeviceIndex device, at::Generator cpu);
  GeneratorImpl* clone_impl() const override;

  at::Generator cpu_;
};

VDEV_API const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);

// The CPU generator to hand a CPU kernel for `generator` (a vdev generator, or
// none: the default generator of `device`). Generators of other devices are refused,
// as CUDA refuses them.
at::Generator cpu_generator_for(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device);

} // namespace vdev
