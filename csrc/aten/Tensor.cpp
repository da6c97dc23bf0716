#include "aten/Tensor.h"

#include "runtime/Allocator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstring>

namespace vdev {
namespace {
const c10::DispatchKeySet kKeySet{c10::DispatchKey::PrivateUse1};

// The vdev equivalent of a CPU tensor's key set, the autocast key included (else
// autocast("vdev") would pass over the results of ops).
c10::DispatchKeySet vdev_key_set(c10::DispatchKeySet cpu) {
  constexpr c10::BackendComponent kCpu = c10::BackendComponent::CPUBit;
  constexpr c10::BackendComponent kVdev = c10::BackendComponent::PrivateUse1Bit;
  return (cpu - c10::getAutocastRelatedKeySetFromBackend(kCpu)).remove_backend(kCpu) |
      c10::DispatchKeySet(kVdev) | c10::getAutocastRelatedKeySetFromBackend(kVdev);
}
} // namespace

TensorImpl::TensorImpl(c10::Storage&& storage, caffe2::TypeMeta dtype)
    : c10::TensorImpl(std::move(storage), kKeySet, dtype) {}

TensorImpl::TensorImpl(
    c10::TensorImpl::ImplType view, c10::Storage&& storage, c10::DispatchKeySet base_key_set,
    caffe2::TypeMeta dtype)
    : c10::TensorImpl(view, std::move(storage), base_key_set, dtype) {}

TensorImpl::TensorImpl(
    c10::Storage&& storage, const c10::TensorImpl& cpu_result, c10::DispatchKeySet key_set)
    // Made with the key set of an inference tensor, which gets no version counter of
    // its own, then given the real one.
    : c10::TensorImpl(c10::TensorImpl::VIEW, std::move(storage), kKeySet, cpu_result.dtype()) {
  key_set_ = key_set - c10::python_ks;
  if (!is_inference()) {
    version_counter_ = cpu_result.version_counter();
  }
}

template <typename VersionCounter>
c10::intrusive_ptr<c10::TensorImpl> TensorImpl::detached_copy(
    VersionCounter&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<TensorImpl>(c10::Storage(storage()), dtype());
  copy_tensor_metadata(
      this, impl.get(), std::forward<VersionCounter>(version_counter),
      allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> TensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  return detached_copy(version_counter, allow_tensor_metadata_change);
}

c10::intrusive_ptr<c10::TensorImpl> TensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  return detached_copy(std::move(version_counter), allow_tensor_metadata_change);
}

void TensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  TORCH_CHECK(
      impl->device_type() == kDeviceType, "Cannot shallow-copy a ", impl->device_type(),
      " tensor into a ", kBackendName, " tensor");
  copy_tensor_metadata(impl.get(), this, version_counter(), allow_tensor_metadata_change());
  refresh_numel();
  refresh_contiguous();
}

TensorImpl::~TensorImpl() {
  const uintptr_t kept = kept_alias_.load(std::memory_order_acquire);
  // An op holds the tensors it lends aliases of: none is lent now.
  TORCH_INTERNAL_ASSERT((kept & kLentBit) == 0);
  if (kept != 0) {
    c10::intrusive_ptr<c10::TensorImpl>::reclaim(reinterpret_cast<c10::TensorImpl*>(kept));
  }
}

c10::intrusive_ptr<c10::TensorImpl> TensorImpl::borrow_kept_alias() {
  uintptr_t kept = kept_alias_.load(std::memory_order_relaxed);
  if (kept == 0 || (kept & kLentBit) != 0 ||
      !kept_alias_.compare_exchange_strong(
          kept, kept | kLentBit, std::memory_order_acquire, std::memory_order_relaxed)) {
    return c10::intrusive_ptr<c10::TensorImpl>();
  }
  return c10::intrusive_ptr<c10::TensorImpl>::reclaim(reinterpret_cast<c10::TensorImpl*>(kept));
}

