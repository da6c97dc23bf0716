#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Tensor.h>

namespace vdev {

// The operators of the `vdev` namespace, defined by libtorch_vdev (Python:
// torch.ops.vdev.<name>). They dispatch like aten ops: to vdev, CPU and Meta kernels,
// through autograd.

// self + alpha * other (BLAS's axpy), broadcasting and promoting types like
// torch.add(self, other, alpha=alpha); floating-point and complex results only.
VDEV_API at::Tensor scaled_add(const at::Tensor& self, const at::Tensor& other, double alpha = 1);

} // namespace vdev
