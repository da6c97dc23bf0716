// Native vdev kernels: indexing, gather/scatter, embedding backward, cat/stack.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/clone.h>
#include <ATen/ops/narrow.h>

#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/index_copy_ops.h>
#include <ATen/ops/index_fill_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/masked_scatter_ops.h>
#include <ATen/ops/masked_select_ops.h>
#include <ATen/ops/nonzero_ops.h>
#include <ATen/ops/put_ops.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/take_ops.h>

namespace vdev {

namespace {

// CUDA's narrow_copy narrows, then copies, so its errors are narrow's (an IndexError for a
// dim out of range, "length must be non-negative"); CPU's own kernel asserts or words them
// otherwise. vdev's is CUDA's.
at::Tensor narrow_copy(const at::Tensor& self, int64_t dim, c10::SymInt start, c10::SymInt length) {
  return self.narrow_symint(dim, std::move(start), std::move(length)).clone(at::MemoryFormat::Contiguous);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("narrow_copy", TORCH_FN(narrow_copy));
  register_cpu_kernels<
      at::_ops::embedding_dense_backward,
      at::_ops::index_Tensor,
      at::_ops::index_Tensor_out,
      at::_ops::_index_put_impl_,
      at::_ops::gather,
      at::_ops::gather_out,
      at::_ops::scatter_value,
      at::_ops::scatter_src,
      at::_ops::scatter_src_out,
      at::_ops::scatter_value_out,
      at::_ops::scatter__src,
      at::_ops::scatter__value,
      at::_ops::scatter_add,
      at::_ops::scatter_add_out,
      at::_ops::scatter_add_,
      at::_ops::index_select,
      at::_ops::index_select_out,
      at::_ops::index_add,
      at::_ops::index_add_out,
      at::_ops::index_add_,
      at::_ops::index_copy,
      at::_ops::index_copy_out,
      at::_ops::index_copy_,
      at::_ops::index_fill__int_Tensor,
      at::_ops::index_fill__int_Scalar,
      at::_ops::masked_select,
      at::_ops::masked_select_out,
      at::_ops::masked_scatter_,
      at::_ops::nonzero,
      at::_ops::nonzero_out,
      at::_ops::take,
      at::_ops::take_out,
      at::_ops::put_,
      at::_ops::cat,
      at::_ops::cat_out>(m);
}

} // namespace vdev
