// Views and storage manipulation. Views share the base's storage and stay vdev
// TensorImpls; resizing reallocates through the storage's (vdev) allocator.
#include "aten/Tensor.h"
#include "runtime/Allocator.h"

#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <torch/library.h>

#include <ATen/ops/_conj_native.h>
#include <ATen/ops/_neg_view_native.h>
#include <ATen/ops/_unsafe_view_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/set_native.h>

namespace vdev {
namespace {

at::Tensor as_strided(
    const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  at::Tensor result =
      view_of_storage(self.storage(), self, self.sizes(), self.strides(), self.storage_offset());
  at::native::setStrided(result, size, stride, storage_offset.value_or(self.storage_offset()));
  return result;
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  at::DimVector shape = at::infer_size_dv(size, self.numel());
  std::optional<at::DimVector> stride =
      at::detail::computeStride(self.sizes(), self.strides(), shape);
  TORCH_CHECK(
      stride.has_value(),
      "view size is not compatible with input tensor's size and stride (at least one "
      "dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
  return view_of_storage(self.storage(), self, shape, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return view_of_storage(self.storage(), self, size, stride, self.storage_offset());
}

// ATen's CPU resize_ would copy a growing storage's bytes on the host at once, before
// the queued kernels that write them ran: the storage grows on the stream first
// (resize_device_storage), then ATen sets the geometry.
const at::Tensor& resize(
    const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
  c10::StorageImpl* storage = self.storage().unsafeGetStorageImpl();
  const size_t old_nbytes = storage->nbytes();
  const size_t nbytes = at::detail::computeStorageNbytesContiguous(size, self.itemsize(), self.storage_offset());
  const bool grows = c10::multiply_integers(size) > 0 && nbytes > old_nbytes;
  if (grows) {
    resize_device_storage(storage, nbytes);
  }
  at::native::resize_(self, size, memory_format);
  if (grows && at::globalContext().deterministicAlgorithms() &&
      at::globalContext().deterministicFillUninitializedMemory()) {
    at::native::fill_resize_deterministic_(self, static_cast<int64_t>(old_nbytes));
  }
  return self;
}

// ATen's generic kernels for these views make plain TensorImpls; the result is
// re-made as a vdev TensorImpl over the same storage and geometry.
at::Tensor as_vdev_view(const at::Tensor& view) {
  return view_of_storage(
      view.storage(), view, view.sizes(), view.strides(), view.storage_offset());
}

at::Tensor alias(const at::Tensor& self) {
  return as_vdev_view(at::native::alias(self));
}

at::Tensor conj_view(const at::Tensor& self) {
  return as_vdev_view(at::native::_conj(self));
}

at::Tensor neg_view(const at::Tensor& self) {
  return as_vdev_view(at::native::_neg_view(self));
}

at::Tensor view_dtype(const at::Tensor& self, c10::ScalarType dtype) {
  return as_vdev_view(at::native::view_dtype(self, dtype));
}

at::Tensor unsafe_view(const at::Tensor& self, c10::IntArrayRef size) {
  return as_vdev_view(at::native::_unsafe_view(self, size));
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_storage_offset(
    at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  TORCH_CHECK(
      source.device() == self.device(), "Expected a storage on ", self.device(),
      " to set a tensor on it, got a storage on ", source.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  return set_storage_offset(self, new_storage(0, self.device().index()), 0, {0}, {});
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("alias", TORCH_FN(alias));
  m.impl("_conj", TORCH_FN(conj_view));
  m.impl("_neg_view", TORCH_FN(neg_view));
  m.impl("view.dtype", TORCH_FN(view_dtype));
  m.impl("_unsafe_view", TORCH_FN(unsafe_view));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

} // namespace vdev
