#include "aten/CpuRedispatch.h"

#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_sparse_compressed_tensor_unsafe.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

namespace vdev {

void CpuRedispatch::note_tensor(const at::Tensor& tensor, CpuTensors cpu) {
  if (!tensor.defined()) {
    return;
  }
  if (is_vdev(tensor)) {
    if (accelerator_dtypes_ != nullptr &&
        accelerator_dtypes_->compute_type(tensor.scalar_type()) != c10::ScalarType::Undefined) {
      widening_ = true;
    }
    const c10::DeviceIndex index = tensor.device().index();
    TORCH_CHECK(
        device_ < 0 || device_ == index,
        "Expected all tensors to be on the same device, but found at least two devices, ",
        make_device(device_), " and ", tensor.device(), "! (in ", op_name_, ")");
    device_ = index;
    if (cpu == CpuTensors::Rejected) {
      // A written argument: before any alias of it exists, so all show its own memory.
      end_copy_on_write(tensor);
    }
  } else if (
      tensor.device().is_cpu() &&
      (cpu == CpuTensors::Rejected || (cpu == CpuTensors::ScalarsAllowed && tensor.dim() > 0))) {
    saw_cpu_tensor_ = true;
  }
}

void CpuRedispatch::note_device(const std::optional<c10::Device>& device) {
  if (device.has_value() && device->type() == kDeviceType && device_ < 0) {
    device_ = resolve_device_index(device->index());
  }
}

c10::DeviceIndex CpuRedispatch::device() {
  if (device_ < 0) {
    device_ = current_device();
  }
  TORCH_CHECK(
      !saw_cpu_tensor_,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      make_device(device_), " and cpu! (in ", op_name_, ")");
  return device_;
}

CpuRedispatch::~CpuRedispatch() {
  written_.clear();
  // First, so that the aliases they share a storage with may be kept.
  storage_sharing_aliases_.clear();
  for (auto& [tensor, cpu] : lent_) {
    release_cpu_alias(*tensor, std::move(cpu));
  }
}

const at::Tensor& CpuRedispatch::alias(const at::Tensor& tensor) {
  if (!is_vdev(tensor)) {
    return tensor;
  }
  // A tensor passed twice (self and out= of an in-place op) is one CPU tensor too:
  // kernels tell in-place calls by identity.
  if (const at::Tensor* made = made_alias(tensor)) {
    return *made;
  }
  if (tensor.is_sparse()) {
    return alias_sparse(tensor);
  }
  if (at::sparse_csr::is_sparse_compressed(tensor)) {
    return alias_sparse_compressed(tensor);
  }
  if (tensor.is_nested()) {
    return alias_nested(tensor);
  }
  c10::StorageImpl* device_storage = tensor.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  for (const auto& [alias_storage, shown_storage] : storages_) {
    if (shown_storage == device_storage) {
      const at::Tensor& shared =
          storage_sharing_aliases_
              .emplace_back(
                  tensor.unsafeGetTensorImpl(),
                  cpu_alias_over(
                      tensor, c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(alias_storage))))
              .second;
      return widening_ ? widened(tensor, shared) : shared;
    }
  }
  // Room first: from reusable_cpu_alias on, nothing may throw before the alias is in
  // lent_, to be handed back (a kept alias is lent without a reference of its own).
  storages_.reserve(storages_.size() + 1);
  lent_.reserve(lent_.size() + 1);
  at::Tensor cpu = reusable_cpu_alias(tensor);
  storages_.emplace_back(cpu.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl(), device_storage);
  const at::Tensor& lent = lent_.emplace_back(tensor.unsafeGetTensorImpl(), std::move(cpu)).second;
  return widening_ ? widened(tensor, lent) : lent;
}

const at::Tensor& CpuRedispatch::widened(const at::Tensor& tensor, const at::Tensor& alias) {
  const c10::ScalarType dtype = tensor.scalar_type();
  const c10::ScalarType compute = accelerator_dtypes_->compute_type(dtype);
  if (compute == c10::ScalarType::Undefined) {
    return alias;
  }
  note_widened_type(dtype, compute);
  // The widened copy reads device memory now, before the kernel's Scope: the work
  // queued on the stream (a copy that wrote this tensor) must be complete first.
  synchronize_for_host_op(device(), op_name_);
  return widened_.emplace_back(Widened{tensor.unsafeGetTensorImpl(), alias.to(compute)}).cpu;
}