void TensorImpl::return_kept_alias(c10::intrusive_ptr<c10::TensorImpl>& alias, bool keep) {
  if (keep) {
    kept_alias_.store(reinterpret_cast<uintptr_t>(alias.release()), std::memory_order_release);
  } else {
    kept_alias_.store(0, std::memory_order_release);
  }
}

void TensorImpl::keep_alias(c10::intrusive_ptr<c10::TensorImpl> alias) {
  uintptr_t expected = 0;
  if (kept_alias_.compare_exchange_strong(
          expected, reinterpret_cast<uintptr_t>(alias.get()), std::memory_order_release,
          std::memory_order_relaxed)) {
    alias.release();
  }
}

c10::Storage new_storage(size_t nbytes, c10::DeviceIndex device) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes,
      allocate_device_memory(device, nbytes, make_device(device)), &caching_allocator(),
      /*resizable=*/true));
}

at::Tensor empty_tensor(
    c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device,
    c10::MemoryFormat memory_format) {
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(dtype);
  c10::Storage storage = new_storage(
      at::detail::computeStorageNbytesContiguous(sizes, meta.itemsize()), device);
  auto tensor = at::detail::make_tensor<TensorImpl>(std::move(storage), meta);
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  if (memory_format != c10::MemoryFormat::Contiguous) {
    tensor.unsafeGetTensorImpl()->empty_tensor_restride(memory_format);
  }
  return tensor;
}

at::Tensor empty_strided_tensor(
    c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype, c10::DeviceIndex device) {
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(dtype);
  c10::Storage storage =
      new_storage(at::detail::computeStorageNbytes(sizes, strides, meta.itemsize()), device);
  auto tensor = at::detail::make_tensor<TensorImpl>(std::move(storage), meta);
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return tensor;
}

LaunchedTensor::LaunchedTensor(const at::Tensor& tensor)
    : device_storage(tensor.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()),
      data(const_cast<void*>(device_storage->data())),
      storage_nbytes(device_storage->nbytes()),
      dtype(tensor.dtype()),
      sizes(tensor.sizes().begin(), tensor.sizes().end()),
      strides(tensor.strides().begin(), tensor.strides().end()),
      storage_offset(tensor.storage_offset()),
      conj(tensor.is_conj()),
      neg(tensor.is_neg()),
      inference(tensor.is_inference()) {}

namespace {
at::Tensor with_geometry(
    at::Tensor tensor, const at::Tensor& like, c10::IntArrayRef sizes, c10::IntArrayRef strides,
    int64_t storage_offset) {
  auto* impl = tensor.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return tensor;
}
} // namespace

at::Tensor view_of_storage(
    c10::Storage storage, const at::Tensor& like, c10::IntArrayRef sizes,
    c10::IntArrayRef strides, int64_t storage_offset) {
  return with_geometry(
      at::detail::make_tensor<TensorImpl>(
          c10::TensorImpl::VIEW, std::move(storage), like.key_set(), like.dtype()),
      like, sizes, strides, storage_offset);
}

at::Tensor device_tensor_for(c10::Storage storage, const at::Tensor& cpu_result) {
  return with_geometry(
      at::detail::make_tensor<TensorImpl>(
          std::move(storage), *cpu_result.unsafeGetTensorImpl(), vdev_key_set(cpu_result.key_set())),
      cpu_result, cpu_result.sizes(), cpu_result.strides(), cpu_result.storage_offset());
}

namespace {
void release_device_storage(void* device_storage) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(device_storage));
}

void release_weak_device_storage(void* device_storage) {
  c10::raw::weak_intrusive_ptr::decref(static_cast<c10::StorageImpl*>(device_storage));
}

