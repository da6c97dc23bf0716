// Native vdev kernels of random ops. They are launched on the current stream as other
// kernels are (Launch.h): the host checks the arguments, sizes the outputs and resolves
// the generator (the user's vdev generator, or the device's default), and the kernel -
// ATen's CPU kernel on CPU aliases - draws from that generator's CPU state when it runs
// on the stream's worker (Generator.h). Seeded results so equal the CPU's, and a
// captured graph draws fresh numbers at each replay.
#include "aten/native/Random.h"

#include "aten/CpuKernel.h"
#include "runtime/Generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/bernoulli_ops.h>
#include <ATen/ops/cauchy_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exponential_ops.h>
#include <ATen/ops/full.h>
#include <ATen/ops/geometric_ops.h>
#include <ATen/ops/log_normal_ops.h>
#include <ATen/ops/multinomial_ops.h>
#include <ATen/ops/normal_ops.h>
#include <ATen/ops/random_ops.h>
#include <ATen/ops/randperm_ops.h>
#include <ATen/ops/uniform_ops.h>

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace vdev {

at::Tensor random_stand_in(const at::Tensor& tensor) {
  return at::empty({tensor.numel() == 0 ? 0 : 1}, tensor.options().device(c10::kCPU));
}

const at::Generator& scratch_generator() {
  thread_local const at::Generator generator = at::detail::createCPUGenerator();
  return generator;
}

bool launchable_random_output(const at::Tensor& tensor) {
  return tensor.layout() == c10::kStrided && !tensor.is_nested() &&
      at::has_internal_overlap(tensor) != at::MemOverlap::Yes;
}

namespace {

// A parameter as the CPU kernel's dry run (random_stand_in) takes it.
template <class T>
T stand_in_parameter(T value) {
  return value;
}
// Bernoulli's probabilities: valid ones, of the tensor's dtype.
at::Tensor stand_in_parameter(const at::Tensor& probabilities) {
  return at::full({probabilities.numel() == 0 ? 0 : 1}, 0.5, probabilities.options().device(c10::kCPU));
}

// A parameter as the queued kernel keeps it: host tensors are staged at the launch, as
// CUDA stages host memory.
template <class T>
T kept_parameter(LaunchAliases& /*aliases*/, T value) {
  return value;
}
at::Tensor kept_parameter(LaunchAliases& aliases, const at::Tensor& tensor) {
  return is_vdev(tensor) ? aliases.alias(tensor) : tensor.clone();
}

// Device discovery over a parameter: bernoulli's probabilities may be on the host, as
// with CUDA.
template <class T>
void note_parameter(CpuRedispatch& /*checks*/, const T& /*value*/) {}
void note_parameter(CpuRedispatch& checks, const at::Tensor& tensor) {
  checks.note_tensor(tensor, CpuRedispatch::CpuTensors::Allowed);
}

// The kernel of an in-place random op Op(self, params..., generator), launched.
template <class Op, class... Params>
at::Tensor& launch_in_place(at::Tensor& self, const std::optional<at::Generator>& generator, const Params&... params) {
  lazy_init();
  if (!launchable_random_output(self)) {
    // The CPU kernel, on the calling thread, refuses self's overlapping elements.
    return CpuKernel<Op>::call(self, params..., generator);
  }
  c10::DeviceIndex device = -1;
  {
    CpuRedispatch checks(Op::name);
    checks.note_tensor(self, CpuRedispatch::CpuTensors::Rejected);
    (note_parameter(checks, params), ...);
    device = checks.device();
  }
  // The CPU kernel's own checks (parameter ranges, the dtypes it draws), raised at the
  // call as CUDA raises them on the host.
  {
    at::Tensor stand_in = random_stand_in(self);
    Op::call(stand_in, stand_in_parameter(params)..., scratch_generator());
  }
  LaunchAliases aliases;
  at::Tensor self_alias = aliases.alias(self);
  launch(
      current_stream(device), Op::name,
      [self = std::move(self_alias), kept = std::make_tuple(kept_parameter(aliases, params)...),
       cpu_generator = cpu_generator_for_launch(generator, device), device]() {
        profiler::ActivityScope activity(profiler::ActivityKind::kKernel, Op::name, device);
        at::Tensor written = self;
        std::apply(
            [&](const auto&... param) {
              Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), written, param..., cpu_generator);
            },
            kept);
      });
  return self;
}

