#pragma once

#include <ATen/core/Tensor.h>

namespace vdev {

// In evaluation CUDA's batch norm returns the statistics it normalized with as save_mean
// and save_invstd: the running mean and 1 / sqrt(running_var + eps), one per channel, in
// the input's accumulation type. The CPU returns empty ones; PyTorch's decomposition and
// meta kernels give every device but the CPU CUDA's, and so does vdev. Writes them into
// `save_mean` and `save_invstd` (on the CPU aliases of a launched kernel, or on vdev
// tensors).
void fill_eval_statistics(
    const at::Tensor& running_mean, const at::Tensor& running_var, double eps, const at::Tensor& save_mean,
    const at::Tensor& save_invstd);

} // namespace vdev