void CpuRedispatch::note_widened_type(c10::ScalarType dtype, c10::ScalarType compute) {
  bool known = false;
  for (const auto& [original, computed] : widened_types_) {
    known = known || (original == dtype && computed == compute);
  }
  if (!known) {
    widened_types_.emplace_back(dtype, compute);
  }
}

void CpuRedispatch::note_dtype_argument(c10::ScalarType dtype) {
  if (accelerator_dtypes_ == nullptr) {
    return;  // nothing is narrowed
  }
  const c10::ScalarType compute = accelerator_dtypes_->compute_type(dtype);
  if (compute == c10::ScalarType::Undefined) {
    requested_types_.push_back(dtype);
    return;
  }
  widening_ = true;
  note_widened_type(dtype, compute);
}

at::Tensor CpuRedispatch::narrowed(const at::Tensor& cpu) {
  for (const c10::ScalarType requested : requested_types_) {
    if (cpu.scalar_type() == requested) {
      return cpu;
    }
  }
  for (const auto& [original, compute] : widened_types_) {
    const c10::ScalarType narrow = narrowed_type(cpu.scalar_type(), original, compute);
    if (narrow != cpu.scalar_type()) {
      // In device memory, to be adopted without a copy.
      Scope scope(device_, op_name_);
      return cpu.to(narrow);
    }
  }
  return cpu;
}

const at::Tensor& CpuRedispatch::alias_sparse(const at::Tensor& tensor) {
  const at::SparseTensorImpl* sparse = at::sparse::get_sparse_impl(tensor);
  // Held here: a kernel writing the sparse tensor replaces its indices and values, which
  // must outlive this object as alias() requires.
  sparse_parts_.push_back(sparse->indices());
  sparse_parts_.push_back(sparse->values());
  // Copies: making the second alias may move the first.
  at::Tensor indices = alias(sparse->indices());
  at::Tensor values = alias(sparse->values());
  at::Tensor cpu = at::_sparse_coo_tensor_with_dims_and_tensors(
      sparse->sparse_dim(), sparse->dense_dim(), tensor.sizes(), indices, values,
      tensor.options().device(c10::kCPU), sparse->coalesced());
  return lent_.emplace_back(tensor.unsafeGetTensorImpl(), std::move(cpu)).second;
}

const at::Tensor& CpuRedispatch::alias_sparse_compressed(const at::Tensor& tensor) {
  const at::SparseCsrTensorImpl* compressed = at::sparse_csr::get_sparse_csr_impl(tensor);
  // Held here, as alias_sparse's parts.
  sparse_parts_.push_back(compressed->compressed_indices());
  sparse_parts_.push_back(compressed->plain_indices());
  sparse_parts_.push_back(compressed->values());
  at::Tensor compressed_indices = alias(compressed->compressed_indices());
  at::Tensor plain_indices = alias(compressed->plain_indices());
  at::Tensor values = alias(compressed->values());
  at::Tensor cpu = at::_sparse_compressed_tensor_unsafe(
      compressed_indices, plain_indices, values, tensor.sizes(), tensor.options().device(c10::kCPU));
  return lent_.emplace_back(tensor.unsafeGetTensorImpl(), std::move(cpu)).second;
}

// A flat strided tensor over all of `nested`'s storage, on its device.
static at::Tensor whole_storage(const at::Tensor& nested) {
  const int64_t elements = static_cast<int64_t>(nested.storage().nbytes()) / nested.itemsize();
  return at::empty({0}, nested.options().layout(c10::kStrided)).set_(nested.storage(), 0, {elements}, {1});
}

static at::Tensor nested_over(const at::Tensor& buffer, const at::native::NestedTensorImpl& like) {
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, like.get_nested_sizes(), like.get_nested_strides(), like.get_storage_offsets());
}

const at::Tensor& CpuRedispatch::alias_nested(const at::Tensor& tensor) {
  // Held here, as alias_sparse's parts; the sizes, strides and offsets are CPU tensors.
  const at::Tensor& buffer = sparse_parts_.emplace_back(whole_storage(tensor));
  at::Tensor cpu = nested_over(alias(buffer), *at::native::get_nested_tensor_impl(tensor));
  return lent_.emplace_back(tensor.unsafeGetTensorImpl(), std::move(cpu)).second;
}

