// Native vdev kernels: reductions and scans.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <c10/core/DefaultDtype.h>

#include <ATen/ops/all_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/aminmax_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/mode_ops.h>
#include <ATen/ops/norm_ops.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/std_ops.h>
#include <ATen/ops/std_mean_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/var_ops.h>
#include <ATen/ops/var_mean_ops.h>

namespace vdev {
namespace {

// CPU's mean.out sums into out's dtype and divides it in place, which an integral out
// refuses; the meta function does not check it, so the launched kernel would raise at the
// next synchronization, in whatever came next. CUDA's kernel refuses it at the call, as
// vdev does here, with CPU's error.
at::Tensor& mean_out(
    const at::Tensor& self,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<at::ScalarType> dtype,
    at::Tensor& out) {
  TORCH_CHECK(
      dtype.has_value() || !c10::isIntegralType(out.scalar_type(), /*includeBool=*/true),
      "result type ", c10::typeMetaToScalarType(c10::get_default_dtype()),
      " can't be cast to the desired output type ", out.scalar_type());
  return CpuKernel<at::_ops::mean_out>::call(self, dim, keepdim, dtype, out);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mean.out", TORCH_FN(mean_out));
  register_cpu_kernels<
      at::_ops::sum_dim_IntList,
      at::_ops::mode,
      at::_ops::mode_values,
      at::_ops::sum_IntList_out,
      at::_ops::mean_dim,
      at::_ops::amax,
      at::_ops::amax_out,
      at::_ops::amin,
      at::_ops::amin_out,
      at::_ops::max,
      at::_ops::max_dim,
      at::_ops::max_dim_max,
      at::_ops::max_unary_out,
      at::_ops::min,
      at::_ops::min_dim,
      at::_ops::min_dim_min,
      at::_ops::min_unary_out,
      at::_ops::var_correction,
      at::_ops::var_correction_out,
      at::_ops::std_correction,
      at::_ops::std_correction_out,
      at::_ops::var_mean_correction,
      at::_ops::std_mean_correction,
      at::_ops::prod,
      at::_ops::prod_dim_int,
      at::_ops::prod_int_out,
      at::_ops::argmax,
      at::_ops::argmax_out,
      at::_ops::argmin,
      at::_ops::argmin_out,
      at::_ops::norm_ScalarOpt_dim,
      at::_ops::norm_ScalarOpt_dim_dtype,
      at::_ops::norm_dtype_out,
      at::_ops::norm_out,
      at::_ops::linalg_vector_norm,
      at::_ops::linalg_vector_norm_out,
      at::_ops::all,
      at::_ops::all_dim,
      at::_ops::all_dims,
      at::_ops::all_out,
      at::_ops::all_dims_out,
      at::_ops::all_all_out,
      at::_ops::any,
      at::_ops::any_dim,
      at::_ops::any_dims,
      at::_ops::any_out,
      at::_ops::any_dims_out,
      at::_ops::any_all_out,
      at::_ops::cumsum,
      at::_ops::cumsum_out,
      at::_ops::cumsum_,
      at::_ops::cumprod,
      at::_ops::cumprod_out,
      at::_ops::cumprod_,
      at::_ops::aminmax,
      at::_ops::aminmax_out>(m);
}

} // namespace vdev
