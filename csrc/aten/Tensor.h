#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <typeinfo>

namespace vdev {

// The TensorImpl of every vdev tensor, views included.
class VDEV_API TensorImpl final : public c10::TensorImpl {
 public:
  TensorImpl(c10::Storage&& storage, caffe2::TypeMeta dtype);
  // A view keeps its base's key set: a view of a normal tensor made in inference
  // mode is a normal tensor.
  TensorImpl(
      c10::TensorImpl::ImplType view, c10::Storage&& storage, c10::DispatchKeySet base_key_set,
      caffe2::TypeMeta dtype);
  // The vdev tensor for a CPU kernel's result over `storage`: it takes the result's
  // version counter over rather than allocating one (as c10::TensorImpl's
  // constructors do), which an op would otherwise pay for twice per result.
  TensorImpl(c10::Storage&& storage, const c10::TensorImpl& cpu_result, c10::DispatchKeySet key_set);

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter,
      bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

  ~TensorImpl() override;

  // The CPU alias kept for this tensor's ops (see reusable_cpu_alias), lent to one op
  // at a time: null if none is kept or another op has it. The lent pointer carries
  // the kept reference; give it back with return_kept_alias.
  c10::intrusive_ptr<c10::TensorImpl> borrow_kept_alias();
  // True if `alias` is this tensor's kept alias, lent to the caller.
  bool lent(const c10::TensorImpl* alias) const {
    return kept_alias_.load(std::memory_order_relaxed) ==
        (reinterpret_cast<uintptr_t>(alias) | kLentBit);
  }
  // Gives a borrowed alias back: kept for the next op if `keep`, else no longer kept
  // (the caller's pointer then holds the reference the tensor held).
  void return_kept_alias(c10::intrusive_ptr<c10::TensorImpl>& alias, bool keep);
  // Keeps a new alias unless one is kept (or lent) already.
  void keep_alias(c10::intrusive_ptr<c10::TensorImpl> alias);

 private:
  template <typename VersionCounter>
  c10::intrusive_ptr<c10::TensorImpl> detached_copy(
      VersionCounter&& version_counter, bool allow_tensor_metadata_change) const;

  // The kept alias, owning one reference (intrusive_ptr released into it), with
  // kLentBit set while an op has it. Lending takes one atomic compare-and-swap and
  // giving back a plain store: a lock-prefixed instruction costs about 5 ns, and this
  // runs for every argument of every op.
  static constexpr uintptr_t kLentBit = 1;
  std::atomic<uintptr_t> kept_alias_{0};
};

inline bool is_vdev(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kDeviceType;
}

// A 0-dim CPU tensor, which TensorIterator lets join device tensors as a scalar operand.
inline bool is_cpu_scalar(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cpu() && tensor.dim() == 0;
}

// `impl` as a vdev TensorImpl, or nullptr. Every tensor vdev makes has a vdev
// TensorImpl; a CPU tensor moved in place (`cpu_tensor.data = vdev_tensor`, see
// _has_compatible_shallow_copy_type) keeps its own. TensorImpl is final, so comparing
// exact types suffices: this runs for every argument of every op, where dynamic_cast's
// walk of the class hierarchy showed in profiles.
inline TensorImpl* as_vdev_tensor_impl(c10::TensorImpl* impl) {
  return typeid(*impl) == typeid(TensorImpl) ? static_cast<TensorImpl*>(impl) : nullptr;
}

inline bool has_vdev_tensor_impl(const at::Tensor& tensor) {
  return as_vdev_tensor_impl(tensor.unsafeGetTensorImpl()) != nullptr;
}

// Element by element: most tensors have few dimensions, for which the call to memcmp
// that comparing IntArrayRefs makes costs more than the comparison.
inline bool same_values(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      return false;
    }
  }
  return true;
}

// Same sizes, strides and storage offset.
inline bool same_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  return a.storage_offset() == b.storage_offset() && same_values(a.sizes(), b.sizes()) &&
      same_values(a.strides(), b.strides());
}

// Uninitialised device memory of `device` as a resizable storage.
c10::Storage new_storage(size_t nbytes, c10::DeviceIndex device);

// A new uninitialised contiguous (or `memory_format`) vdev tensor.
at::Tensor empty_tensor(
    c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device,
    c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous);

// A vdev tensor viewing `storage` with the given geometry (and `like`'s conj/neg bits).
at::Tensor view_of_storage(
    c10::Storage storage, const at::Tensor& like, c10::IntArrayRef sizes,
    c10::IntArrayRef strides, int64_t storage_offset);

