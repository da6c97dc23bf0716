// Native vdev kernels: layer and batch norm, losses.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <ATen/ops/batch_norm_update_stats_ops.h>
#include <ATen/ops/binary_cross_entropy_ops.h>
#include <ATen/ops/binary_cross_entropy_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/nll_loss2d_backward_ops.h>
#include <ATen/ops/nll_loss2d_forward_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/smooth_l1_loss_ops.h>
#include <ATen/ops/smooth_l1_loss_backward_ops.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernels<
      at::_ops::native_layer_norm,
      at::_ops::native_layer_norm_backward,
      at::_ops::native_batch_norm,
      at::_ops::native_batch_norm_out,
      at::_ops::native_batch_norm_backward,
      at::_ops::_native_batch_norm_legit,
      at::_ops::_native_batch_norm_legit_no_stats,
      at::_ops::_native_batch_norm_legit_out,
      at::_ops::_native_batch_norm_legit_no_stats_out,
      at::_ops::batch_norm_update_stats,
      at::_ops::nll_loss_forward,
      at::_ops::nll_loss_forward_output,
      at::_ops::nll_loss_backward,
      at::_ops::nll_loss_backward_grad_input,
      at::_ops::nll_loss2d_forward,
      at::_ops::nll_loss2d_forward_output,
      at::_ops::nll_loss2d_backward,
      at::_ops::nll_loss2d_backward_grad_input,
      at::_ops::mse_loss,
      at::_ops::mse_loss_out,
      at::_ops::mse_loss_backward,
      at::_ops::mse_loss_backward_grad_input,
      at::_ops::binary_cross_entropy,
      at::_ops::binary_cross_entropy_out,
      at::_ops::binary_cross_entropy_backward,
      at::_ops::binary_cross_entropy_backward_grad_input,
      at::_ops::smooth_l1_loss,
      at::_ops::smooth_l1_loss_out,
      at::_ops::smooth_l1_loss_backward_grad_input>(m);
}

} // namespace vdev
