// Native vdev kernels: pooling and upsampling backward (forward: Upsample.cpp).
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/_adaptive_avg_pool2d_ops.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward_ops.h>
#include <ATen/ops/adaptive_max_pool2d_ops.h>
#include <ATen/ops/adaptive_max_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/upsample_bilinear2d_backward_ops.h>
#include <ATen/ops/upsample_nearest2d_backward_ops.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernels<
      at::_ops::max_pool2d_with_indices,
      at::_ops::max_pool2d_with_indices_out,
      at::_ops::max_pool2d_with_indices_backward,
      at::_ops::max_pool2d_with_indices_backward_grad_input,
      at::_ops::avg_pool2d,
      at::_ops::avg_pool2d_out,
      at::_ops::avg_pool2d_backward,
      at::_ops::avg_pool2d_backward_grad_input,
      at::_ops::_adaptive_avg_pool2d,
      at::_ops::_adaptive_avg_pool2d_backward,
      at::_ops::adaptive_max_pool2d,
      at::_ops::adaptive_max_pool2d_out,
      at::_ops::adaptive_max_pool2d_backward,
      at::_ops::adaptive_max_pool2d_backward_grad_input,
      at::_ops::upsample_nearest2d_backward,
      at::_ops::upsample_nearest2d_backward_grad_input,
      at::_ops::upsample_bilinear2d_backward,
      at::_ops::upsample_bilinear2d_backward_grad_input>(m);
}

} // namespace vdev
