#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace vdev {

// What launching a random op (Random.cpp, Dropout.cpp) shares.
//
// A CPU stand-in for `tensor` on which the op's CPU kernel runs first, on the host, so
// that it raises its own argument errors (parameter ranges, the dtypes it draws) at the
// call, as CUDA raises them on the host: a tensor of its dtype with one element, or
// none if it is empty (kernels skip some checks then). Its draws come from
// scratch_generator(), so no generator's state changes.
at::Tensor random_stand_in(const at::Tensor& tensor);
const at::Generator& scratch_generator();

// Whether a launched kernel can write `tensor`: strided, no element shared (the CPU
// kernel, run on the calling thread, refuses those).
bool launchable_random_output(const at::Tensor& tensor);

} // namespace vdev