// The memory of `device_storage` as seen from CPU. It holds a reference to the device
// storage, released with it, so the memory outlives whatever a kernel keeps of an alias.
// Copy-on-write memory stays shared (as a CPU kernel reading a lazy clone leaves it):
// whoever writes through an alias ends the sharing first (end_copy_on_write).
c10::DataPtr cpu_data_of(c10::StorageImpl* device_storage) {
  c10::raw::intrusive_ptr::incref(device_storage);
  return c10::DataPtr(
      const_cast<void*>(device_storage->data()), device_storage, &release_device_storage,
      c10::Device(c10::kCPU));
}

// The same, for a kept alias: it holds the device storage weakly, so it keeps neither
// the memory nor (once the tensor lets go of it) the storage's allocation alive.
// While an op runs, its arguments hold the storage; an alias that outlives its op is
// made to hold it (hold_device_memory).
c10::DataPtr weak_cpu_data_of(c10::StorageImpl* device_storage) {
  c10::raw::weak_intrusive_ptr::incref(device_storage);
  return c10::DataPtr(
      const_cast<void*>(device_storage->data()), device_storage, &release_weak_device_storage,
      c10::Device(c10::kCPU));
}

bool holds_weakly(const c10::DataPtr& data) {
  return data.get_deleter() == &release_weak_device_storage;
}

// True if `alias_storage` is what weak_cpu_data_of made of `device_storage` as it is
// now: then a kept alias needs no new data pointer.
bool shows(const c10::StorageImpl& alias_storage, c10::StorageImpl* device_storage) {
  const c10::DataPtr& data = alias_storage.data_ptr();
  return holds_weakly(data) && data.get_context() == device_storage &&
      data.get() == device_storage->data() && alias_storage.nbytes() == device_storage->nbytes() &&
      alias_storage.resizable() == device_storage->resizable();
}

void hold_device_memory(c10::StorageImpl& alias_storage) {
  if (holds_weakly(alias_storage.data_ptr())) {
    alias_storage.set_data_ptr_noswap(
        cpu_data_of(static_cast<c10::StorageImpl*>(alias_storage.data_ptr().get_context())));
  }
}

void let_go_of_device_memory(c10::StorageImpl& alias_storage) {
  const c10::DataPtr& data = alias_storage.data_ptr();
  if (data.get_deleter() == &release_device_storage) {
    alias_storage.set_data_ptr_noswap(
        weak_cpu_data_of(static_cast<c10::StorageImpl*>(data.get_context())));
  } else if (!holds_weakly(data)) {
    // A kernel gave the alias other memory (update_written took it over).
    alias_storage.set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
  }
}
} // namespace

void end_copy_on_write(const at::Tensor& tensor) {
  if (tensor.has_storage()) {
    // Copies the memory if it is a lazy clone's, shared copy-on-write; else does nothing.
    tensor.storage().unsafeGetStorageImpl()->mutable_data();
  }
}

namespace {
at::Tensor shared_cpu_alias(const at::Tensor& tensor) {
  const c10::Storage& storage = tensor.storage();
  return cpu_alias_over(
      tensor,
      c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), storage.nbytes(),
          cpu_data_of(storage.unsafeGetStorageImpl()), cpu_view_allocator(tensor.device().index()),
          storage.resizable())));
}
} // namespace

