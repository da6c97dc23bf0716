// Scatter reductions with CUDA's dtypes. CPU's kernels reduce complex tensors by
// multiplication and by mean; CUDA's reduce them by sum only (ScatterGatherKernel.cu
// dispatches its other reductions over real types), so a complex scatter_(...,
// reduce="multiply") or scatter_reduce(..., "prod" | "mean" | "amax" | "amin") raises
// on vdev as on CUDA, before any CPU kernel runs (CpuKernel.h) and changes `self`.
#include "aten/CpuKernel.h"

#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/scatter_reduce_ops.h>

#include <string_view>
#include <tuple>
#include <utility>

namespace vdev {
namespace {

// The reductions CUDA computes for complex tensors: "add" (scatter) and "sum" (scatter_reduce).
bool reduces_complex_on_cuda(std::string_view reduce) {
  return reduce == "add" || reduce == "sum";
}

template <class Arg>
void take_reduce(std::string_view& reduce, const Arg& argument) {
  if constexpr (std::is_same_v<std::decay_t<Arg>, c10::string_view>) {
    reduce = std::string_view(argument.data(), argument.size());
  }
}

template <class Op, class Schema = typename Op::schema>
struct ScatterReduction;

// Every overload's first argument is the scattered-into tensor (self), whose dtype CUDA dispatches on.
template <class Op, class Result, class... Args>
struct ScatterReduction<Op, Result(Args...)> {
  static Result call(Args... args) {
    const at::Tensor& self = std::get<0>(std::forward_as_tuple(args...));
    std::string_view reduce;
    (take_reduce(reduce, args), ...);
    TORCH_CHECK_NOT_IMPLEMENTED(
        !self.is_complex() || reduces_complex_on_cuda(reduce),
        Op::name,
        " with reduce='",
        reduce,
        "' is not implemented for '",
        self.scalar_type(),
        "' on ",
        kBackendName,
        ", as on CUDA (only 'sum' and 'add' reduce complex tensors)");
    return CpuKernel<Op>::call(std::forward<Args>(args)...);
  }
};

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("scatter.reduce", TORCH_FN((ScatterReduction<at::_ops::scatter_reduce>::call)));
  m.impl("scatter.value_reduce", TORCH_FN((ScatterReduction<at::_ops::scatter_value_reduce>::call)));
  m.impl("scatter.reduce_out", TORCH_FN((ScatterReduction<at::_ops::scatter_reduce_out>::call)));
  m.impl("scatter.value_reduce_out", TORCH_FN((ScatterReduction<at::_ops::scatter_value_reduce_out>::call)));
  m.impl("scatter_.reduce", TORCH_FN((ScatterReduction<at::_ops::scatter__reduce>::call)));
  m.impl("scatter_.value_reduce", TORCH_FN((ScatterReduction<at::_ops::scatter__value_reduce>::call)));
  m.impl("scatter_reduce.two", TORCH_FN((ScatterReduction<at::_ops::scatter_reduce_two>::call)));
  m.impl("scatter_reduce_.two", TORCH_FN((ScatterReduction<at::_ops::scatter_reduce__two>::call)));
  m.impl("scatter_reduce.two_out", TORCH_FN((ScatterReduction<at::_ops::scatter_reduce_two_out>::call)));
}

} // namespace vdev
