#pragma once

#include "aten/AcceleratorDtypes.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace vdev {

// What calling an operator on vdev needs of its schema, worked out on its first call
// rather than walking the schema (alias sets, types, overloads) on every call.
struct OperatorFacts {
  explicit OperatorFacts(const c10::FunctionSchema& schema);

  c10::SmallVector<bool, 8> written;
  c10::SmallVector<bool, 8> index_list;
  c10::SmallVector<bool, 8> optional_generator;
  c10::SmallVector<bool, 8> dtype;
  // For each result, the written argument it returns (in-place, out=), or -1.
  c10::SmallVector<int, 4> written_argument_of_result;
  const AcceleratorDtypes* accelerator_dtypes;
  // Every result views an argument and nothing is written: the op changes metadata
  // only, so it runs on the calling thread without waiting for queued work.
  bool views_only;

  // How the op is launched on a stream (QueuedOp.h); no meta kernel if it runs on the
  // calling thread.
  struct Launch {
    // ATen's C++ meta kernel, which sizes the outputs on the host.
    const c10::KernelFunction* meta = nullptr;
    // The op whose CPU kernel the stream runs: the op itself when it writes only its
    // arguments (in-place, out=), else its out= overload, given the outputs.
    std::optional<c10::OperatorHandle> cpu_op;
    // vdev's own CPU kernel for cpu_op's work (HandwrittenLaunch::cpu), run instead of
    // redispatching cpu_op; it takes undefined outputs (a backward's unneeded gradients).
    const c10::KernelFunction* cpu_kernel = nullptr;
    // Outputs allocated on the host and passed to cpu_op as out= arguments.
    size_t fresh_outputs = 0;
  } launch;
};

// The facts of `op` (kept for the life of the process).
const OperatorFacts& operator_facts(const c10::OperatorHandle& op);

} // namespace vdev