at::Tensor* CpuRedispatch::made_alias(const at::Tensor& tensor) {
  if (widening_) {
    for (Widened& wide : widened_) {
      if (wide.original == tensor.unsafeGetTensorImpl()) {
        return &wide.cpu;
      }
    }
  }
  return lent_alias(tensor);
}

at::Tensor* CpuRedispatch::lent_alias(const at::Tensor& tensor) {
  auto find = [impl = tensor.unsafeGetTensorImpl()](auto& aliases) -> at::Tensor* {
    for (auto& [aliased_tensor, alias] : aliases) {
      if (aliased_tensor == impl) {
        return &alias;
      }
    }
    return nullptr;
  };
  at::Tensor* made = find(lent_);
  // Almost always empty: only tensors sharing memory with another argument are there.
  return made != nullptr || storage_sharing_aliases_.empty() ? made : find(storage_sharing_aliases_);
}

const at::Tensor& CpuRedispatch::alias_written(const at::Tensor& tensor) {
  const at::Tensor& cpu = alias(tensor);
  if (is_vdev(tensor) && written_original(cpu) == nullptr) {
    if (tensor.is_nested()) {
      // Kernels write its storage in place and keep its sizes: nothing to take over.
    } else if (tensor.is_sparse() || at::sparse_csr::is_sparse_compressed(tensor)) {
      written_.push_back(Written{&tensor, cpu, nullptr, at::Tensor()});
    } else {
      const at::Tensor& narrow_alias = *lent_alias(tensor);
      const bool wide = narrow_alias.unsafeGetTensorImpl() != cpu.unsafeGetTensorImpl();
      written_.push_back(
          Written{&tensor, cpu, narrow_alias.storage().data(), wide ? narrow_alias : at::Tensor()});
    }
  }
  return cpu;
}

at::Generator CpuRedispatch::generator(const std::optional<at::Generator>& generator) {
  return cpu_generator_for(generator, device());
}

