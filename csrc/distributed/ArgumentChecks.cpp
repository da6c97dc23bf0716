#include "distributed/ArgumentChecks.h"

#include "distributed/CollectiveBackend.h"

#include <c10/util/Exception.h>

#include <numeric>
#include <sstream>
#include <string_view>

namespace vdev {

namespace {

// Sizes as gloo prints them: "(2, 3)".
std::string sizes_text(c10::IntArrayRef sizes) {
  std::ostringstream text;
  text << "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    text << (i == 0 ? "" : ", ") << sizes[i];
  }
  text << ")";
  return text.str();
}

// The dtypes gloo reduces and moves (its GENERATE_ALL_TYPES); complex tensors reach
// the backend as real views.
bool communicated_by_gloo(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kHalf:
    case c10::kBFloat16:
    case c10::kChar:
    case c10::kByte:
    case c10::kBool:
    case c10::kInt:
    case c10::kLong:
      return true;
    default:
      return false;
  }
}

const char* bitwise_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    default:
      return nullptr;
  }
}

// "float32", as Python names it.
std::string_view dtype_name(const at::Tensor& tensor) {
  return c10::getDtypeNames(tensor.scalar_type()).first;
}

} // namespace

void ArgumentChecks::fail(const std::string& problem) const {
  TORCH_CHECK(false, kCollectiveBackendName, " ", op_, ": ", problem);
}

const ArgumentChecks& ArgumentChecks::dtypes(c10::ArrayRef<at::Tensor> tensors) const {
  for (const at::Tensor& tensor : tensors) {
    if (!communicated_by_gloo(tensor.scalar_type())) {
      fail(c10::str("unsupported dtype ", dtype_name(tensor), " (gloo communicates float, double, half, "
                    "bfloat16, int8, uint8, bool, int32 and int64 tensors, and complex ones as real views)"));
    }
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::reduction(
    const c10d::ReduceOp& reduce_op, c10::ArrayRef<at::Tensor> tensors) const {
  const char* bitwise = bitwise_name(reduce_op.op_);
  if (bitwise == nullptr) {
    return *this;
  }
  for (const at::Tensor& tensor : tensors) {
    if (!c10::isIntegralType(tensor.scalar_type(), /*includeBool=*/true)) {
      fail(c10::str("Cannot use ReduceOp.", bitwise, " with non-integral dtype ", dtype_name(tensor)));
    }
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::like(const at::Tensor& like, c10::ArrayRef<at::Tensor> tensors) const {
  same_dtype(like, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].sizes() != like.sizes()) {
      fail(c10::str("invalid tensor size at index ", i, " (expected ", sizes_text(like.sizes()), ", got ",
                    sizes_text(tensors[i].sizes()), ")"));
    }
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::same_dtype(const at::Tensor& like, c10::ArrayRef<at::Tensor> tensors) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].scalar_type() != like.scalar_type()) {
      fail(c10::str("invalid tensor dtype at index ", i, " (expected ", dtype_name(like), ", got ",
                    dtype_name(tensors[i]), ")"));
    }
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::not_empty(const char* what, c10::ArrayRef<at::Tensor> tensors) const {
  if (tensors.empty()) {
    fail(c10::str("requires a non-empty ", what));
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::length(const char* what, size_t expected, size_t actual) const {
  if (actual != expected) {
    fail(c10::str("invalid ", what, " (expected length ", expected, ", got ", actual, ")"));
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::root(int64_t root) const {
  if (root < 0 || root >= group_size_) {
    fail(c10::str("invalid root rank: ", root, " (the group has ", group_size_, " ranks)"));
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::elements_of(
    const at::Tensor& whole, const char* whole_name, const at::Tensor& part, const char* part_name,
    int64_t ranks) const {
  if (whole.scalar_type() != part.scalar_type()) {
    fail(c10::str("the ", whole_name, " and ", part_name, " tensors differ in dtype (", dtype_name(whole),
                  " and ", dtype_name(part), ")"));
  }
  if (whole.numel() != part.numel() * ranks) {
    fail(c10::str("the ", whole_name, " tensor must have ",
                  ranks == 1 ? std::string() : c10::str("the group size (", ranks, ") times "), "the ",
                  part_name, " tensor's ", part.numel(), " elements, but has ", whole.numel()));
  }
  return *this;
}

const ArgumentChecks& ArgumentChecks::splits(
    const char* what, c10::ArrayRef<int64_t> split_sizes, const at::Tensor& tensor) const {
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  if (split_sizes.empty()) {
    if (rows % group_size_ != 0) {
      fail(c10::str("the ", what, " tensor's dim 0 (", rows, ") does not divide among the group's ",
                    group_size_, " ranks"));
    }
    return *this;
  }
  length(c10::str(what, " split sizes").c_str(), group_size_, split_sizes.size());
  const int64_t total = std::accumulate(split_sizes.begin(), split_sizes.end(), int64_t{0});
  if (total != rows) {
    fail(c10::str("the ", what, " split sizes sum to ", total, " but the ", what, " tensor's dim 0 is ", rows));
  }
  return *this;
}

} // namespace vdev
