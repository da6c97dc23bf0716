#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

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

// The ops with a CPU kernel and a composite one that vdev sends to the fallback (see
// Fallback.cpp), as "aten::name.overload"; empty before the backend's first use.
VDEV_API std::vector<std::string> ops_sent_to_fallback();

// How many times each op ran through the boxed fallback since the last reset.
VDEV_API std::unordered_map<std::string, int64_t> fallback_stats();
VDEV_API void reset_fallback_stats();

} // namespace vdev
