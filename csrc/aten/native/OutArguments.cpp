// out= arguments as CUDA's kernels treat them, for the ops whose CPU kernels do not
// (TestCommon's test_out/test_out_warning, which the OpInfos expect to fail on CPU only):
// - log_sigmoid_forward's CPU kernel resizes a non-empty out of another shape without
//   the warning every other resize of an out= argument gives; CUDA's kernel resizes it
//   through TensorIterator, which warns;
// - avg_pool3d's CPU kernel writes a noncontiguous out as if it were contiguous (a wrong
//   result); CUDA's respects its strides;
// - linalg_eig's CPU kernel restrides empty outs to column-major in place; CUDA's computes
//   into host temporaries and copies them into the outs (resize_output, copy_), so outs
//   keep their strides and resized ones are row-major, as the meta kernel's out= gives.
// Everything else runs the CPU kernel (CpuKernel.h).
#include "aten/CpuKernel.h"
#include "aten/Tensor.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/avg_pool3d_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_eig_ops.h>
#include <ATen/ops/log_sigmoid_forward_ops.h>

namespace vdev {
namespace {

// What CUDA's kernels do with an out= argument they could not compute into.
void copy_into_out(at::Tensor& out, const at::Tensor& computed) {
  at::native::resize_output(out, computed.sizes());
  out.copy_(computed);
}

std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(
    const at::Tensor& self, at::Tensor& output, at::Tensor& buffer) {
  // A host out is refused by the CPU kernel's call below, before anything changes.
  if (is_vdev(output)) {
    at::native::resize_output(output, self.sizes());
  }
  return CpuKernel<at::_ops::log_sigmoid_forward_output>::call(self, output, buffer);
}

at::Tensor& avg_pool3d_out(
    const at::Tensor& self,
    c10::IntArrayRef kernel_size,
    c10::IntArrayRef stride,
    c10::IntArrayRef padding,
    bool ceil_mode,
    bool count_include_pad,
    std::optional<int64_t> divisor_override,
    at::Tensor& out) {
  if (out.is_contiguous(self.suggest_memory_format())) {
    return CpuKernel<at::_ops::avg_pool3d_out>::call(
        self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out);
  }
  // The kernel writes a fresh out of out's dtype and device, so its checks of out= still
  // apply, and the values land in out's own layout.
  at::Tensor dense = at::empty({0}, out.options());
  CpuKernel<at::_ops::avg_pool3d_out>::call(
      self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, dense);
  copy_into_out(out, dense);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&> linalg_eig_out(const at::Tensor& self, at::Tensor& values, at::Tensor& vectors) {
  // Fresh outs of the given dtypes and devices, so the kernel's checks of them still apply.
  at::Tensor computed_values = at::empty({0}, values.options());
  at::Tensor computed_vectors = at::empty({0}, vectors.options());
  CpuKernel<at::_ops::linalg_eig_out>::call(self, computed_values, computed_vectors);
  copy_into_out(values, computed_values);
  copy_into_out(vectors, computed_vectors);
  return {values, vectors};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
  m.impl("avg_pool3d.out", TORCH_FN(avg_pool3d_out));
  m.impl("linalg_eig.out", TORCH_FN(linalg_eig_out));
}

} // namespace vdev
