// addcmul with CUDA's rule for CPU scalar operands. TensorIterator lets a 0-dim CPU
// tensor join device tensors in an elementwise op, and CPU's addcmul kernel reads it
// anywhere; CUDA's reads one only as tensor2, and refuses it as self or tensor1
// (addcmul_cuda_kernel in PointwiseOpsKernel.cu) with the errors raised here. Everything
// else runs the CPU kernel (CpuKernel.h).
#include "aten/CpuKernel.h"
#include "aten/Tensor.h"

#include <ATen/ops/addcmul_ops.h>

namespace vdev {
namespace {

void check_cpu_scalars(const at::Tensor& self, const at::Tensor& tensor1) {
  TORCH_CHECK(
      !is_cpu_scalar(self),
      "CPU Scalar support for self argument is not supported when calling addcmul on ",
      kBackendName,
      " tensors.");
  TORCH_CHECK(
      !is_cpu_scalar(tensor1),
      "CPU Scalar support for tensor1 argument is not supported when calling addcmul on ",
      kBackendName,
      " tensors. However, CPU Scalar support for tensor2 is supported, please swap your tensor1 and tensor2 terms.");
}

at::Tensor addcmul(const at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2, const at::Scalar& value) {
  check_cpu_scalars(self, tensor1);
  return CpuKernel<at::_ops::addcmul>::call(self, tensor1, tensor2, value);
}

at::Tensor& addcmul_out(
    const at::Tensor& self,
    const at::Tensor& tensor1,
    const at::Tensor& tensor2,
    const at::Scalar& value,
    at::Tensor& out) {
  check_cpu_scalars(self, tensor1);
  return CpuKernel<at::_ops::addcmul_out>::call(self, tensor1, tensor2, value, out);
}

at::Tensor& addcmul_(at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2, const at::Scalar& value) {
  check_cpu_scalars(self, tensor1);
  return CpuKernel<at::_ops::addcmul_>::call(self, tensor1, tensor2, value);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addcmul", TORCH_FN(addcmul));
  m.impl("addcmul.out", TORCH_FN(addcmul_out));
  m.impl("addcmul_", TORCH_FN(addcmul_));
}

} // namespace vdev
