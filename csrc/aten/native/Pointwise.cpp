// Native vdev kernels: elementwise unary and binary ops, comparisons, where, activations and their backward, softmax.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
// logaddexp is left to the boxed fallback on purpose: benchmarks/run.py times the
// fallback's per-call cost on it, a small op no training step needs.
#include "aten/CpuKernel.h"

#include <ATen/native/Gelu.h>

#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/atan2_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/conj_physical_ops.h>
#include <ATen/ops/copysign_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/erfinv_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/exp2_ops.h>
#include <ATen/ops/expm1_ops.h>
#include <ATen/ops/floor_ops.h>
#include <ATen/ops/fmod_ops.h>
#include <ATen/ops/frac_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/hardsigmoid_backward_ops.h>
#include <ATen/ops/hardswish_ops.h>
#include <ATen/ops/hardswish_backward_ops.h>
#include <ATen/ops/hardtanh_ops.h>
#include <ATen/ops/hardtanh_backward_ops.h>
#include <ATen/ops/hypot_ops.h>
#include <ATen/ops/isnan_ops.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/isposinf_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/leaky_relu_ops.h>
#include <ATen/ops/leaky_relu_backward_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/log10_ops.h>
#include <ATen/ops/log1p_ops.h>
#include <ATen/ops/log2_ops.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/logical_or_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mish_ops.h>
#include <ATen/ops/mish_backward_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/nan_to_num_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/remainder_ops.h>
#include <ATen/ops/round_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sgn_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/softplus_ops.h>
#include <ATen/ops/softplus_backward_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/threshold_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_ops.h>
#include <ATen/ops/trunc_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/xlogy_ops.h>
#include <ATen/ops/zero_ops.h>

namespace vdev {
namespace {

// gelu's meta function takes any `approximate`; CPU's kernel refuses a bad one only when
// it runs, which on vdev's stream is at the next synchronization, in whatever came next.
// CUDA's refuses it on the host at the call, as vdev does here.
at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  at::native::get_gelutype_enum(approximate);
  return CpuKernel<at::_ops::gelu>::call(self, approximate);
}

at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
  at::native::get_gelutype_enum(approximate);
  return CpuKernel<at::_ops::gelu_out>::call(self, approximate, out);
}

at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
  at::native::get_gelutype_enum(approximate);
  return CpuKernel<at::_ops::gelu_>::call(self, approximate);
}

at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::string_view approximate) {
  at::native::get_gelutype_enum(approximate);
  return CpuKernel<at::_ops::gelu_backward>::call(grad_output, self, approximate);
}

