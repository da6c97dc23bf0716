// torch.fft's transforms of float16 tensors, which CUDA computes (returning float16 or
// complex32) and ATen's composites refuse on every other device: their dtype promotion
// (promote_type_fft in SpectralOps.cpp) admits half only on CUDA and meta, before any
// vdev kernel is reached. vdev registers, at its autograd key, a kernel per transform
// that runs the composite itself - as the CompositeImplicitAutograd registration would
// there, so autograd and dispatch modes see the same decomposition - on the input, or
// for a float16 input on its float32 copy, returning the result in float16 or complex32
// as CUDA does; out= variants write it into `out` (computed into a float32 or complex64
// tensor of out's kind and copied, as CUDA's kernels copy their result).
#include <ATen/native/Resize.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/fft_fft2_native.h>
#include <ATen/ops/fft_fft2_ops.h>
#include <ATen/ops/fft_fft_native.h>
#include <ATen/ops/fft_fft_ops.h>
#include <ATen/ops/fft_fftn_native.h>
#include <ATen/ops/fft_fftn_ops.h>
#include <ATen/ops/fft_hfft2_native.h>
#include <ATen/ops/fft_hfft2_ops.h>
#include <ATen/ops/fft_hfft_native.h>
#include <ATen/ops/fft_hfft_ops.h>
#include <ATen/ops/fft_hfftn_native.h>
#include <ATen/ops/fft_hfftn_ops.h>
#include <ATen/ops/fft_ifft2_native.h>
#include <ATen/ops/fft_ifft2_ops.h>
#include <ATen/ops/fft_ifft_native.h>
#include <ATen/ops/fft_ifft_ops.h>
#include <ATen/ops/fft_ifftn_native.h>
#include <ATen/ops/fft_ifftn_ops.h>
#include <ATen/ops/fft_ihfft2_native.h>
#include <ATen/ops/fft_ihfft2_ops.h>
#include <ATen/ops/fft_ihfft_native.h>
#include <ATen/ops/fft_ihfft_ops.h>
#include <ATen/ops/fft_ihfftn_native.h>
#include <ATen/ops/fft_ihfftn_ops.h>
#include <ATen/ops/fft_irfft2_native.h>
#include <ATen/ops/fft_irfft2_ops.h>
#include <ATen/ops/fft_irfft_native.h>
#include <ATen/ops/fft_irfft_ops.h>
#include <ATen/ops/fft_irfftn_native.h>
#include <ATen/ops/fft_irfftn_ops.h>
#include <ATen/ops/fft_rfft2_native.h>
#include <ATen/ops/fft_rfft2_ops.h>
#include <ATen/ops/fft_rfft_native.h>
#include <ATen/ops/fft_rfft_ops.h>
#include <ATen/ops/fft_rfftn_native.h>
#include <ATen/ops/fft_rfftn_ops.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <utility>

namespace vdev {
namespace {

// The dtype CUDA returns for a float16 input, given the dtype float32 gives.
c10::ScalarType half_precision_result(c10::ScalarType computed) {
  return computed == c10::ScalarType::ComplexFloat ? c10::ScalarType::ComplexHalf : c10::ScalarType::Half;
}

// The dtype an out= result is computed in before it is copied into `out`.
c10::ScalarType computed_into(c10::ScalarType out) {
  switch (out) {
    case c10::ScalarType::Half:
      return c10::ScalarType::Float;
    case c10::ScalarType::ComplexHalf:
      return c10::ScalarType::ComplexFloat;
    default:
      return out;
  }
}

// Op (an out= variant) on `self` in float32, with `arguments` (ending with `out`).
template <class Op, class Arguments, size_t... Leading>
at::Tensor& write_from_float(const at::Tensor& self, Arguments arguments, std::index_sequence<Leading...>) {
  at::Tensor& out = std::get<std::tuple_size_v<Arguments> - 1>(arguments);
  at::Tensor computed = at::empty({0}, out.options().dtype(computed_into(out.scalar_type())));
  Op::call(self.to(c10::ScalarType::Float), std::get<Leading>(arguments)..., computed);
  at::native::resize_output(out, computed.sizes());
  return out.copy_(computed);
}

template <class Schema>
struct Transform;

template <class Result, class... Rest>
struct Transform<Result(const at::Tensor&, Rest...)> {
  // Composite: ATen's composite for Op; Op: the op (or its out= variant).
  template <auto Composite, class Op>
  static Result call(const at::Tensor& self, Rest... rest) {
    if (self.scalar_type() != c10::ScalarType::Half) {
      return Composite(self, rest...);
    }
    if constexpr (std::is_reference_v<Result>) {
      return write_from_float<Op>(
          self, std::forward_as_tuple(rest...), std::make_index_sequence<sizeof...(Rest) - 1>());
    } else {
      const at::Tensor computed = Op::call(self.to(c10::ScalarType::Float), rest...);
      return computed.to(half_precision_result(computed.scalar_type()));
    }
  }
};

} // namespace

#define VDEV_HALF_PRECISION_FFT(transform)                                                         \
  m.impl(#transform,                                                                               \
         TORCH_FN((Transform<at::_ops::transform::schema>::call<                                   \
                   &at::native::transform##_symint, at::_ops::transform>)));                       \
  m.impl(#transform ".out",                                                                        \
         TORCH_FN((Transform<at::_ops::transform##_out::schema>::call<                             \
                   &at::native::transform##_symint_out, at::_ops::transform##_out>)));

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  VDEV_HALF_PRECISION_FFT(fft_fft)
  VDEV_HALF_PRECISION_FFT(fft_ifft)
  VDEV_HALF_PRECISION_FFT(fft_rfft)
  VDEV_HALF_PRECISION_FFT(fft_irfft)
  VDEV_HALF_PRECISION_FFT(fft_hfft)
  VDEV_HALF_PRECISION_FFT(fft_ihfft)
  VDEV_HALF_PRECISION_FFT(fft_fft2)
  VDEV_HALF_PRECISION_FFT(fft_ifft2)
  VDEV_HALF_PRECISION_FFT(fft_rfft2)
  VDEV_HALF_PRECISION_FFT(fft_irfft2)
  VDEV_HALF_PRECISION_FFT(fft_hfft2)
  VDEV_HALF_PRECISION_FFT(fft_ihfft2)
  VDEV_HALF_PRECISION_FFT(fft_fftn)
  VDEV_HALF_PRECISION_FFT(fft_ifftn)
  VDEV_HALF_PRECISION_FFT(fft_rfftn)
  VDEV_HALF_PRECISION_FFT(fft_irfftn)
  VDEV_HALF_PRECISION_FFT(fft_hfftn)
  VDEV_HALF_PRECISION_FFT(fft_ihfftn)
}

#undef VDEV_HALF_PRECISION_FFT

} // namespace vdev