template <class Op, class Schema = typename Op::schema>
struct InPlaceRandom;

template <class Op>
struct InPlaceRandom<Op, at::Tensor&(at::Tensor&, std::optional<at::Generator>)> {
  static at::Tensor& call(at::Tensor& self, std::optional<at::Generator> generator) {
    return launch_in_place<Op>(self, generator);
  }
};

template <class Op, class A>
struct InPlaceRandom<Op, at::Tensor&(at::Tensor&, A, std::optional<at::Generator>)> {
  static at::Tensor& call(at::Tensor& self, A a, std::optional<at::Generator> generator) {
    return launch_in_place<Op>(self, generator, a);
  }
};

template <class Op, class A, class B>
struct InPlaceRandom<Op, at::Tensor&(at::Tensor&, A, B, std::optional<at::Generator>)> {
  static at::Tensor& call(at::Tensor& self, A a, B b, std::optional<at::Generator> generator) {
    return launch_in_place<Op>(self, generator, a, b);
  }
};

at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator) {
  // The CPU kernel expands p to self's shape (raising its error here, at the call).
  if (!at::is_expandable_to(p.sizes(), self.sizes())) {
    at::empty(p.sizes(), p.options().device(c10::kMeta)).expand(self.sizes());
  }
  if (p.layout() != c10::kStrided || (!is_vdev(p) && p.device().type() != c10::kCPU)) {
    return CpuKernel<at::_ops::bernoulli__Tensor>::call(self, p, generator);
  }
  return launch_in_place<at::_ops::bernoulli__Tensor>(self, generator, p);
}

// normal(mean, std): a fresh contiguous tensor of mean's shape, as the CPU kernel makes
// (its out= kernel then draws into it and adds mean). The overloads with a tensor std
// run on the calling thread: they read std on the host (all of it >= 0), as CUDA does.
at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> generator) {
  lazy_init();
  if (mean.layout() != c10::kStrided || mean.is_nested()) {
    return CpuKernel<at::_ops::normal_Tensor_float>::call(mean, std, generator);
  }
  c10::DeviceIndex device = -1;
  {
    CpuRedispatch checks(at::_ops::normal_Tensor_float::name);
    checks.note_tensor(mean);
    device = checks.device();
  }
  at::_ops::normal_Tensor_float::call(random_stand_in(mean), std, scratch_generator());
  at::Tensor output = at::empty(mean.sizes(), mean.options());
  LaunchAliases aliases;
  launch(
      current_stream(device), at::_ops::normal_Tensor_float::name,
      [mean = aliases.alias(mean), output = aliases.alias(output), std,
       cpu_generator = cpu_generator_for_launch(generator, device), device]() {
        profiler::ActivityScope activity(profiler::ActivityKind::kKernel, at::_ops::normal_Tensor_float::name, device);
        at::Tensor written = output;
        at::_ops::normal_Tensor_float_out::redispatch(
            c10::DispatchKeySet(c10::DispatchKey::CPU), mean, std, cpu_generator, written);
      });
  return output;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", TORCH_FN(InPlaceRandom<at::_ops::uniform_>::call));
  m.impl("normal_", TORCH_FN(InPlaceRandom<at::_ops::normal_>::call));
  m.impl("log_normal_", TORCH_FN(InPlaceRandom<at::_ops::log_normal_>::call));
  m.impl("cauchy_", TORCH_FN(InPlaceRandom<at::_ops::cauchy_>::call));
  m.impl("exponential_", TORCH_FN(InPlaceRandom<at::_ops::exponential_>::call));
  m.impl("geometric_", TORCH_FN(InPlaceRandom<at::_ops::geometric_>::call));
  m.impl("bernoulli_.float", TORCH_FN(InPlaceRandom<at::_ops::bernoulli__float>::call));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
  m.impl("random_.from", TORCH_FN(InPlaceRandom<at::_ops::random__from>::call));
  m.impl("random_.to", TORCH_FN(InPlaceRandom<at::_ops::random__to>::call));
  m.impl("random_", TORCH_FN(InPlaceRandom<at::_ops::random_>::call));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  // On the calling thread: their host-side checks and output sizes are not written yet.
  register_cpu_kernels<
      at::_ops::bernoulli_out,
      at::_ops::randperm_generator_out,
      at::_ops::multinomial,
      at::_ops::multinomial_out>(m);
}

} // namespace vdev
