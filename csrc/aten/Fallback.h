#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace vdev {

// Runs `op` with the CPU kernel on zero-copy CPU aliases of its vdev arguments,
// then hands the results back as vdev tensors, without copying (see Fallback.cpp).
// `cpu_kernel` runs the op on the converted stack.
VDEV_API void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel);

// The boxed fallback: `op`'s CPU kernel run by run_on_cpu_aliases.
VDEV_API void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace vdev
