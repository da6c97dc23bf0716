#pragma once

#include "aten/OperatorFacts.h"

#include <ATen/core/stack.h>

namespace vdev {

// Launching an aten op on a stream, as CUDA launches its kernels:
//  - on the host: device discovery and checks, then the op on meta tensors (ATen's C++
//    meta kernel) for its output sizes; fresh outputs are allocated from the caching allocator on the current
//    stream, out= arguments resized as the meta kernel says;
//  - on the stream's worker: ATen's CPU kernel on CPU aliases made at the launch
//    (LaunchAliases), writing the preallocated outputs: the op itself when it writes
//    only its arguments (in-place, out=), else its out= overload.
//
// How `schema`'s op is launched, worked out once (no meta kernel: it runs on the
// calling thread). Ops that take a generator, return views or non-tensors, write
// tensor lists or change their arguments' storage (resize_, set_) are not launched.
OperatorFacts::Launch plan_launch(const c10::FunctionSchema& schema, const OperatorFacts& facts);

// Launches `op` with the arguments on `stack` on its device's current stream and
// leaves its results on the stack. Returns false, the stack untouched, when this call
// runs on the calling thread instead: the op has no launch plan, an argument is
// sparse, nested or of an accelerator dtype its CPU kernel computes in a wider one, or
// the meta kernel raised (the CPU kernel then raises the error itself, or sizes a
// result that depends on data, as indexing with a bool mask does).
bool launch_op(const c10::OperatorHandle& op, const OperatorFacts& facts, torch::jit::Stack* stack);

} // namespace vdev
