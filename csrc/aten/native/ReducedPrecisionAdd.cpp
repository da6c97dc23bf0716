// add and sub of float16 and bfloat16 tensors as CUDA computes them. CUDA's kernel
// (AddFunctor in opmath) computes self + alpha * other in float and rounds once, and reads
// a CPU scalar operand (a Python number) as a float from its own value; CPU's rounds
// alpha * other, and the scalar, to the tensor's dtype first, so 60000 + 2 * -60000 or
// 60000 - 70000 overflow to -inf in float16 on CPU and give -60000 and -10000 on CUDA.
// vdev computes those cases - a reduced-precision result with alpha other than 1 or a
// CPU scalar operand of another dtype - in float as CUDA does; every other call, and
// every call CPU's kernel would refuse, runs the CPU kernel (CpuKernel.h).
#include "aten/CpuKernel.h"
#include "aten/Tensor.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/add.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sub_ops.h>

namespace vdev {
namespace {

// The dtype CUDA computes self + alpha * other in, if it computes it in float where CPU does not.
std::optional<c10::ScalarType> computed_in_float(
    const at::Tensor& self,
    const at::Tensor& other,
    const at::Scalar& alpha) {
  if (!at::isReducedFloatingType(self.scalar_type()) && !at::isReducedFloatingType(other.scalar_type())) {
    return std::nullopt;
  }
  const bool scalar_operand = (is_cpu_scalar(self) && self.scalar_type() != other.scalar_type()) ||
      (is_cpu_scalar(other) && other.scalar_type() != self.scalar_type());
  if (alpha.equal(1) && !scalar_operand) {
    return std::nullopt;
  }
  const c10::ScalarType common = at::result_type(self, other);
  if (!at::isReducedFloatingType(common)) {
    return std::nullopt;
  }
  return common;
}

// An operand as CUDA's kernel reads it: a CPU scalar by its own value, a tensor in the common dtype.
at::Tensor in_float(const at::Tensor& operand, c10::ScalarType common) {
  if (is_cpu_scalar(operand)) {
    return operand.to(c10::ScalarType::Float);
  }
  return operand.to(common).to(c10::ScalarType::Float);
}

at::Tensor add_in_float(
    const at::Tensor& self,
    const at::Tensor& other,
    const at::Scalar& alpha,
    c10::ScalarType common) {
  return at::add(in_float(self, common), in_float(other, common), alpha).to(common);
}

// Writes self + alpha * other, computed in float, into out (self for the in-place ops),
// with the overlap checks TensorIterator makes of an output.
at::Tensor& write_add_in_float(
    const at::Tensor& self,
    const at::Tensor& other,
    const at::Scalar& alpha,
    c10::ScalarType common,
    at::Tensor& out) {
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, self);
  at::assert_no_partial_overlap(out, other);
  const at::Tensor result = add_in_float(self, other, alpha, common);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

// Whether the float computation can write out; if not, the CPU kernel runs and raises as it does.
bool can_write(const std::optional<c10::ScalarType>& common, const at::Tensor& out) {
  return common && at::canCast(*common, out.scalar_type());
}

// Whether the float computation can write self in place; if not, as above.
bool can_write_in_place(const std::optional<c10::ScalarType>& common, const at::Tensor& self, const at::Tensor& other) {
  return common && *common == self.scalar_type() && at::is_expandable_to(other.sizes(), self.sizes());
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (auto common = computed_in_float(self, other, alpha)) {
    return add_in_float(self, other, alpha, *common);
  }
  return CpuKernel<at::_ops::add_Tensor>::call(self, other, alpha);
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out) {
  if (auto common = computed_in_float(self, other, alpha); can_write(common, out)) {
    return write_add_in_float(self, other, alpha, *common, out);
  }
  return CpuKernel<at::_ops::add_out>::call(self, other, alpha, out);
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (auto common = computed_in_float(self, other, alpha); can_write_in_place(common, self, other)) {
    return write_add_in_float(self, other, alpha, *common, self);
  }
  return CpuKernel<at::_ops::add__Tensor>::call(self, other, alpha);
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  if (auto common = computed_in_float(self, other, alpha)) {
    return add_in_float(self, other, -alpha, *common);
  }
  return CpuKernel<at::_ops::sub_Tensor>::call(self, other, alpha);
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out) {
  at::native::sub_check(self, other);
  if (auto common = computed_in_float(self, other, alpha); can_write(common, out)) {
    return write_add_in_float(self, other, -alpha, *common, out);
  }
  return CpuKernel<at::_ops::sub_out>::call(self, other, alpha, out);
}

at::Tensor& sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  if (auto common = computed_in_float(self, other, alpha); can_write_in_place(common, self, other)) {
    return write_add_in_float(self, other, -alpha, *common, self);
  }
  return CpuKernel<at::_ops::sub__Tensor>::call(self, other, alpha);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("add_.Tensor", TORCH_FN(add_));
  m.impl("sub.Tensor", TORCH_FN(sub));
  m.impl("sub.out", TORCH_FN(sub_out));
  m.impl("sub_.Tensor", TORCH_FN(sub_));
}

} // namespace vdev
