// Upsampling with CUDA's dtypes, refused at the call (CudaDtypes.h). CUDA's upsample
// kernels (UpSample*.cu) dispatch on floating types, Half and BFloat16, and the nearest
// ones on Byte too; the CPU's also take integers (nearest) and Byte (linear, bilinear,
// bicubic).
#include "aten/native/CudaDtypes.h"

#include <ATen/ops/_upsample_bicubic2d_aa_ops.h>
#include <ATen/ops/_upsample_bilinear2d_aa_ops.h>
#include <ATen/ops/_upsample_nearest_exact1d_ops.h>
#include <ATen/ops/_upsample_nearest_exact2d_ops.h>
#include <ATen/ops/_upsample_nearest_exact3d_ops.h>
#include <ATen/ops/upsample_bicubic2d_ops.h>
#include <ATen/ops/upsample_bilinear2d_ops.h>
#include <ATen/ops/upsample_linear1d_ops.h>
#include <ATen/ops/upsample_nearest1d_ops.h>
#include <ATen/ops/upsample_nearest2d_ops.h>
#include <ATen/ops/upsample_nearest3d_ops.h>
#include <ATen/ops/upsample_trilinear3d_ops.h>

namespace vdev {
namespace {

// AT_DISPATCH_FLOATING_TYPES_AND3(kHalf, kBFloat16, kByte, ...).
bool cuda_upsamples_nearest(c10::ScalarType dtype) {
  return cuda_floating_and_half_types(dtype) || dtype == c10::ScalarType::Byte;
}

template <class Op, bool (*cuda_takes)(c10::ScalarType), const char* cuda_kernel, class OutOp>
void register_upsample(torch::Library& library) {
  register_cuda_dtypes_kernel<Op, cuda_takes, cuda_kernel>(library);
  register_cuda_dtypes_kernel<OutOp, cuda_takes, cuda_kernel>(library);
}

constexpr char kNearest1d[] = "upsample_nearest1d_out_frame";
constexpr char kNearest2d[] = "upsample_nearest2d_out_frame";
constexpr char kNearest3d[] = "upsample_nearest3d_out_frame";
constexpr char kLinear1d[] = "upsample_linear1d_out_frame";
constexpr char kBilinear2d[] = "upsample_bilinear2d_out_frame";
constexpr char kBilinear2dAa[] = "upsample_bilinear2d_aa_out_frame";
constexpr char kBicubic2d[] = "upsample_bicubic2d_out_frame";
constexpr char kBicubic2dAa[] = "upsample_bicubic2d_aa_out_frame";
constexpr char kTrilinear3d[] = "upsample_trilinear3d_out_frame";

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_upsample<at::_ops::upsample_nearest1d, cuda_upsamples_nearest, kNearest1d, at::_ops::upsample_nearest1d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact1d, cuda_upsamples_nearest, kNearest1d, at::_ops::_upsample_nearest_exact1d_out>(m);
  register_upsample<at::_ops::upsample_nearest2d, cuda_upsamples_nearest, kNearest2d, at::_ops::upsample_nearest2d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact2d, cuda_upsamples_nearest, kNearest2d, at::_ops::_upsample_nearest_exact2d_out>(m);
  register_upsample<at::_ops::upsample_nearest3d, cuda_upsamples_nearest, kNearest3d, at::_ops::upsample_nearest3d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact3d, cuda_upsamples_nearest, kNearest3d, at::_ops::_upsample_nearest_exact3d_out>(m);
  register_upsample<at::_ops::upsample_linear1d, cuda_floating_and_half_types, kLinear1d, at::_ops::upsample_linear1d_out>(m);
  register_upsample<at::_ops::upsample_bilinear2d, cuda_floating_and_half_types, kBilinear2d, at::_ops::upsample_bilinear2d_out>(m);
  register_upsample<at::_ops::_upsample_bilinear2d_aa, cuda_floating_and_half_types, kBilinear2dAa, at::_ops::_upsample_bilinear2d_aa_out>(m);
  register_upsample<at::_ops::upsample_bicubic2d, cuda_floating_and_half_types, kBicubic2d, at::_ops::upsample_bicubic2d_out>(m);
  register_upsample<at::_ops::_upsample_bicubic2d_aa, cuda_floating_and_half_types, kBicubic2dAa, at::_ops::_upsample_bicubic2d_aa_out>(m);
  register_upsample<at::_ops::upsample_trilinear3d, cuda_floating_and_half_types, kTrilinear3d, at::_ops::upsample_trilinear3d_out>(m);
}

} // namespace vdev
