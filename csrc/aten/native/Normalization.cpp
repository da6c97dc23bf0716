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

// nll_loss's kernels read the class weights as the input's dtype: CUDA checks that on the
// host before it launches, and so does vdev, where the CPU kernel's check would otherwise
// raise on the stream, at the next synchronization (the meta kernel checks shapes only).
void check_nll_loss_weight(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(
      !weight.has_value() || !weight->defined() || weight->scalar_type() == self.scalar_type(),
      "expected scalar type ", self.scalar_type(), " but found ", weight->scalar_type());
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index) {
  check_nll_loss_weight(self, weight);
  return CpuKernel<at::_ops::nll_loss_forward>::call(self, target, weight, reduction, std::move(ignore_index));
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_output(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  check_nll_loss_weight(self, weight);
  return CpuKernel<at::_ops::nll_loss_forward_output>::call(
      self, target, weight, reduction, std::move(ignore_index), output, total_weight);
}

at::Tensor nll_loss_backward(
    const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
    const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
    const at::Tensor& total_weight) {
  check_nll_loss_weight(self, weight);
  return CpuKernel<at::_ops::nll_loss_backward>::call(
      grad_output, self, target, weight, reduction, std::move(ignore_index), total_weight);
}

at::Tensor& nll_loss_backward_grad_input(
    const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
    const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
    const at::Tensor& total_weight, at::Tensor& grad_input) {
  check_nll_loss_weight(self, weight);
  return CpuKernel<at::_ops::nll_loss_backward_grad_input>::call(
      grad_output, self, target, weight, reduction, std::move(ignore_index), total_weight, grad_input);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss_forward.output", TORCH_FN(nll_loss_forward_output));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
  m.impl("nll_loss_backward.grad_input", TORCH_FN(nll_loss_backward_grad_input));
  register_cpu_kernels<
      at::_ops::native_batch_norm,
      at::_ops::native_batch_norm_out,
      at::_ops::native_batch_norm_backward,
      at::_ops::_native_batch_norm_legit,
      at::_ops::_native_batch_norm_legit_no_stats,
      at::_ops::_native_batch_norm_legit_out,
      at::_ops::_native_batch_norm_legit_no_stats_out,
      at::_ops::batch_norm_update_stats,
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