// The vdev tensor for `cpu_result`, a CPU kernel's result over `storage`'s memory:
// its geometry, conj/neg bits and version counter.
at::Tensor device_tensor_for(c10::Storage storage, const at::Tensor& cpu_result);

// A CPU tensor over the same memory, sizes, strides and offset as a vdev tensor, so
// that CPU kernels read and write device memory directly. It keeps the device
// storage alive, shares the tensor's version counter, and a CPU kernel that
// resizes it allocates device memory. The tensor stops sharing memory copy-on-write
// (a lazy clone's) first, so the alias may be written.
at::Tensor cpu_alias(const at::Tensor& tensor);
// Gives `tensor` memory of its own if it shares a lazy clone's copy-on-write memory,
// as a CPU write to it would: done before anything writes through an alias.
void end_copy_on_write(const at::Tensor& tensor);
// The same over `alias_storage`, an alias storage of `tensor`'s device storage made
// for another tensor. ATen's overlap checks (in-place ops, copies) compare storages,
// so tensors that share memory must reach one kernel as aliases sharing one storage.
// The alias shares the tensor's version counter (a kernel launched on a stream gets
// aliases with their own: LaunchAliases).
at::Tensor cpu_alias_over(const at::Tensor& tensor, c10::Storage alias_storage);

// cpu_alias for the arguments of a CPU kernel, leaving copy-on-write memory shared (the
// caller ends the sharing of the arguments the kernel writes). Making an alias (a TensorImpl and a
// StorageImpl) is most of an op's overhead, so the alias of the tensor's last op is
// reused: between ops a kept alias keeps its data pointer but holds the device storage
// only weakly (no memory stays alive for it), and taking it sets all that cpu_alias
// would (memory if the tensor moved, geometry, version counter) anew, whatever the
// last kernel did to it. Hand it back with release_cpu_alias after the op.
at::Tensor reusable_cpu_alias(const at::Tensor& tensor);
// Keeps `alias` for `tensor`'s next op if nothing but the caller holds it (a kernel
// may have kept a reference, or given it to Python).
void release_cpu_alias(c10::TensorImpl& tensor, at::Tensor&& alias);

// A new uninitialised vdev tensor with the given sizes and strides.
at::Tensor empty_strided_tensor(
    c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype, c10::DeviceIndex device);

// A vdev tensor as a kernel launched on a stream will see it: its memory and geometry
// at the launch (the host may change them before the kernel runs), noted on the
// launching thread. Noting copies a few words; the CPU alias (a StorageImpl, a
// TensorImpl, a version counter) is made by LaunchAliases, for a launched op on the
// stream's worker when its kernel runs.
struct LaunchedTensor {
  explicit LaunchedTensor(const at::Tensor& tensor);

  // Which storage: tensors noted for one kernel are alive while they are noted, so
  // distinct pointers are distinct storages. Never dereferenced afterwards.
  const c10::StorageImpl* device_storage;
  void* data;
  size_t storage_nbytes;
  caffe2::TypeMeta dtype;
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  int64_t storage_offset;
  bool conj;
  bool neg;
  bool inference;
};

// CPU aliases for a kernel launched on a stream: CPU tensors over vdev tensors' memory
// as it was at the launch that do not own it. As on CUDA, queued work keeps no memory
// alive: the caching allocator reuses a freed block only for work ordered after it on
// the block's stream, and other streams' use must be recorded (record_stream).
// Tensors over one device storage get aliases over one CPU storage, so kernels see
// their overlap as on the CPU. Each alias has its own version counter: the host bumped
// the version when it launched the op, and a bump when the kernel runs would come at a
// time the host cannot order (autograd would see a saved tensor change under it).
class LaunchAliases {
 public:
  at::Tensor alias(const LaunchedTensor& tensor);
  at::Tensor alias(const at::Tensor& tensor) {
    return alias(LaunchedTensor(tensor));
  }
  // Takes back `alias`, made by alias() on this thread, once its kernel ran (and the
  // LaunchAliases that made it is gone). If nothing else holds it, a later alias() on
  // this thread re-points it rather than making a TensorImpl, a StorageImpl and a
  // version counter anew and freeing these (about half of a small kernel's cost on a
  // stream's worker).
  static void recycle(at::Tensor&& alias);

 private:
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> storages_;
};

// `tensor` itself when on CPU, its CPU alias when on vdev.
inline at::Tensor as_cpu(const at::Tensor& tensor) {
  return is_vdev(tensor) ? cpu_alias(tensor) : tensor;
}

} // namespace vdev
