// Upsampling with CUDA's dtypes, refused at the call. CUDA's upsample kernels
// (UpSample*.cu) dispatch on floating types, Half and BFloat16, and the nearest ones on
// Byte too; the CPU's also take integers (nearest) and Byte (linear, bilinear, bicubic).
// A CPU kernel runs queued on the stream (CpuKernel.h), so a dtype it refuses would raise
// only at the next synchronization; CUDA refuses on the host, at the call. So a vdev
// upsample checks the dtype first, with CUDA's dispatch error, and then runs the CPU kernel.
#include "aten/CpuKernel.h"

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

#include <tuple>
#include <utility>

namespace vdev {
namespace {

enum class Interpolation { Nearest, Linear };

// AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...), and Byte for nearest.
bool cuda_upsamples(Interpolation interpolation, c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Double:
    case c10::ScalarType::Float:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
      return true;
    case c10::ScalarType::Byte:
      return interpolation == Interpolation::Nearest;
    default:
      return false;
  }
}

// `cuda_kernel` is the AT_DISPATCH name CUDA's error reports.
template <class Op, Interpolation interpolation, const char* cuda_kernel, class Schema = typename Op::schema>
struct UpsampleKernel;

// Every overload's first argument is the upsampled tensor, whose dtype CUDA dispatches on.
template <class Op, Interpolation interpolation, const char* cuda_kernel, class Result, class... Args>
struct UpsampleKernel<Op, interpolation, cuda_kernel, Result(Args...)> {
  static Result call(Args... args) {
    const at::Tensor& input = std::get<0>(std::forward_as_tuple(args...));
    TORCH_CHECK_NOT_IMPLEMENTED(
        cuda_upsamples(interpolation, input.scalar_type()),
        '"',
        cuda_kernel,
        "\" not implemented for '",
        c10::toString(input.scalar_type()),
        "'");
    return CpuKernel<Op>::call(std::forward<Args>(args)...);
  }
};

template <class Op, Interpolation interpolation, const char* cuda_kernel, class OutOp>
void register_upsample(torch::Library& library) {
  cpu_kernel::register_kernel(
      library, Op::name, Op::overload_name, TORCH_FN((UpsampleKernel<Op, interpolation, cuda_kernel>::call)));
  cpu_kernel::register_kernel(
      library, OutOp::name, OutOp::overload_name, TORCH_FN((UpsampleKernel<OutOp, interpolation, cuda_kernel>::call)));
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
  register_upsample<at::_ops::upsample_nearest1d, Interpolation::Nearest, kNearest1d, at::_ops::upsample_nearest1d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact1d, Interpolation::Nearest, kNearest1d, at::_ops::_upsample_nearest_exact1d_out>(m);
  register_upsample<at::_ops::upsample_nearest2d, Interpolation::Nearest, kNearest2d, at::_ops::upsample_nearest2d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact2d, Interpolation::Nearest, kNearest2d, at::_ops::_upsample_nearest_exact2d_out>(m);
  register_upsample<at::_ops::upsample_nearest3d, Interpolation::Nearest, kNearest3d, at::_ops::upsample_nearest3d_out>(m);
  register_upsample<at::_ops::_upsample_nearest_exact3d, Interpolation::Nearest, kNearest3d, at::_ops::_upsample_nearest_exact3d_out>(m);
  register_upsample<at::_ops::upsample_linear1d, Interpolation::Linear, kLinear1d, at::_ops::upsample_linear1d_out>(m);
  register_upsample<at::_ops::upsample_bilinear2d, Interpolation::Linear, kBilinear2d, at::_ops::upsample_bilinear2d_out>(m);
  register_upsample<at::_ops::_upsample_bilinear2d_aa, Interpolation::Linear, kBilinear2dAa, at::_ops::_upsample_bilinear2d_aa_out>(m);
  register_upsample<at::_ops::upsample_bicubic2d, Interpolation::Linear, kBicubic2d, at::_ops::upsample_bicubic2d_out>(m);
  register_upsample<at::_ops::_upsample_bicubic2d_aa, Interpolation::Linear, kBicubic2dAa, at::_ops::_upsample_bicubic2d_aa_out>(m);
  register_upsample<at::_ops::upsample_trilinear3d, Interpolation::Linear, kTrilinear3d, at::_ops::upsample_trilinear3d_out>(m);
}

} // namespace vdev
