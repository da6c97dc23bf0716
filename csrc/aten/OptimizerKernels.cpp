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
#include <ATen/ops/_foreach_copy_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_neg_ops.h>
#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/_foreach_pow_ops.h>
#include <ATen/ops/_foreach_reciprocal_ops.h>
#include <ATen/ops/_foreach_sign_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>
#include <ATen/ops/_fused_adagrad_ops.h>
#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <ATen/ops/_fused_sgd_ops.h>

namespace vdev {
namespace {

// The out-of-place and in-place variants of one foreach overload.
#define VDEV_FOREACH(OP, OVERLOAD)                                 \
  register_cpu_kernel<at::_ops::_foreach_##OP##_##OVERLOAD>(m); \
  register_cpu_kernel<at::_ops::_foreach_##OP##__##OVERLOAD>(m);

// The same for the single (default) overload of unary ops.
#define VDEV_FOREACH_UNARY(OP)                          \
  register_cpu_kernel<at::_ops::_foreach_##OP>(m); \
  register_cpu_kernel<at::_ops::_foreach_##OP##_>(m);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  VDEV_FOREACH(add, Scalar)
  VDEV_FOREACH(add, List)
  VDEV_FOREACH(add, ScalarList)
  VDEV_FOREACH(add, Tensor)
  VDEV_FOREACH(sub, Scalar)
  VDEV_FOREACH(sub, List)
  VDEV_FOREACH(sub, ScalarList)
  VDEV_FOREACH(mul, Scalar)
  VDEV_FOREACH(mul, List)
  VDEV_FOREACH(mul, ScalarList)
  VDEV_FOREACH(mul, Tensor)
  VDEV_FOREACH(div, Scalar)
  VDEV_FOREACH(div, List)
  VDEV_FOREACH(div, ScalarList)
  VDEV_FOREACH(div, Tensor)
  // Not the .Tensor overloads: their `scalars` is a 1-D CPU tensor, which ATen's
  // composite kernels read on the host as CUDA's do.
  VDEV_FOREACH(addcmul, Scalar)
  VDEV_FOREACH(addcmul, ScalarList)
  VDEV_FOREACH(addcdiv, Scalar)
  VDEV_FOREACH(addcdiv, ScalarList)
  VDEV_FOREACH(lerp, Scalar)
  VDEV_FOREACH(lerp, List)
  VDEV_FOREACH(lerp, ScalarList)
  VDEV_FOREACH(maximum, Scalar)
  VDEV_FOREACH(maximum, List)
  VDEV_FOREACH(maximum, ScalarList)
  VDEV_FOREACH(clamp_min, Scalar)
  VDEV_FOREACH(clamp_min, List)
  VDEV_FOREACH(clamp_min, ScalarList)
  VDEV_FOREACH(clamp_max, Scalar)
  VDEV_FOREACH(clamp_max, List)
  VDEV_FOREACH(clamp_max, ScalarList)
  VDEV_FOREACH(pow, Scalar)
  VDEV_FOREACH(pow, List)
  VDEV_FOREACH(pow, ScalarList)
  register_cpu_kernel<at::_ops::_foreach_pow_ScalarAndTensor>(m);
  VDEV_FOREACH_UNARY(abs)
  VDEV_FOREACH_UNARY(neg)
  VDEV_FOREACH_UNARY(sign)
  VDEV_FOREACH_UNARY(sqrt)
  VDEV_FOREACH_UNARY(reciprocal)
  register_cpu_kernel<at::_ops::_foreach_norm_Scalar>(m);
  register_cpu_kernel<at::_ops::_foreach_zero_>(m);
  // Like copy_, a foreach copy may read from another device or the host.
  register_cpu_kernel<at::_ops::_foreach_copy_, DeviceRule::kAnyDevice>(m);

  register_cpu_kernel<at::_ops::_fused_adam_>(m);
  register_cpu_kernel<at::_ops::_fused_adam__tensor_lr>(m);
  register_cpu_kernel<at::_ops::_fused_adamw_>(m);
  register_cpu_kernel<at::_ops::_fused_adamw__tensor_lr>(m);
  register_cpu_kernel<at::_ops::_fused_sgd_>(m);
  register_cpu_kernel<at::_ops::_fused_sgd__tensor_lr>(m);
  register_cpu_kernel<at::_ops::_fused_adagrad_>(m);
  register_cpu_kernel<at::_ops::_fused_adagrad__tensor_lr>(m);
}

} // namespace
} // namespace vdev
