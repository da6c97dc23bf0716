// Native vdev kernels: pooling and upsampling backward (forward: Upsample.cpp).
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h);
// max pooling refuses the integer dtypes the CPU's kernels take and CUDA's do not
// (DilatedMaxPool{2,3}d.cu dispatch on floating types, Half and BFloat16) at the call
// (CudaDtypes.h). max_pool1d reaches max_pool2d_with_indices on every device but the CPU.
#include "aten/CpuKernel.h"
#include "aten/native/CudaDtypes.h"

#include <ATen/ops/_adaptive_avg_pool2d_ops.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward_ops.h>
#include <ATen/ops/adaptive_max_pool2d_ops.h>
#include <ATen/ops/adaptive_max_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool3d_with_indices_ops.h>
#include <ATen/ops/max_pool3d_with_indices_backward_ops.h>
#include <ATen/ops/max_unpool2d_ops.h>
#include <ATen/ops/upsample_bilinear2d_backward_ops.h>
#include <ATen/ops/upsample_nearest2d_backward_ops.h>

namespace vdev {
namespace {

// The names CUDA's dispatch errors report: its backward of 2-d pooling reuses the forward's.
constexpr char kMaxPool2d[] = "max_pool2d_with_indices_out_cuda_frame";
constexpr char kMaxPool3d[] = "max_pool3d_with_indices_out_frame";
constexpr char kMaxPool3dBackward[] = "max_pool3d_with_indices_backward_out_frame";

// Forward over `self` (argument 0), backward over `self` (argument 1, after grad_output).
template <const char* forward_kernel, const char* backward_kernel, class Forward, class ForwardOut, class Backward, class BackwardOut>
void register_max_pool(torch::Library& library) {
  register_cuda_dtypes_kernel<Forward, cuda_floating_and_half_types, forward_kernel>(library);
  register_cuda_dtypes_kernel<ForwardOut, cuda_floating_and_half_types, forward_kernel>(library);
  register_cuda_dtypes_kernel<Backward, cuda_floating_and_half_types, backward_kernel, 1>(library);
  register_cuda_dtypes_kernel<BackwardOut, cuda_floating_and_half_types, backward_kernel, 1>(library);
}

// CUDA's kernel (MaxUnpooling.cu) and the meta kernel (the decomposition) unpool into a
// contiguous result whatever the input's layout; the CPU's follows a channels-last input.
// Contiguous inputs make the CPU kernel's result contiguous too, as CUDA's kernel makes them.
at::Tensor max_unpool2d_contiguous(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size) {
  return CpuKernel<at::_ops::max_unpool2d>::call(self.contiguous(), indices.contiguous(), output_size);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_max_pool<
      kMaxPool2d,
      kMaxPool2d,
      at::_ops::max_pool2d_with_indices,
      at::_ops::max_pool2d_with_indices_out,
      at::_ops::max_pool2d_with_indices_backward,
      at::_ops::max_pool2d_with_indices_backward_grad_input>(m);
  register_max_pool<
      kMaxPool3d,
      kMaxPool3dBackward,
      at::_ops::max_pool3d_with_indices,
      at::_ops::max_pool3d_with_indices_out,
      at::_ops::max_pool3d_with_indices_backward,
      at::_ops::max_pool3d_with_indices_backward_grad_input>(m);
  m.impl("max_unpool2d", TORCH_FN(max_unpool2d_contiguous));
  register_cpu_kernels<
      at::_ops::avg_pool2d,
      at::_ops::avg_pool2d_out,
      at::_ops::avg_pool2d_backward,
      at::_ops::avg_pool2d_backward_grad_input,
      at::_ops::_adaptive_avg_pool2d,
      at::_ops::_adaptive_avg_pool2d_backward,
      at::_ops::adaptive_max_pool2d,
      at::_ops::adaptive_max_pool2d_out,
      at::_ops::adaptive_max_pool2d_backward,
      at::_ops::adaptive_max_pool2d_backward_grad_input,
      at::_ops::upsample_nearest2d_backward,
      at::_ops::upsample_nearest2d_backward_grad_input,
      at::_ops::upsample_bilinear2d_backward,
      at::_ops::upsample_bilinear2d_backward_grad_input>(m);
}

} // namespace vdev
