// Native vdev kernels: layer and batch norm, losses.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/native/Normalization.h"

#include "aten/CpuKernel.h"
#include "aten/Tensor.h"

#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <ATen/ops/batch_norm_update_stats_ops.h>
#include <ATen/ops/binary_cross_entropy_ops.h>
#include <ATen/ops/binary_cross_entropy_backward_ops.h>
#include <ATen/ops/empty.h>
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

void fill_eval_statistics(
    const at::Tensor& running_mean, const at::Tensor& running_var, double eps, const at::Tensor& save_mean,
    const at::Tensor& save_invstd) {
  save_mean.copy_(running_mean);
  save_invstd.copy_(running_var).add_(eps).rsqrt_();
}

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

// --- batch norm. In evaluation without running statistics CUDA refuses; the CPU kernels
// read the missing statistics and crash the process.
void check_eval_statistics(bool training, bool has_running_mean, bool has_running_var) {
  TORCH_CHECK(
      training || (has_running_mean && has_running_var),
      "batch_norm: running_mean and running_var must be defined in evaluation mode");
}

bool defined(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && tensor->defined();
}

// In training native_batch_norm and batch_norm_update_stats update the running statistics
// in place, which their schemas do not mark written: a lazy clone's memory they share
// copy-on-write is copied first, as a CPU write to it does, so the other clone keeps its values.
void end_copy_on_write_of_running_statistics(
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var) {
  for (const auto* statistic : {&running_mean, &running_var}) {
    if (defined(*statistic)) {
      end_copy_on_write(**statistic);
    }
  }
}

// The eval statistics (fill_eval_statistics) of a functional batch norm. A launched
// native_batch_norm has filled them; the CPU kernel on the calling thread (strided
// arguments, _native_batch_norm_legit, blocking launches) returns them empty.
std::tuple<at::Tensor, at::Tensor, at::Tensor> with_eval_statistics(
    std::tuple<at::Tensor, at::Tensor, at::Tensor> result, const at::Tensor& input, const at::Tensor& running_mean,
    const at::Tensor& running_var, double eps) {
  auto& [output, save_mean, save_invstd] = result;
  const int64_t channels = input.size(1);
  if (save_mean.numel() != channels) {
    const auto options = input.options().dtype(at::toOpMathType(input.scalar_type()));
    save_mean = at::empty({channels}, options);
    save_invstd = at::empty({channels}, options);
    fill_eval_statistics(running_mean, running_var, eps, save_mean, save_invstd);
  }
  return result;
}

// An out= batch norm's eval statistics: CUDA resizes save_mean and save_invstd to one
// per channel and fills them; the CPU kernel leaves them as they were.
void fill_eval_statistics_out(
    const at::Tensor& input, const at::Tensor& running_mean, const at::Tensor& running_var, double eps,
    at::Tensor& save_mean, at::Tensor& save_invstd) {
  at::native::resize_output(save_mean, {input.size(1)});
  at::native::resize_output(save_invstd, {input.size(1)});
  fill_eval_statistics(running_mean, running_var, eps, save_mean, save_invstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  check_eval_statistics(training, defined(running_mean), defined(running_var));
  if (training) {
    end_copy_on_write_of_running_statistics(running_mean, running_var);
  }
  auto result =
      CpuKernel<at::_ops::native_batch_norm>::call(input, weight, bias, running_mean, running_var, training, momentum, eps);
  return training ? result : with_eval_statistics(std::move(result), input, *running_mean, *running_var, eps);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  check_eval_statistics(training, defined(running_mean), defined(running_var));
  if (training) {
    end_copy_on_write_of_running_statistics(running_mean, running_var);
  }
  CpuKernel<at::_ops::native_batch_norm_out>::call(
      input, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
  if (!training) {
    fill_eval_statistics_out(input, *running_mean, *running_var, eps, save_mean, save_invstd);
  }
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_update_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, double momentum) {
  end_copy_on_write_of_running_statistics(running_mean, running_var);
  return CpuKernel<at::_ops::batch_norm_update_stats>::call(input, running_mean, running_var, momentum);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
  check_eval_statistics(training, running_mean.defined(), running_var.defined());
  auto result = CpuKernel<at::_ops::_native_batch_norm_legit>::call(
      input, weight, bias, running_mean, running_var, training, momentum, eps);
  return training ? result : with_eval_statistics(std::move(result), input, running_mean, running_var, eps);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_legit_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd) {
  check_eval_statistics(training, running_mean.defined(), running_var.defined());
  CpuKernel<at::_ops::_native_batch_norm_legit_out>::call(
      input, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
  if (!training) {
    fill_eval_statistics_out(input, running_mean, running_var, eps, save_mean, save_invstd);
  }
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
  check_eval_statistics(training, false, false);
  return CpuKernel<at::_ops::_native_batch_norm_legit_no_stats>::call(input, weight, bias, training, momentum, eps);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_legit_no_stats_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  check_eval_statistics(training, false, false);
  return CpuKernel<at::_ops::_native_batch_norm_legit_no_stats_out>::call(
      input, weight, bias, training, momentum, eps, out, save_mean, save_invstd);
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
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("native_batch_norm.out", TORCH_FN(native_batch_norm_out));
  m.impl("batch_norm_update_stats", TORCH_FN(batch_norm_update_stats));
  m.impl("_native_batch_norm_legit", TORCH_FN(native_batch_norm_legit));
  m.impl("_native_batch_norm_legit.out", TORCH_FN(native_batch_norm_legit_out));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(native_batch_norm_legit_no_stats));
  m.impl("_native_batch_norm_legit.no_stats_out", TORCH_FN(native_batch_norm_legit_no_stats_out));
  register_cpu_kernels<
      at::_ops::native_batch_norm_backward,
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