namespace {
// A CPU tensor over `alias_storage` with the given geometry. It is an inference tensor
// exactly when `inference` (a TensorImpl takes that from the mode it is made in), and
// has a version counter of its own unless it is one.
at::Tensor new_cpu_alias(
    c10::Storage alias_storage, caffe2::TypeMeta dtype, bool inference, c10::IntArrayRef sizes,
    c10::IntArrayRef strides, int64_t storage_offset, bool conj, bool neg) {
  std::optional<c10::InferenceMode> same_inference_mode;
  if (inference != c10::InferenceMode::is_enabled()) {
    same_inference_mode.emplace(inference);
  }
  auto alias = at::detail::make_tensor<c10::TensorImpl>(
      std::move(alias_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
  auto* impl = alias.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  impl->_set_conj(conj);
  impl->_set_neg(neg);
  return alias;
}
} // namespace

at::Tensor cpu_alias_over(const at::Tensor& tensor, c10::Storage alias_storage) {
  at::Tensor alias = new_cpu_alias(
      std::move(alias_storage), tensor.dtype(), tensor.is_inference(), tensor.sizes(), tensor.strides(),
      tensor.storage_offset(), tensor.is_conj(), tensor.is_neg());
  // Sharing the tensor's version counter, a write through the alias bumps the tensor's
  // version as the same write on CPU would.
  if (!tensor.is_inference()) {
    alias.unsafeGetTensorImpl()->set_version_counter(tensor.unsafeGetTensorImpl()->version_counter());
  }
  return alias;
}

namespace {
// Aliases LaunchAliases::recycle took back on this thread: each alone in holding its
// TensorImpl, its StorageImpl and its version counter, none of an inference tensor.
using RecycledAliases = c10::SmallVector<c10::intrusive_ptr<c10::TensorImpl>, 8>;
RecycledAliases& recycled_aliases() {
  thread_local RecycledAliases recycled;
  return recycled;
}

// A recycled alias of `tensor`'s dtype, re-pointed at its memory as it was at the
// launch; null if none was recycled.
at::Tensor recycled_alias(const LaunchedTensor& tensor) {
  RecycledAliases& recycled = recycled_aliases();
  for (auto it = recycled.begin(); it != recycled.end(); ++it) {
    if ((*it)->dtype() != tensor.dtype) {
      continue;
    }
    c10::intrusive_ptr<c10::TensorImpl> impl = std::move(*it);
    recycled.erase(it);
    c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(c10::DataPtr(tensor.data, c10::Device(c10::kCPU)));
    storage->set_nbytes(tensor.storage_nbytes);
    impl->set_sizes_and_strides(tensor.sizes, tensor.strides, tensor.storage_offset);
    impl->_set_conj(tensor.conj);
    impl->_set_neg(tensor.neg);
    return at::Tensor(std::move(impl));
  }
  return at::Tensor();
}
} // namespace

void LaunchAliases::recycle(at::Tensor&& alias) {
  constexpr size_t kMostRecycled = 8;
  RecycledAliases& recycled = recycled_aliases();
  if (!alias.defined() || recycled.size() >= kMostRecycled) {
    return;
  }
  c10::intrusive_ptr<c10::TensorImpl> impl = alias.unsafeReleaseIntrusivePtr();
  // A kernel may have kept the alias, made a view of it, or given it autograd state.
  if (impl.use_count() != 1 || impl->unsafe_storage().use_count() != 1 || impl->is_inference() ||
      impl->autograd_meta() != nullptr || !impl->version_counter().unique()) {
    return;
  }
  recycled.push_back(std::move(impl));
}

at::Tensor LaunchAliases::alias(const LaunchedTensor& tensor) {
  c10::Storage* alias_storage = nullptr;
  for (auto& [shown, storage] : storages_) {
    if (shown == tensor.device_storage) {
      alias_storage = &storage;
      break;
    }
  }
  if (alias_storage == nullptr && !tensor.inference) {
    at::Tensor alias = recycled_alias(tensor);
    if (alias.defined()) {
      storages_.emplace_back(tensor.device_storage, alias.storage());
      return alias;
    }
  }
  if (alias_storage == nullptr) {
    alias_storage = &storages_
                         .emplace_back(
                             tensor.device_storage,
                             c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                                 c10::StorageImpl::use_byte_size_t(), tensor.storage_nbytes,
                                 c10::DataPtr(tensor.data, c10::Device(c10::kCPU)),
                                 /*allocator=*/nullptr, /*resizable=*/false)))
                         .second;
  }
  return new_cpu_alias(
      *alias_storage, tensor.dtype, tensor.inference, tensor.sizes, tensor.strides, tensor.storage_offset,
      tensor.conj, tensor.neg);
}

