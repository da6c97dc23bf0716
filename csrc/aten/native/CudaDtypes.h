#pragma once

// A CPU kernel refusing, at the call, the dtypes CUDA's kernel refuses and the CPU's takes
// (integer max pooling, integer and bool upsampling). A CPU kernel runs queued on the
// stream (CpuKernel.h), so a dtype it refuses would raise only at the next
// synchronization, and one it takes would not raise at all; CUDA's AT_DISPATCH refuses
// on the host, at the call. So the kernel checks the dtype first, with CUDA's dispatch
// error, and then runs the CPU kernel.
#include "aten/CpuKernel.h"

#include <tuple>
#include <utility>

namespace vdev {

// `cuda_takes` is CUDA's dispatch macro's dtype list, `cuda_kernel` the name its error
// reports and `dispatched` the index of the argument whose dtype it dispatches on.
template <
    class Op,
    bool (*cuda_takes)(c10::ScalarType),
    const char* cuda_kernel,
    size_t dispatched = 0,
    class Schema = typename Op::schema>
struct CudaDtypesKernel;

template <class Op, bool (*cuda_takes)(c10::ScalarType), const char* cuda_kernel, size_t dispatched, class Result, class... Args>
struct CudaDtypesKernel<Op, cuda_takes, cuda_kernel, dispatched, Result(Args...)> {
  static Result call(Args... args) {
    const at::Tensor& tensor = std::get<dispatched>(std::forward_as_tuple(args...));
    TORCH_CHECK_NOT_IMPLEMENTED(
        cuda_takes(tensor.scalar_type()),
        '"',
        cuda_kernel,
        "\" not implemented for '",
        c10::toString(tensor.scalar_type()),
        "'");
    return CpuKernel<Op>::call(std::forward<Args>(args)...);
  }
};

template <class Op, bool (*cuda_takes)(c10::ScalarType), const char* cuda_kernel, size_t dispatched = 0>
void register_cuda_dtypes_kernel(torch::Library& library) {
  cpu_kernel::register_kernel(
      library, Op::name, Op::overload_name, TORCH_FN((CudaDtypesKernel<Op, cuda_takes, cuda_kernel, dispatched>::call)));
}

// AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, ...).
inline bool cuda_floating_and_half_types(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Double || dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Half ||
      dtype == c10::ScalarType::BFloat16;
}

} // namespace vdev
