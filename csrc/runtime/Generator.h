#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Generator.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace vdev {

// A vdev generator keeps its state in a CPU generator that it shares with the CPU
// kernels run on its behalf, so a seeded vdev run draws exactly what CPU draws.
//
// Random kernels launched on a stream draw when they run, on the stream's worker, under
// the CPU generator's mutex (as ATen's CPU kernels lock it). So the host's accesses to
// the state (seeding, get_state/set_state, the offset, graph-safe states, clone) first
// wait for the work queued on the streams of the devices whose kernels draw from it:
// the host then sees and sets the state the kernels launched so far leave, and a seeded
// sequence of launches (or of graph replays) repeats. As with CUDA, where draws are
// ordered by launch, one generator drawn from on two streams at once gives an order
// that depends on timing.
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
  // As CUDA's: a generator sharing this one's state (its CPU generator), and taking
  // another's to share.
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  // The CPU generator holding this generator's state, for a kernel that runs now on
  // the calling thread.
  at::Generator cpu_generator() const;
  // The CPU generator a kernel launched on `device`'s streams draws from when it runs
  // (it keeps it alive); the host's accesses then wait for that device's streams.
  at::Generator cpu_generator_for_launch(c10::DeviceIndex device);

 private:
  GeneratorImpl(c10::DeviceIndex device, at::Generator cpu);
  GeneratorImpl* clone_impl() const override;

  // Waits for the work queued on the devices whose launched kernels draw from this
  // generator.
  void wait_for_draws() const;
  // wait_for_draws, then locks the CPU generator (whose mutex the kernels take).
  std::unique_lock<std::mutex> access_state() const;

  // Guards which CPU generator holds the state (graphsafe_set_state swaps it).
  mutable std::mutex holder_mutex_;
  at::Generator cpu_;
  // Bit d: kernels launched on device d draw from this generator.
  std::atomic<uint64_t> launch_devices_{0};
};

VDEV_API const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);

// The vdev generator for `generator` (a vdev generator, or none: the default generator
// of `device`). Generators of other devices are refused, as CUDA refuses them.
GeneratorImpl& vdev_generator(const std::optional<at::Generator>& generator, c10::DeviceIndex device);

// The CPU generator to hand a CPU kernel that runs now, on the calling thread.
at::Generator cpu_generator_for(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device);

// The CPU generator a kernel launched on `device`'s current stream draws from when it
// runs (see GeneratorImpl).
at::Generator cpu_generator_for_launch(
    const std::optional<at::Generator>& generator, c10::DeviceIndex device);

} // namespace vdev
