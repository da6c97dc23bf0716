// The metadata of a strided nested vdev tensor - its components' sizes, strides and
// storage offsets - are CPU tensors, as on CUDA. The ops that read them return those
// CPU tensors, and the ops that take them as arguments next to device tensors accept
// them, as CUDA's do: ATen's own device-generic kernels (those of NestedTensorCPU and
// NestedTensorCUDA, or of CPU), registered instead of the fallback, which would make
// vdev copies of the metadata or refuse it as a CPU tensor among device ones.
#include <ATen/ops/_nested_from_padded_native.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_nested_view_from_buffer_native.h>
#include <torch/library.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_nested_tensor_size", TORCH_FN(at::native::_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(at::native::_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(at::native::_nested_tensor_storage_offsets));
}

// A nested view of a dense buffer, and a nested tensor from a padded one (masked_select
// on the device), given the components' sizes on the CPU.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_view_from_buffer", TORCH_FN(at::native::_nested_view_from_buffer));
  m.impl("_nested_from_padded", TORCH_FN(at::native::nested_from_padded_generic));
}

} // namespace vdev
