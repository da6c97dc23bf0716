#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace c10 {
class OperatorHandle;
}

namespace vdev {

// CUDA raises a dtype its kernel does not support at the call. A launched op's meta
// kernel accepts such a call and its CPU kernel's AT_DISPATCH only throws on the stream
// (c10::NotImplementedError), so the first launch of an op with arguments of dtypes not
// yet known to run waits for its kernel to learn whether it supports them
// (launch_checking_support, Launch.h); later launches of the signature queue at once.
// The signature is what selects the kernel's dtype dispatch, never the sizes: the
// op, each tensor's dtype and device type (tensor lists' elements; an undefined
// tensor or None distinct), each Scalar's type, each ScalarType and string argument.
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
  template <class Other>
  void add(const Other& /*selects no dtype*/) {}

  // Process-wide: whether a launch with this signature ran without NotImplementedError.
  bool known_to_run() const;
  // Notes that a launch with this signature ran, unless one of its tensors was empty:
  // kernels return before their dtype dispatch when there is nothing to compute
  // (addmm_impl_cpu_ of a bool 0 x 3 matrix runs), so that run proves nothing.
  void note_runs() const;

 private:
  void add_identity(const void* identity);

  c10::SmallVector<char, 64> key_;  // no allocation for most calls: this is built per launch
  bool has_empty_tensor_ = false;
};

} // namespace vdev
