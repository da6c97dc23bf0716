// Convolutions run ATen's CPU convolution (its algorithm choice included) on aliases.
// ATen's device-generic convolution sends backends other than CPU and CUDA to
// convolution_overrideable, which has no implementation; taking over the three entry
// points below keeps every convolution (conv*d, conv_transpose*d, their backward and
// double backward, which all reach these) on the CPU path.
#include "aten/CpuKernel.h"

#include <ATen/ops/_convolution_ops.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>

namespace vdev {
namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernel<at::_ops::convolution>(m);
  register_cpu_kernel<at::_ops::_convolution>(m);
  register_cpu_kernel<at::_ops::convolution_backward>(m);
}

} // namespace
} // namespace vdev
