// nansum of complex tensors - and nanmean, its composite - which CUDA computes and no
// CPU kernel does, in any width. As CUDA's kernel, an element with a NaN part (real or
// imaginary) counts as zero, and complex32 accumulates in complex64. Other dtypes run
// the CPU kernel (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/isnan.h>
#include <ATen/ops/nansum_ops.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>

namespace vdev {
namespace {

// `self` with its NaN elements zeroed, in the dtype a sum accumulates it in.
at::Tensor without_nans(const at::Tensor& self) {
  const at::Tensor accumulated =
      self.scalar_type() == c10::ScalarType::ComplexHalf ? self.to(c10::ScalarType::ComplexFloat) : self;
  return at::where(at::isnan(accumulated), at::scalar_tensor(0, accumulated.options()), accumulated);
}

at::Tensor nansum(
    const at::Tensor& self,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<c10::ScalarType> dtype) {
  if (!self.is_complex()) {
    return CpuKernel<at::_ops::nansum>::call(self, dim, keepdim, dtype);
  }
  const c10::ScalarType result_type = dtype.value_or(self.scalar_type());
  const c10::ScalarType accumulate_type =
      result_type == c10::ScalarType::ComplexHalf ? c10::ScalarType::ComplexFloat : result_type;
  return at::sum(without_nans(self), dim, keepdim, accumulate_type).to(result_type);
}

at::Tensor& nansum_out(
    const at::Tensor& self,
    at::OptionalIntArrayRef dim,
    bool keepdim,
    std::optional<c10::ScalarType> dtype,
    at::Tensor& out) {
  if (!self.is_complex()) {
    return CpuKernel<at::_ops::nansum_out>::call(self, dim, keepdim, dtype, out);
  }
  return at::sum_out(out, without_nans(self), dim, keepdim, dtype);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nansum", TORCH_FN(nansum));
  m.impl("nansum.out", TORCH_FN(nansum_out));
}

} // namespace vdev