at::Tensor cpu_alias(const at::Tensor& tensor) {
  end_copy_on_write(tensor);
  return shared_cpu_alias(tensor);
}

namespace {
// VariableVersion offers no identity, but is a single intrusive pointer: equal bytes
// are the same counter. Comparing first spares a kept alias two atomic reference-count
// updates per op when (as almost always) it shares its tensor's counter already.
bool same_counter(const c10::VariableVersion& a, const c10::VariableVersion& b) {
  static_assert(sizeof(c10::VariableVersion) == sizeof(void*));
  return std::memcmp(&a, &b, sizeof(c10::VariableVersion)) == 0;
}
} // namespace

at::Tensor reusable_cpu_alias(const at::Tensor& tensor) {
  TensorImpl* owner = as_vdev_tensor_impl(tensor.unsafeGetTensorImpl());
  c10::intrusive_ptr<c10::TensorImpl> kept =
      owner == nullptr ? c10::intrusive_ptr<c10::TensorImpl>() : owner->borrow_kept_alias();
  if (!kept) {
    return shared_cpu_alias(tensor);
  }
  // The alias's type, key set (inference or not) and autograd state are what a new
  // alias would have; so is everything set below.
  if (kept->dtype() != owner->dtype() || kept->autograd_meta() != nullptr) {
    owner->return_kept_alias(kept, /*keep=*/false);
    return shared_cpu_alias(tensor);
  }
  // A vdev TensorImpl always has a storage: no need for storage()'s check.
  c10::StorageImpl* device_storage = owner->unsafe_storage().unsafeGetStorageImpl();
  c10::StorageImpl* alias_storage = kept->unsafe_storage().unsafeGetStorageImpl();
  if (!shows(*alias_storage, device_storage)) {
    alias_storage->set_data_ptr_noswap(weak_cpu_data_of(device_storage));
    alias_storage->set_nbytes(device_storage->nbytes());
    alias_storage->set_allocator(cpu_view_allocator(tensor.device().index()));
    alias_storage->set_resizable(device_storage->resizable());
  }
  if (!same_geometry(*kept, *owner)) {
    kept->set_sizes_and_strides(owner->sizes(), owner->strides(), owner->storage_offset());
  }
  kept->_set_conj(owner->is_conj());
  kept->_set_neg(owner->is_neg());
  if (!owner->is_inference() && !same_counter(kept->version_counter(), owner->version_counter())) {
    kept->set_version_counter(owner->version_counter());
  }
  return at::Tensor(std::move(kept));
}

void release_cpu_alias(c10::TensorImpl& tensor, at::Tensor&& alias) {
  TensorImpl* owner = as_vdev_tensor_impl(&tensor);
  if (owner == nullptr) {
    return;  // not a dense vdev tensor (a sparse one, or a CPU tensor holding vdev memory)
  }
  c10::intrusive_ptr<c10::TensorImpl> impl = alias.unsafeReleaseIntrusivePtr();
  c10::StorageImpl& storage = *impl->unsafe_storage().unsafeGetStorageImpl();
  const bool lent = owner->lent(impl.get());
  if (impl.use_count() != 1 || impl->unsafe_storage().use_count() != 1 ||
      impl->pyobj_slot()->load_pyobj() != nullptr || storage.pyobj_slot()->load_pyobj() != nullptr) {
    // The alias outlives the op (a kernel kept it, or gave it to Python): it must keep
    // the memory it shows alive, and is kept no longer.
    hold_device_memory(storage);
    if (lent) {
      owner->return_kept_alias(impl, /*keep=*/false);
    }
    return;
  }
  // Kept, the alias must not keep the device memory alive: the tensor may move to
  // other memory, or die, before its next op.
  let_go_of_device_memory(storage);
  if (lent) {
    owner->return_kept_alias(impl, /*keep=*/true);
  } else {
    owner->keep_alias(std::move(impl));
  }
}

} // namespace vdev
