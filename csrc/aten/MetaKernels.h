#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/operator_name.h>

namespace vdev {

// ATen's C++ meta kernel of an aten operator overload (its at::meta function, see
// generate_meta_kernels.py), boxed; nullptr if it has none. The dispatcher's Meta
// kernel cannot serve: once torch is imported it is mostly a Python function.
const c10::KernelFunction* meta_kernel(const c10::OperatorName& name);

// vdev's launch of an aten op ATen has no C++ meta kernel for (HandwrittenLaunches.cpp):
// `meta` has the op's schema and sizes its outputs on meta tensors; `cpu`, if valid, has
// the schema of the op's out= overload and writes the outputs on CPU aliases (else the
// op's own out= overload, or the in-place op itself, has a CPU kernel that does).
struct HandwrittenLaunch {
  c10::KernelFunction meta;
  c10::KernelFunction cpu;
};

// nullptr if vdev has none for this overload.
const HandwrittenLaunch* handwritten_launch(const c10::OperatorName& name);

} // namespace vdev
