#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace vdev {

// Runs `op` with the CPU kernel on zero-copy CPU aliases of its vdev arguments,
// then hands the results back as vdev tensors, without copying (see Fallback.cpp).
// `cpu_kernel` runs the op on the converted stack.
void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel);

} // namespace vdev
