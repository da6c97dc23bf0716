// Sparse COO tensors on vdev (the SparsePrivateUse1 key): indices and values are vdev
// tensors. Making them and reading their parts are ATen's device-generic sparse
// functions, registered here as they are for SparseCPU; every other op runs its
// SparseCPU kernel on aliases through the fallback (Fallback.cpp), and dense kernels
// returning sparse tensors (to_sparse) come back the same way (CpuRedispatch.h).
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace vdev {

namespace {

// The factories make the sparse tensor's empty indices and values on the current
// device before taking the given ones; as CUDA's generated kernels do, they run with
// the requested device current, so a tensor for vdev:1 is made on vdev:1 whatever the
// current device.
at::Tensor empty_sparse(
    c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
    std::optional<at::Device> device, std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse_symint(size, dtype, layout, device, pin_memory, memory_format);
}

at::Tensor new_with_dims(
    int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef size, std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin_memory) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

at::Tensor new_with_dims_and_tensors(
    int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size, const at::Tensor& indices,
    const at::Tensor& values, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
    std::optional<at::Device> device, std::optional<bool> pin_memory, std::optional<bool> is_coalesced) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_and_tensor_sparse_symint(
      sparse_dim, dense_dim, size, indices, values, dtype, layout, device, pin_memory, is_coalesced);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_sparse));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(new_with_dims));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(new_with_dims_and_tensors));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
}

} // namespace vdev
