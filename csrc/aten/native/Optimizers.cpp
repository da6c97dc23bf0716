// The kernels torch.optim's foreach and fused implementations call (and the other
// foreach users: clip_grad_norm_/clip_grad_value_, zero_grad, swa_utils), each one
// dispatch onto ATen's CPU kernel over aliases of all the tensors at once, instead
// of ATen's per-tensor composite kernels or the boxed fallback.
#include "aten/CpuKernel.h"

#include <ATen/ops/_foreach_abs_ops.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_clamp_max_ops.h>
#include <ATen/ops/_foreach_clamp_min_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_neg_ops.h>
#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/_foreach_pow_native.h>
#include <ATen/ops/_foreach_pow_ops.h>
#include <ATen/ops/_foreach_reciprocal_ops.h>
#include <ATen/ops/_foreach_sign_ops.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>
#include <ATen/ops/_fused_adagrad_ops.h>
#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <ATen/ops/_fused_sgd_ops.h>

namespace vdev {
namespace {

// Like copy_, a foreach copy may read from another device or the host, so each pair
// goes through vdev's copy rather than a single CPU kernel for one device.
void foreach_copy(at::TensorList self, at::TensorList src, bool non_blocking) {
  TORCH_CHECK(
      self.size() == src.size(), "_foreach_copy_: expected the same number of tensors, got ",
      self.size(), " and ", src.size());
  for (size_t i = 0; i < self.size(); ++i) {
    const_cast<at::Tensor&>(self[i]).copy_(src[i], non_blocking);
  }
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_foreach_copy_", TORCH_FN(foreach_copy));
  // The foreach ops returning new tensors that optimizers call (Adam's sqrt, capturable
  // Adam's pow): ATen's per-tensor loop over vdev tensors, so each result is a vdev op
  // launched on the stream and written in place of its fresh output (the CPU kernel,
  // run on aliases of the whole lists, would run on the calling thread).
  m.impl("_foreach_sqrt", TORCH_FN(at::native::foreach_tensor_sqrt_slow));
  m.impl("_foreach_pow.List", TORCH_FN(at::native::foreach_tensor_pow_list_kernel_slow));
  m.impl("_foreach_pow.Scalar", TORCH_FN(at::native::foreach_tensor_pow_scalar_kernel_slow));
  m.impl("_foreach_pow.ScalarList", TORCH_FN(at::native::foreach_tensor_pow_scalarlist_kernel_slow));
  m.impl("_foreach_pow.ScalarAndTensor", TORCH_FN(at::native::foreach_scalar_pow_list_kernel_slow));
  // Not _foreach_addcmul_/_foreach_addcdiv_.Tensor: their `scalars` is a 1-D CPU
  // tensor, which ATen's composite kernels read on the host as CUDA's do.
  register_cpu_kernels<
      at::_ops::_foreach_add_Scalar,
      at::_ops::_foreach_add_List,
      at::_ops::_foreach_add_ScalarList,
      at::_ops::_foreach_add_Tensor,
      at::_ops::_foreach_sub_Scalar,
      at::_ops::_foreach_sub_List,
      at::_ops::_foreach_sub_ScalarList,
      at::_ops::_foreach_mul_Scalar,
      at::_ops::_foreach_mul_List,
      at::_ops::_foreach_mul_ScalarList,
      at::_ops::_foreach_mul_Tensor,
      at::_ops::_foreach_div_Scalar,
      at::_ops::_foreach_div_List,
      at::_ops::_foreach_div_ScalarList,
      at::_ops::_foreach_div_Tensor,
      at::_ops::_foreach_addcmul_Scalar,
      at::_ops::_foreach_addcmul_ScalarList,
      at::_ops::_foreach_addcdiv_Scalar,
      at::_ops::_foreach_addcdiv_ScalarList,
      at::_ops::_foreach_lerp_Scalar,
      at::_ops::_foreach_lerp_List,
      at::_ops::_foreach_lerp_ScalarList,
      at::_ops::_foreach_maximum_Scalar,
      at::_ops::_foreach_maximum_List,
      at::_ops::_foreach_maximum_ScalarList,
      at::_ops::_foreach_clamp_min_Scalar,
      at::_ops::_foreach_clamp_min_List,
      at::_ops::_foreach_clamp_min_ScalarList,
      at::_ops::_foreach_clamp_max_Scalar,
      at::_ops::_foreach_clamp_max_List,
      at::_ops::_foreach_clamp_max_ScalarList,
      at::_ops::_foreach_abs,
      at::_ops::_foreach_neg,
      at::_ops::_foreach_sign,
      at::_ops::_foreach_reciprocal,
      at::_ops::_foreach_norm_Scalar>(m);
  // Ops that write only their arguments are queued on the stream.
  register_queued_cpu_kernels<
      at::_ops::_foreach_add__Scalar,
      at::_ops::_foreach_add__List,
      at::_ops::_foreach_add__ScalarList,
      at::_ops::_foreach_add__Tensor,
      at::_ops::_foreach_sub__Scalar,
      at::_ops::_foreach_sub__List,
      at::_ops::_foreach_sub__ScalarList,
      at::_ops::_foreach_mul__Scalar,
      at::_ops::_foreach_mul__List,
      at::_ops::_foreach_mul__ScalarList,
      at::_ops::_foreach_mul__Tensor,
      at::_ops::_foreach_div__Scalar,
      at::_ops::_foreach_div__List,
      at::_ops::_foreach_div__ScalarList,
      at::_ops::_foreach_div__Tensor,
      at::_ops::_foreach_addcmul__Scalar,
      at::_ops::_foreach_addcmul__ScalarList,
      at::_ops::_foreach_addcdiv__Scalar,
      at::_ops::_foreach_addcdiv__ScalarList,
      at::_ops::_foreach_lerp__Scalar,
      at::_ops::_foreach_lerp__List,
      at::_ops::_foreach_lerp__ScalarList,
      at::_ops::_foreach_maximum__Scalar,
      at::_ops::_foreach_maximum__List,
      at::_ops::_foreach_maximum__ScalarList,
      at::_ops::_foreach_clamp_min__Scalar,
      at::_ops::_foreach_clamp_min__List,
      at::_ops::_foreach_clamp_min__ScalarList,
      at::_ops::_foreach_clamp_max__Scalar,
      at::_ops::_foreach_clamp_max__List,
      at::_ops::_foreach_clamp_max__ScalarList,
      at::_ops::_foreach_pow__Scalar,
      at::_ops::_foreach_pow__List,
      at::_ops::_foreach_pow__ScalarList,
      at::_ops::_foreach_abs_,
      at::_ops::_foreach_neg_,
      at::_ops::_foreach_sign_,
      at::_ops::_foreach_sqrt_,
      at::_ops::_foreach_reciprocal_,
      at::_ops::_foreach_zero_,
      at::_ops::_fused_adam_,
      at::_ops::_fused_adam__tensor_lr,
      at::_ops::_fused_adamw_,
      at::_ops::_fused_adamw__tensor_lr,
      at::_ops::_fused_sgd_,
      at::_ops::_fused_sgd__tensor_lr,
      at::_ops::_fused_adagrad_,
      at::_ops::_fused_adagrad__tensor_lr>(m);
}

} // namespace vdev
