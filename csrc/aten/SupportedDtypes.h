#pragma once

#include <ATen/core/ivalue.h>

#include <string>

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
  DtypeSignature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments);

  // Process-wide: whether a launch with this signature ran without NotImplementedError.
  bool known_to_run() const;
  void note_runs() const;

 private:
  void add_tensor(const at::Tensor& tensor);

  std::string key_;
};

} // namespace vdev