at::Tensor& gelu_backward_grad_input(
    const at::Tensor& grad_output, const at::Tensor& self, c10::string_view approximate, at::Tensor& grad_input) {
  at::native::get_gelutype_enum(approximate);
  return CpuKernel<at::_ops::gelu_backward_grad_input>::call(grad_output, self, approximate, grad_input);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("gelu", TORCH_FN(gelu));
  m.impl("gelu.out", TORCH_FN(gelu_out));
  m.impl("gelu_", TORCH_FN(gelu_));
  m.impl("gelu_backward", TORCH_FN(gelu_backward));
  m.impl("gelu_backward.grad_input", TORCH_FN(gelu_backward_grad_input));
  register_cpu_kernels<
      at::_ops::conj_physical_out,
      at::_ops::conj_physical_,
      at::_ops::mul_Tensor,
      at::_ops::mul_out,
      at::_ops::mul__Tensor,
      at::_ops::div_Tensor,
      at::_ops::div_Tensor_mode,
      at::_ops::div_out,
      at::_ops::div_out_mode,
      at::_ops::div__Tensor,
      at::_ops::div__Tensor_mode,
      at::_ops::neg,
      at::_ops::neg_out,
      at::_ops::neg_,
      at::_ops::exp,
      at::_ops::exp_out,
      at::_ops::exp_,
      at::_ops::exp2,
      at::_ops::exp2_out,
      at::_ops::exp2_,
      at::_ops::log,
      at::_ops::log_out,
      at::_ops::log_,
      at::_ops::log2,
      at::_ops::log2_out,
      at::_ops::log2_,
      at::_ops::log10,
      at::_ops::log10_out,
      at::_ops::log10_,
      at::_ops::log1p,
      at::_ops::log1p_out,
      at::_ops::log1p_,
      at::_ops::expm1,
      at::_ops::expm1_out,
      at::_ops::expm1_,
      at::_ops::sqrt,
      at::_ops::sqrt_out,
      at::_ops::sqrt_,
      at::_ops::rsqrt,
      at::_ops::rsqrt_out,
      at::_ops::rsqrt_,
      at::_ops::tanh,
      at::_ops::tanh_out,
      at::_ops::tanh_,
      at::_ops::tanh_backward,
      at::_ops::tanh_backward_grad_input,
      at::_ops::sigmoid,
      at::_ops::sigmoid_out,
      at::_ops::sigmoid_,
      at::_ops::sigmoid_backward,
      at::_ops::sigmoid_backward_grad_input,
      at::_ops::abs,
      at::_ops::abs_out,
      at::_ops::pow_Tensor_Tensor,
      at::_ops::pow_Tensor_Scalar,
      at::_ops::pow_Scalar,
      at::_ops::pow_Tensor_Tensor_out,
      at::_ops::pow_Scalar_out,
      at::_ops::pow_Tensor_Scalar_out,
      at::_ops::pow__Scalar,
      at::_ops::pow__Tensor,
      at::_ops::relu,
      at::_ops::relu_,
      at::_ops::threshold,
      at::_ops::threshold_out,
      at::_ops::threshold_,
      at::_ops::threshold_backward,
      at::_ops::threshold_backward_grad_input,
      at::_ops::silu,
      at::_ops::silu_out,
      at::_ops::silu_,
      at::_ops::silu_backward,
      at::_ops::silu_backward_grad_input,
      at::_ops::hardtanh,
      at::_ops::hardtanh_out,
      at::_ops::hardtanh_,
      at::_ops::hardtanh_backward,
      at::_ops::hardtanh_backward_grad_input,
      at::_ops::leaky_relu,
      at::_ops::leaky_relu_out,
      at::_ops::leaky_relu_,
      at::_ops::leaky_relu_backward,
      at::_ops::leaky_relu_backward_grad_input,
      at::_ops::elu,
      at::_ops::elu_out,
      at::_ops::elu_,
      at::_ops::elu_backward,
      at::_ops::elu_backward_grad_input,
      at::_ops::softplus,
      at::_ops::softplus_out,
      at::_ops::softplus_backward,
      at::_ops::softplus_backward_grad_input,
      at::_ops::mish,
      at::_ops::mish_out,
      at::_ops::mish_,
      at::_ops::mish_backward,
      at::_ops::hardswish,
      at::_ops::hardswish_out,
      at::_ops::hardswish_,
      at::_ops::hardswish_backward,
      at::_ops::hardsigmoid,
      at::_ops::hardsigmoid_out,
      at::_ops::hardsigmoid_,
      at::_ops::hardsigmoid_backward,
      at::_ops::hardsigmoid_backward_grad_input,
      at::_ops::eq_Tensor,
      at::_ops::eq_Scalar,
      at::_ops::eq_Scalar_out,
      at::_ops::eq_Tensor_out,
      at::_ops::eq__Scalar,
      at::_ops::eq__Tensor,
      at::_ops::ne_Tensor,
      at::_ops::ne_Scalar,
      at::_ops::ne_Scalar_out,
      at::_ops::ne_Tensor_out,
      at::_ops::ne__Scalar,
      at::_ops::ne__Tensor,
      at::_ops::lt_Tensor,
      at::_ops::lt_Scalar,
      at::_ops::lt_Scalar_out,
      at::_ops::lt_Tensor_out,
      at::_ops::lt__Scalar,
      at::_ops::lt__Tensor,
      at::_ops::le_Tensor,
      at::_ops::le_Scalar,
      at::_ops::le_Scalar_out,
      at::_ops::le_Tensor_out,
      at::_ops::le__Scalar,
      at::_ops::le__Tensor,
      at::_ops::gt_Tensor,
      at::_ops::gt_Scalar,
      at::_ops::gt_Scalar_out,
      at::_ops::gt_Tensor_out,
      at::_ops::gt__Scalar,
      at::_ops::gt__Tensor,
      at::_ops::ge_Tensor,
      at::_ops::ge_Scalar,
      at::_ops::ge_Scalar_out,
      at::_ops::ge_Tensor_out,
      at::_ops::ge__Scalar,
      at::_ops::ge__Tensor,
      at::_ops::where_self,
      at::_ops::where_self_out,
      at::_ops::clamp,
      at::_ops::clamp_Tensor,
      at::_ops::clamp_out,
      at::_ops::clamp_Tensor_out,
      at::_ops::clamp_,
      at::_ops::clamp__Tensor,
      at::_ops::clamp_min,
      at::_ops::clamp_min_Tensor,
      at::_ops::clamp_min_out,
      at::_ops::clamp_min_Tensor_out,
      at::_ops::clamp_min_,
      at::_ops::clamp_min__Tensor,
      at::_ops::clamp_max,
      at::_ops::clamp_max_Tensor,
      at::_ops::clamp_max_out,
      at::_ops::clamp_max_Tensor_out,
      at::_ops::clamp_max_,
      at::_ops::clamp_max__Tensor,
      at::_ops::maximum,
      at::_ops::maximum_out,
      at::_ops::minimum,
      at::_ops::minimum_out,
      at::_ops::masked_fill__Scalar,
      at::_ops::masked_fill__Tensor,
      at::_ops::addcdiv,
      at::_ops::addcdiv_out,
      at::_ops::addcdiv_,
      at::_ops::lerp_Scalar,
      at::_ops::lerp_Tensor,
      at::_ops::lerp_Scalar_out,
      at::_ops::lerp_Tensor_out,
      at::_ops::lerp__Scalar,
      at::_ops::lerp__Tensor,
      at::_ops::sign,
      at::_ops::sign_out,
      at::_ops::sign_,
      at::_ops::sgn,
      at::_ops::sgn_out,
      at::_ops::sgn_,
      at::_ops::reciprocal,
      at::_ops::reciprocal_out,
      at::_ops::reciprocal_,
      at::_ops::sin,
      at::_ops::sin_out,
      at::_ops::sin_,
      at::_ops::cos,
      at::_ops::cos_out,
      at::_ops::cos_,
      at::_ops::erf,
      at::_ops::erf_out,
      at::_ops::erf_,
      at::_ops::erfinv,
      at::_ops::erfinv_out,
      at::_ops::erfinv_,
      at::_ops::floor,
      at::_ops::floor_out,
      at::_ops::floor_,
      at::_ops::ceil,
      at::_ops::ceil_out,
      at::_ops::ceil_,
      at::_ops::round,
      at::_ops::round_decimals,
      at::_ops::round_out,
      at::_ops::round_decimals_out,
      at::_ops::round_,
      at::_ops::round__decimals,
      at::_ops::trunc,
      at::_ops::trunc_out,
      at::_ops::trunc_,
      at::_ops::frac,
      at::_ops::frac_out,
      at::_ops::frac_,
      at::_ops::fmod_Tensor,
      at::_ops::fmod_Tensor_out,
      at::_ops::fmod__Tensor,
      at::_ops::remainder_Tensor,
      at::_ops::remainder_Scalar_Tensor,
      at::_ops::remainder_Tensor_out,
      at::_ops::remainder__Tensor,
      at::_ops::logical_not_out,
      at::_ops::logical_and,
      at::_ops::logical_and_out,
      at::_ops::logical_or_out,
      at::_ops::bitwise_and_Tensor,
      at::_ops::bitwise_and_Tensor_out,
      at::_ops::bitwise_and__Tensor,
      at::_ops::bitwise_or_Tensor,
      at::_ops::bitwise_or_Tensor_out,
      at::_ops::bitwise_or__Tensor,
      at::_ops::bitwise_not,
      at::_ops::bitwise_not_out,
      at::_ops::bitwise_not_,
      at::_ops::bitwise_xor_Tensor,
      at::_ops::bitwise_xor_Tensor_out,
      at::_ops::bitwise_xor__Tensor,
      at::_ops::isnan,
      at::_ops::atan2,
      at::_ops::atan2_out,
      at::_ops::atan2_,
      at::_ops::hypot,
      at::_ops::hypot_out,
      at::_ops::hypot_,
      at::_ops::copysign_Tensor,
      at::_ops::copysign_out,
      at::_ops::copysign__Tensor,
      at::_ops::nan_to_num_out,
      at::_ops::xlogy_Tensor,
      at::_ops::xlogy_OutTensor,
      at::_ops::xlogy__Tensor,
      at::_ops::zero_,
      at::_ops::tril,
      at::_ops::tril_out,
      at::_ops::tril_,
      at::_ops::triu,
      at::_ops::triu_out,
      at::_ops::triu_,
      at::_ops::isneginf,
      at::_ops::isneginf_out,
      at::_ops::isposinf,
      at::_ops::isposinf_out,
      at::_ops::_log_softmax,
      at::_ops::_log_softmax_out,
      at::_ops::_softmax,
      at::_ops::_softmax_out,
      at::_ops::_log_softmax_backward_data,
      at::_ops::_log_softmax_backward_data_out,
      at::_ops::_softmax_backward_data,
      at::_ops::_softmax_backward_data_out>(m);
}

} // namespace vdev
