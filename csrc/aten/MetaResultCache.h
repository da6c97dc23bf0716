#pragma once

#include "aten/OperatorFacts.h"

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

namespace vdev {

// A launch's meta kernel (QueuedOp.h) sizes its outputs from the arguments' metadata
// alone: it never sees their values. So what it says of one call holds for every call
// of the op with the same signature - every tensor's device, dtype, sizes, strides,
// offset, math bits, storage size and which arguments share a TensorImpl or a storage
// (its overlap checks), every other argument's value, the default dtype - and the
// launch of a repeated call skips it (running it was most of a small op's host cost).
// A signature is remembered only once the meta kernel accepted it, warned nothing and
// left the written arguments as they were, so errors and warnings still come from the
// meta kernel at every call that has them.
class LaunchSignature {
 public:
  // False if an argument is one a signature does not describe (a generic list, an
  // object): such a call always runs the meta kernel.
  bool describe(const OperatorFacts& facts, c10::ArrayRef<c10::IValue> arguments);

  bool operator==(const LaunchSignature& other) const;
  size_t hash() const {
    return hash_;
  }

 private:
  bool describe_value(const c10::IValue& value);
  void describe_tensor(const at::Tensor& tensor);
  void add(int64_t word);

  c10::SmallVector<int64_t, 48> words_;
  size_t hash_ = 0;
  c10::SmallVector<const void*, 6> impls_;
  c10::SmallVector<const void*, 6> storages_;
};

// What the meta kernel said of the fresh outputs (the written arguments keep their
// geometry in a remembered call).
struct MetaResult {
  struct Output {
    bool defined = false;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    bool conj = false;
    bool neg = false;
    c10::SmallVector<int64_t, 5> sizes;
    c10::SmallVector<int64_t, 5> strides;
  };
  c10::SmallVector<Output, 2> fresh;
};

// The calling thread's remembered meta results (a small cache: a signature may be
// forgotten, never confused with another).
const MetaResult* remembered_meta_result(const LaunchSignature& signature);
void remember_meta_result(const LaunchSignature& signature, const MetaResult& result);

} // namespace vdev
