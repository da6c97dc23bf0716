#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/operator_name.h>

namespace vdev {

// ATen's C++ meta kernel of an aten operator overload (its at::meta function, see
// generate_meta_kernels.py), boxed; nullptr if it has none. The dispatcher's Meta
// kernel cannot serve: once torch is imported it is mostly a Python function.
const c10::KernelFunction* meta_kernel(const c10::OperatorName& name);

} // namespace vdev