// A kernel may resize a written argument: its alias then holds new device memory
// (allocated through the alias storage's allocator), new geometry, or a conjugate or
// negative bit.
void CpuRedispatch::update_written() {
  for (Written& written : written_) {
    if (written.cpu.is_sparse()) {
      update_written_sparse(*written.original, written.cpu);
      continue;
    }
    if (at::sparse_csr::is_sparse_compressed(written.cpu)) {
      at::sparse_csr::get_sparse_csr_impl(*written.original)
          ->set_member_tensors(
              to_device(at::sparse_csr::get_sparse_csr_impl(written.cpu)->compressed_indices()),
              to_device(at::sparse_csr::get_sparse_csr_impl(written.cpu)->plain_indices()), to_device(written.cpu.values()),
              written.cpu.sizes());
      continue;
    }
    if (written.narrow_alias.defined()) {
      Scope scope(device_, op_name_);
      if (written.narrow_alias.sizes() != written.cpu.sizes()) {
        written.narrow_alias.resize_(written.cpu.sizes());
      }
      written.narrow_alias.copy_(written.cpu);
    }
    const at::Tensor& cpu = written.narrow_alias.defined() ? written.narrow_alias : written.cpu;
    c10::StorageImpl* cpu_storage = cpu.storage().unsafeGetStorageImpl();
    c10::TensorImpl* original = written.original->unsafeGetTensorImpl();
    if (cpu_storage->data() != written.original_data) {
      c10::DataPtr data = cpu_storage->set_data_ptr(c10::DataPtr());
      adopt_device_memory(data, device_);
      c10::StorageImpl* device_storage = original->storage().unsafeGetStorageImpl();
      device_storage->set_data_ptr_noswap(std::move(data));
      device_storage->set_nbytes(cpu_storage->nbytes());
    }
    // Some kernels leave their result a lazy conjugate (linalg_lu_solve with left=False).
    if (cpu.is_conj() != original->is_conj()) {
      original->_set_conj(cpu.is_conj());
    }
    if (cpu.is_neg() != original->is_neg()) {
      original->_set_neg(cpu.is_neg());
    }
    if (!same_geometry(*cpu.unsafeGetTensorImpl(), *original)) {
      original->set_sizes_and_strides(
          cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
  }
}

// A sparse tensor's indices and values may be replaced by the kernel (coalescing,
// resizing, adding entries): the original takes over the alias's.
void CpuRedispatch::update_written_sparse(const at::Tensor& original, const at::Tensor& cpu) {
  at::SparseTensorImpl* sparse = at::sparse::get_sparse_impl(original);
  sparse->raw_resize_(cpu.sparse_dim(), cpu.dense_dim(), cpu.sizes());
  sparse->set_indices_and_values_unsafe(to_device(cpu._indices()), to_device(cpu._values()));
  sparse->set_coalesced(cpu.is_coalesced());
}

const at::Tensor* CpuRedispatch::written_original(const at::Tensor& cpu_result) const {
  for (const Written& written : written_) {
    if (written.cpu.unsafeGetTensorImpl() == cpu_result.unsafeGetTensorImpl()) {
      return written.original;
    }
  }
  return nullptr;
}

at::Tensor CpuRedispatch::to_device(const at::Tensor& cpu) {
  if (!cpu.defined() || !cpu.device().is_cpu()) {
    return cpu;
  }
  if (widening_ && cpu.layout() == c10::kStrided) {
    at::Tensor narrow = narrowed(cpu);
    if (!narrow.is_same(cpu)) {
      return to_device(narrow);
    }
  }
  if (cpu.is_sparse()) {
    return at::_sparse_coo_tensor_with_dims_and_tensors(
        cpu.sparse_dim(), cpu.dense_dim(), cpu.sizes(), to_device(cpu._indices()),
        to_device(cpu._values()), cpu.options().device(make_device(device_)), cpu.is_coalesced());
  }
  if (cpu.is_nested()) {
    // Its sizes, strides and offsets were allocated while the kernel ran, from device
    // memory: they become ordinary CPU tensors, as CUDA's nested tensors hold.
    const at::native::NestedTensorImpl& nested = *at::native::get_nested_tensor_impl(cpu);
    return at::detail::make_tensor<at::native::NestedTensorImpl>(
        to_device(whole_storage(cpu)), nested.get_nested_sizes().clone(), nested.get_nested_strides().clone(),
        nested.get_storage_offsets().clone());
  }
  if (at::sparse_csr::is_sparse_compressed(cpu)) {
    return at::_sparse_compressed_tensor_unsafe(
        to_device(at::sparse_csr::get_sparse_csr_impl(cpu)->compressed_indices()), to_device(at::sparse_csr::get_sparse_csr_impl(cpu)->plain_indices()),
        to_device(cpu.values()), cpu.sizes(), cpu.options().device(make_device(device_)));
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      cpu.layout() == c10::kStrided, kBackendName, " supports strided, sparse COO and sparse compressed tensors, not ",
      cpu.layout(), " ones (", op_name_, " returned one)");
  c10::StorageImpl* storage = cpu.storage().unsafeGetStorageImpl();
  for (const auto& [cpu_storage, device_storage] : storages_) {
    if (cpu_storage == storage) {
      return device_tensor_for(
          c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(device_storage)), cpu);
    }
  }
  if (owns_device_memory(storage->data_ptr())) {
    // Fresh device memory, reported as CPU while the kernel ran: its storage becomes a
    // vdev storage in place (no second StorageImpl per result), and later results
    // viewing the same storage find it adopted already.
    if (storage->device_type() != kDeviceType) {
      adopt_device_memory(storage->mutable_data_ptr(), device_);
      storage->set_allocator(&caching_allocator());
    }
    return device_tensor_for(cpu.storage(), cpu);
  }
  // Memory the kernel did not allocate through the CPU allocator (a constant, a
  // CPU argument returned as is): the one case that needs a copy. A copy from pageable
  // memory, which waits for the stream: the fresh block may be one that queued work
  // still uses (a view op's kernel ran without waiting).
  at::Tensor result =
      at::empty_strided(cpu.sizes(), cpu.strides(), cpu.options().device(make_device(device_)));
  result.copy_(cpu);
  return result;
}

} // namespace vdev
