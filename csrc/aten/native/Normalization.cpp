// Native vdev kernels: layer and batch norm, losses.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/core/Tensor.h>

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
namespace {

std::optional<at::Tensor> as_float(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? std::optional<at::Tensor>(tensor->to(c10::kFloat)) : std::nullopt;
}

at::Tensor as_dtype_of(const at::Tensor& result, const std::optional<at::Tensor>& like) {
  return result.defined() && like.has_value() ? result.to(like->scalar_type()) : result;
}

// As on CUDA (and as torch._refs.native_layer_norm expects of every device but the
// CPU), a half or bfloat16 input's mean and rstd stay in float, its accumulation type.
// The CPU kernel accumulates in float too, then rounds the output once: run on a float
// copy of the input and rounded back, it gives the same output and keeps the statistics.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  using CpuLayerNorm = CpuKernel<at::_ops::native_layer_norm>;
  if (!at::isReducedFloatingType(input.scalar_type())) {
    return CpuLayerNorm::call(input, normalized_shape, weight, bias, eps);
  }
  auto [output, mean, rstd] =
      CpuLayerNorm::call(input.to(c10::kFloat), normalized_shape, as_float(weight), as_float(bias), eps);
  return {output.to(input.scalar_type()), mean, rstd};
}

// The backward of the above: float statistics with a half or bfloat16 input, as on CUDA.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  using CpuLayerNormBackward = CpuKernel<at::_ops::native_layer_norm_backward>;
  if (mean.scalar_type() == input.scalar_type()) {
    return CpuLayerNormBackward::call(
        grad_output, input, normalized_shape, mean, rstd, weight, bias, output_mask);
  }
  auto [grad_input, grad_weight, grad_bias] = CpuLayerNormBackward::call(
      grad_output.to(c10::kFloat), input.to(c10::kFloat), normalized_shape, mean, rstd,
      as_float(weight), as_float(bias), output_mask);
  return {
      grad_input.defined() ? grad_input.to(input.scalar_type()) : grad_input,
      as_dtype_of(grad_weight, weight), as_dtype_of(grad_bias, bias)};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  register_cpu_kernels<
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
