// Native vdev kernels: random number ops (they draw from the vdev generator's CPU state).
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/bernoulli_ops.h>
#include <ATen/ops/exponential_ops.h>
#include <ATen/ops/multinomial_ops.h>
#include <ATen/ops/normal_ops.h>
#include <ATen/ops/random_ops.h>
#include <ATen/ops/randperm_ops.h>
#include <ATen/ops/uniform_ops.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernels<
      at::_ops::uniform_,
      at::_ops::normal_,
      at::_ops::bernoulli__Tensor,
      at::_ops::bernoulli__float,
      at::_ops::bernoulli_out,
      at::_ops::random__from,
      at::_ops::random__to,
      at::_ops::random_,
      at::_ops::randperm_generator_out,
      at::_ops::multinomial,
      at::_ops::multinomial_out,
      at::_ops::exponential_>(m);
}

} // namespace vdev
