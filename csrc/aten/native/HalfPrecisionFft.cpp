// torch.fft's transforms of float16 tensors, which CUDA computes (returning float16 or
// complex32) and ATen's composites refuse on every other device: their dtype promotion
// (promote_type_fft in SpectralOps.cpp) admits half only on CUDA and meta, before any
// vdev kernel is reached. vdev registers, at its autograd key, a kernel per transform
// that runs the composite itself - as the CompositeImplicitAutograd registration would
// there, so autograd and dispatch modes see the same decomposition - on the input, or
// for a float16 input on its float32 copy, returning the result in float16 or complex32
// as CUDA does; out= variants write it into `out` (computed into a float32 or complex64
// tensor of out's kind and copied, as CUDA's kernels copy their result).
//
// cuFFT computes half precision only for signal sizes that are powers of two, and
// CUDA raises otherwise when it builds a plan. vdev's kernels for the transforms'
// primitives (_fft_c2c, _fft_r2c, _fft_c2r) raise the same error for the same plans:
// for complex32 inputs, and for the float32 copies of float16 inputs made here.
#include "aten/CpuKernel.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/_fft_c2c_ops.h>
#include <ATen/ops/_fft_c2r_ops.h>
#include <ATen/ops/_fft_r2c_ops.h>
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

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace vdev {
namespace {

// True while a transform of a float16 input runs on its float32 copy.
thread_local bool computing_in_half_precision = false;

class HalfPrecisionTransform {
 public:
  HalfPrecisionTransform() : enclosing_(std::exchange(computing_in_half_precision, true)) {}
  ~HalfPrecisionTransform() {
    computing_in_half_precision = enclosing_;
  }
  HalfPrecisionTransform(const HalfPrecisionTransform&) = delete;
  HalfPrecisionTransform& operator=(const HalfPrecisionTransform&) = delete;

 private:
  bool enclosing_;
};

bool in_half_precision(const at::Tensor& self) {
  const c10::ScalarType dtype = self.scalar_type();
  return computing_in_half_precision || dtype == c10::ScalarType::Half || dtype == c10::ScalarType::ComplexHalf;
}

// cuFFT plans transform at most this many dimensions (cufft_max_ndim).
constexpr size_t max_plan_dims = 3;

// CUDA's check, made as it builds the plan transforming `dims` of a signal of `sizes`.
void check_plan(c10::IntArrayRef sizes, c10::IntArrayRef dims) {
  std::vector<int64_t> signal_sizes;
  for (const int64_t dim : dims) {
    signal_sizes.push_back(sizes[dim]);
  }
  TORCH_CHECK(
      std::all_of(signal_sizes.begin(), signal_sizes.end(), [](int64_t size) { return (size & (size - 1)) == 0; }),
      "cuFFT only supports dimensions whose sizes are powers of two when"
      " computing in half precision, but got a signal size of",
      c10::IntArrayRef(signal_sizes));
}

// The plans of a complex-to-complex transform of `dims` of a tensor of `strides` (or of
// the intermediate result of one, whose untransformed dimensions keep their stride
// order): CUDA plans the dimensions of smallest stride first, max_plan_dims at a time.
void check_c2c_plans(c10::IntArrayRef sizes, c10::IntArrayRef strides, std::vector<int64_t> dims) {
  std::sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  while (!dims.empty()) {
    const size_t planned = std::min(max_plan_dims, dims.size());
    check_plan(sizes, c10::IntArrayRef(dims).slice(dims.size() - planned, planned));
    dims.resize(dims.size() - planned);
  }
}

// Whether CUDA transforms all of `dims` of a real-to-complex or complex-to-real
// transform in one plan (use_optimized_cufft_path).
bool planned_at_once(c10::IntArrayRef dims) {
  return dims.size() <= max_plan_dims && !(dims.size() >= 2 && dims[0] == 0 && dims[1] == 1);
}

void check_c2c(const at::Tensor& self, c10::SymIntArrayRef dims) {
  if (in_half_precision(self)) {
    const c10::IntArrayRef concrete = C10_AS_INTARRAYREF_SLOW(dims);
    check_c2c_plans(self.sizes(), self.strides(), {concrete.begin(), concrete.end()});
  }
}

void check_r2c(const at::Tensor& self, c10::IntArrayRef dims) {
  if (!in_half_precision(self) || dims.empty()) {
    return;
  }
  if (planned_at_once(dims)) {
    check_plan(self.sizes(), dims);
    return;
  }
  check_plan(self.sizes(), dims.back());
  check_c2c_plans(self.sizes(), self.strides(), {dims.begin(), dims.end() - 1});
}

void check_c2r(const at::Tensor& self, c10::IntArrayRef dims, const c10::SymInt& last_dim_size) {
  if (!in_half_precision(self) || dims.empty()) {
    return;
  }
  std::vector<int64_t> out_sizes(self.sizes().begin(), self.sizes().end());
  out_sizes[dims.back()] = last_dim_size.guard_int(__FILE__, __LINE__);
  if (planned_at_once(dims)) {
    check_plan(out_sizes, dims);
    return;
  }
  check_c2c_plans(self.sizes(), self.strides(), {dims.begin(), dims.end() - 1});
  check_plan(out_sizes, dims.back());
}

at::Tensor fft_c2c(const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward) {
  check_c2c(self, dim);
  return CpuKernel<at::_ops::_fft_c2c>::call(self, dim, normalization, forward);
}

at::Tensor& fft_c2c_out(
    const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward, at::Tensor& out) {
  check_c2c(self, dim);
  return CpuKernel<at::_ops::_fft_c2c_out>::call(self, dim, normalization, forward, out);
}

at::Tensor fft_r2c(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided) {
  check_r2c(self, dim);
  return CpuKernel<at::_ops::_fft_r2c>::call(self, dim, normalization, onesided);
}

at::Tensor& fft_r2c_out(
    const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided, at::Tensor& out) {
  check_r2c(self, dim);
  return CpuKernel<at::_ops::_fft_r2c_out>::call(self, dim, normalization, onesided, out);
}

at::Tensor fft_c2r(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, c10::SymInt last_dim_size) {
  check_c2r(self, dim, last_dim_size);
  return CpuKernel<at::_ops::_fft_c2r>::call(self, dim, normalization, std::move(last_dim_size));
}

at::Tensor& fft_c2r_out(
    const at::Tensor& self,
    c10::IntArrayRef dim,
    int64_t normalization,
    c10::SymInt last_dim_size,
    at::Tensor& out) {
  check_c2r(self, dim, last_dim_size);
  return CpuKernel<at::_ops::_fft_c2r_out>::call(self, dim, normalization, std::move(last_dim_size), out);
}

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
    const HalfPrecisionTransform half_precision;
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fft_c2c", TORCH_FN(fft_c2c));
  m.impl("_fft_c2c.out", TORCH_FN(fft_c2c_out));
  m.impl("_fft_r2c", TORCH_FN(fft_r2c));
  m.impl("_fft_r2c.out", TORCH_FN(fft_r2c_out));
  m.impl("_fft_c2r", TORCH_FN(fft_c2r));
  m.impl("_fft_c2r.out", TORCH_FN(fft_c2r_out));
}

} // namespace vdev
