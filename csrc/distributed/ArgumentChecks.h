#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

namespace vdev {

// gloo checks a collective's arguments when it is handed the collective, which for vccl
// happens later, on the group's communication stream, where a bad argument could only
// fail the work. These checks run at the call instead, as ProcessGroupNCCL's do, and
// raise there, naming vccl's collective and the problem in gloo's words where gloo has
// them ("vccl all_gather: invalid tensor size at index 0 (expected (4), got (3))").
// Only what one rank can see alone: calls that differ between ranks are CallAgreement's.
class ArgumentChecks {
 public:
  ArgumentChecks(const char* op, int rank, int group_size)
      : op_(op), rank_(rank), group_size_(group_size) {}

  // Every tensor has a dtype gloo communicates.
  const ArgumentChecks& dtypes(c10::ArrayRef<at::Tensor> tensors) const;
  // gloo has a `reduce_op` for every tensor's dtype (bitwise ones only for integers).
  const ArgumentChecks& reduction(const c10d::ReduceOp& reduce_op, c10::ArrayRef<at::Tensor> tensors) const;
  // Each tensor has `like`'s dtype and sizes.
  const ArgumentChecks& like(const at::Tensor& like, c10::ArrayRef<at::Tensor> tensors) const;
  // Each tensor has `like`'s dtype.
  const ArgumentChecks& same_dtype(const at::Tensor& like, c10::ArrayRef<at::Tensor> tensors) const;
  // A list (`what`) has at least one entry.
  const ArgumentChecks& not_empty(const char* what, c10::ArrayRef<at::Tensor> tensors) const;
  // A list (`what`) has `expected` entries.
  const ArgumentChecks& length(const char* what, size_t expected, size_t actual) const;
  // `root` is a rank of the group.
  const ArgumentChecks& root(int64_t root) const;
  // `whole` has `part`'s dtype and `ranks` times its elements: the group size for
  // all_gather_into_tensor and reduce_scatter_tensor, 1 for all_to_all_single.
  const ArgumentChecks& elements_of(
      const at::Tensor& whole, const char* whole_name, const at::Tensor& part, const char* part_name,
      int64_t ranks) const;
  // all_to_all_single's split sizes: none, or one per rank summing to dim 0's size.
  const ArgumentChecks& splits(const char* what, c10::ArrayRef<int64_t> split_sizes, const at::Tensor& tensor) const;

  int rank() const {
    return rank_;
  }
  int group_size() const {
    return group_size_;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const;

  const char* op_;
  int rank_;
  int group_size_;
};

} // namespace vdev
