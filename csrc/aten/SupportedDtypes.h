#pragma once

#include "aten/Tensor.h"

#include <ATen/core/ivalue.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <vector>

namespace c10 {
class KernelFunction;
class OperatorHandle;
}

namespace vdev {

// CUDA raises a dtype its kernel does not support at the call. A launched op's meta
// kernel accepts such a call and its CPU kernel's AT_DISPATCH only throws on the stream
// (c10::NotImplementedError), so the first launch of an op with arguments of dtypes not
// yet known to run waits for its kernel to learn whether it supports them
// (launch_checking_support, Launch.h); later launches of the signature queue at once.
// The signature is what selects the kernel's dtype dispatch: the op, each tensor's
// dtype and device type (tensor lists' elements; an undefined tensor or None distinct),
// each Scalar's type, each ScalarType, string and bool argument. Sizes only by their
// class (no element, one, more): kernels skip their dispatch where there is little to
// compute (addmm_impl_cpu_ of a bool 0 x 3 matrix returns early, linspace of one step
// fills), so a run of one class proves nothing of another; bool arguments choose
// paths (index_reduce's include_self=False has a dispatch of its own).
class DtypeSignature {
 public:
  // A boxed call's signature.
  DtypeSignature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);
  // An unboxed call's: `op_name` (a string literal, unique per overload) and add(argument)...
  explicit DtypeSignature(const char* op_name);

  void add(const at::Tensor& tensor);
  void add(const std::optional<at::Tensor>& tensor);
  void add(at::TensorList tensors);
  void add(const c10::Scalar& scalar);
  void add(c10::ArrayRef<c10::Scalar> scalars);
  void add(std::optional<c10::ScalarType> dtype);
  void add(c10::string_view text);
  void add(bool flag);
  template <class Other>
  void add(const Other& /*selects no dtype*/) {}

  // Process-wide: whether a launch with this signature ran without NotImplementedError.
  bool known_to_run() const;
  // Notes that a launch with this signature ran.
  void note_runs() const;

 private:
  void add_identity(const void* identity);

  c10::SmallVector<char, 64> key_;  // no allocation for most calls: this is built per launch
};

// CUDA's host code checks a call's metadata (dtypes, sizes, arguments) before it
// launches a kernel, so those errors raise at the call, while what only the kernel sees
// (an index out of range) raises at a later synchronization. A CPU kernel interleaves
// both, but checks metadata before it reads or writes any tensor's data: an error it
// raises before that could not depend on the data. So the first launch of a signature
// (DtypeSignature) first runs the CPU kernel on the calling thread over aliases whose
// memory refuses every access (DataRefusingAliases): an error before the first refused
// access (renorm's "Expected a floating point or complex tensor") raises at the call,
// as CPU and CUDA raise it; the first refused access ends the run, and what the kernel
// would raise later is the stream's. Known signatures skip this.
class DataRefusingAliases {
 public:
  // A CPU alias of a vdev tensor (aliases of one storage share one, as LaunchAliases);
  // other tensors as they are: CUDA reads host tensors on the host too.
  at::Tensor alias(const at::Tensor& tensor);

 private:
  LaunchAliases aliases_;
};

// Runs `kernel` as above: warnings discarded (the launched kernel gives them), the keys
// a launched kernel never reaches excluded; raises the error it raises before a refused
// data access, an unsupported dtype's c10::NotImplementedError naming `op_name`.
void raise_metadata_errors(const char* op_name, c10::function_ref<void(DataRefusingAliases&)> kernel);
// For a boxed op: its CPU kernel (`cpu_kernel`, else the CPU dispatch) over `arguments`
// and the fresh `outputs` the launched kernel writes.
void raise_metadata_errors(
    const char* op_name, const c10::OperatorHandle& cpu_op, const c10::KernelFunction* cpu_kernel,
    c10::ArrayRef<c10::IValue> arguments, c10::ArrayRef<at::Tensor> outputs);

// An argument of a typed kernel as the run refusing data takes it.
inline at::Tensor refusing_data(DataRefusingAliases& aliases, const at::Tensor& tensor) {
  return aliases.alias(tensor);
}
inline std::optional<at::Tensor> refusing_data(DataRefusingAliases& aliases, const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? std::optional<at::Tensor>(aliases.alias(*tensor)) : tensor;
}
inline std::vector<at::Tensor> refusing_data(DataRefusingAliases& aliases, at::TensorList tensors) {
  std::vector<at::Tensor> refusing;
  refusing.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    refusing.push_back(aliases.alias(tensor));
  }
  return refusing;
}
template <class Other>
Other refusing_data(DataRefusingAliases& /*aliases*/, const Other& value) {
  return value;
}

} // namespace vdev
