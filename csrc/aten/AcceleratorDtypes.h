#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <string_view>

namespace vdev {

// Accelerator dtypes: dtypes CUDA's kernel for an op supports and the CPU's lacks
// (histc on integers, complex32 pointwise ops, half-precision pooling, ...). vdev is an
// accelerator, so it takes them: the CPU kernel runs on copies of those arguments in a
// wider dtype it supports, and results come back in the dtype CUDA returns.
//
// The table (AcceleratorDtypes.inc) is data, generated from op_db's dtypesIfCUDA by
// tools/generate_accelerator_dtypes.py: per aten op, each dtype its CPU kernel rejects
// and the first wider dtype that it accepts. VDEV_ACCELERATOR_DTYPES=0 turns it off.
class AcceleratorDtypes {
 public:
  // The dtype the CPU kernel computes `dtype` in, or Undefined if it takes it as is.
  c10::ScalarType compute_type(c10::ScalarType dtype) const {
    return compute_types_[static_cast<size_t>(dtype)];
  }
  void set_compute_type(c10::ScalarType dtype, c10::ScalarType compute) {
    compute_types_[static_cast<size_t>(dtype)] = compute;
  }

 private:
  std::array<c10::ScalarType, static_cast<size_t>(c10::ScalarType::NumOptions)> compute_types_ = [] {
    std::array<c10::ScalarType, static_cast<size_t>(c10::ScalarType::NumOptions)> none{};
    none.fill(c10::ScalarType::Undefined);
    return none;
  }();
};

// The accelerator dtypes of aten op `name` (e.g. "aten::histc"; any overload, in-place
// or not), or nullptr if it has none. The result lives forever.
const AcceleratorDtypes* accelerator_dtypes(std::string_view name);

// The dtype a result computed in `computed` is returned in, when `original` was
// computed as `compute`: the original dtype, or its real or complex counterpart for a
// result in the compute dtype's counterpart (angle of complex32 is float16, rfft of
// float16 is complex32); any other dtype as it is (trace of bool is int64).
c10::ScalarType narrowed_type(c10::ScalarType computed, c10::ScalarType original, c10::ScalarType compute);

} // namespace vdev
