#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <unordered_map>

namespace vdev {

// Runs a boxed `op` with a CPU kernel on zero-copy CPU aliases of its vdev arguments
// and hands the results back as vdev tensors (see CpuRedispatch.h). `cpu_kernel`
// runs the op on the converted stack.
VDEV_API void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel);

// The boxed fallback: `op`'s CPU kernel run by run_on_cpu_aliases, counted in
// fallback_stats and subject to VDEV_FALLBACK.
VDEV_API void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// An op with a CPU kernel and a CompositeExplicitAutograd(NonFunctional) one, on a
// backend with no kernel for it, runs the composite: for a structured op's functional
// and in-place variants the meta function on the device tensors, `empty`, then the
// out= variant, which for vdev is the fallback - a second TensorIterator and a second
// dispatch per call, where CPU runs one structured kernel; for others ATen's generic
// version, which may differ from the CPU's (native_group_norm's views reject
// channels-last input; dense composites cannot take sparse tensors). These ops get the
// fallback as their vdev (and sparse vdev) kernel instead, so their own CPU kernel
// runs on aliases, once. Registered on the first call (torch_vdev's import or the
// first device allocation): by then every vdev kernel is, so none is overridden.
VDEV_API void register_direct_fallbacks();

// True if `op` has a vdev kernel of its own: not the fallback, reached directly or not.
VDEV_API bool has_vdev_kernel(const c10::OperatorHandle& op);

// While alive, the direct fallbacks of `op`'s family (`name`, `name_` and their
// overloads) are withdrawn, so that a kernel registered for any of them is reached as
// through the composite: the functional variant calls an out= kernel registered
// for vdev. Python kernels hold one.
class VDEV_API DirectFallbacksWithdrawn {
 public:
  explicit DirectFallbacksWithdrawn(const c10::OperatorHandle& op);
  ~DirectFallbacksWithdrawn();
  DirectFallbacksWithdrawn(const DirectFallbacksWithdrawn&) = delete;
  DirectFallbacksWithdrawn& operator=(const DirectFallbacksWithdrawn&) = delete;

 private:
  std::string family_;
};

// How many times each op ran through the boxed fallback since the last reset.
VDEV_API std::unordered_map<std::string, int64_t> fallback_stats();
VDEV_API void reset_fallback_stats();

} // namespace vdev
