#pragma once

#include "aten/AcceleratorDtypes.h"
#include "aten/Tensor.h"
#include "profiler/DeviceActivity.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/HostAccess.h"
#include "runtime/Stream.h"

#include <ATen/core/Generator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace vdev {

// The state of one op call that runs ATen's CPU kernel for vdev tensors. Device
// memory is host RAM, so nothing is copied:
//  - arguments become CPU aliases of device memory (alias, alias_written) that share
//    their tensor's version counter, so writes the CPU kernel makes through nested
//    in-place ops bump versions exactly as on CPU (the op's own autograd was handled
//    above this kernel and nothing the kernel does on aliases requires grad);
//  - while the kernel runs (Scope), the thread's CPU allocations come from the
//    device's allocator, so fresh outputs already live in device memory;
//  - results become vdev tensors (to_device): views of an argument's storage, fresh
//    device memory adopted as is, or - for memory the kernel did not allocate - a copy;
//  - written arguments take over what the kernel did to their aliases (update_written);
//  - a sparse COO (compressed) tensor is a SparseCPU (SparseCsrCPU) tensor over aliases
//    of its indices and values, and a sparse result becomes a vdev sparse tensor over
//    its converted ones;
//  - for an op with accelerator dtypes (AcceleratorDtypes.h) called with one (a tensor
//    or a dtype= argument), arguments of those dtypes reach the kernel as copies in the
//    dtype it computes them in, and results come back narrowed (written arguments by a
//    copy back).
// Used by the boxed fallback and by the unboxed native kernels (CpuKernel.h).
class CpuRedispatch {
 public:
  explicit CpuRedispatch(const char* op_name) : op_name_(op_name) {}
  // Hands the aliases back to their tensors for their next op.
  ~CpuRedispatch();
  CpuRedispatch(const CpuRedispatch&) = delete;
  CpuRedispatch& operator=(const CpuRedispatch&) = delete;

  // Which CPU tensors an argument may hold. As on CUDA, an op may read 0-dim CPU
  // tensors as scalars and take CPU index lists, but writes only device tensors.
  enum class CpuTensors { ScalarsAllowed, Allowed, Rejected };
  // Device discovery: every vdev tensor must be on one device, and CPU tensors are
  // taken as `cpu` says. A written (Rejected) vdev tensor stops sharing copy-on-write
  // memory here, before any alias is made, as a CPU write would end it.
  void note_tensor(const at::Tensor& tensor, CpuTensors cpu = CpuTensors::ScalarsAllowed);
  void note_device(const std::optional<c10::Device>& device);
  // The op's accelerator dtypes, from accelerator_dtypes(); before note_tensor.
  void accept_accelerator_dtypes(const AcceleratorDtypes* dtypes) {
    accelerator_dtypes_ = dtypes;
  }
  // A dtype argument (prod's dtype=), before note_tensor's aliases are made: an
  // accelerator dtype widens the call as a tensor of it does (prod of float32 into
  // complex32); any other is a result dtype the caller asked for, which results keep
  // (prod of complex32 into complex64 is complex64, not narrowed).
  void note_dtype_argument(c10::ScalarType dtype);
  // A dtype argument as the kernel receives it: the compute dtype of an accelerator
  // dtype when the call widens.
  c10::ScalarType dtype_argument(c10::ScalarType dtype) const {
    if (widening_) {
      const c10::ScalarType compute = accelerator_dtypes_->compute_type(dtype);
      return compute == c10::ScalarType::Undefined ? dtype : compute;
    }
    return dtype;
  }
  // The device the op runs on (the current device if nothing named one).
  c10::DeviceIndex device();

  // The tensors must outlive this object, which hands their aliases back at its end.
  // `tensor` itself if it is not a vdev tensor. The reference lasts until the next
  // alias is made.
  const at::Tensor& alias(const at::Tensor& tensor);
  const at::Tensor& alias_written(const at::Tensor& tensor);
  // The alias made for `tensor` in this call, or nullptr. Kernels are handed these
  // once all aliases are made, so a tensor passed twice reaches the kernel as one
  // object, as on the CPU: kernels such as addr_'s tell in-place calls by address.
  // The reference lasts until the next alias is made.
  at::Tensor* made_alias(const at::Tensor& tensor);
  // The alias of `tensor`'s own memory made in this call (not its widened copy), or nullptr.
  at::Tensor* lent_alias(const at::Tensor& tensor);
  // The CPU generator for a vdev generator (or the device's default for none).
  at::Generator generator(const std::optional<at::Generator>& generator);

  void update_written();
  // The original vdev tensor whose alias the kernel returned (in-place, out=), if any.
  const at::Tensor* written_original(const at::Tensor& cpu_result) const;
  at::Tensor to_device(const at::Tensor& cpu);

  // Everything that must hold while the CPU kernel runs on the calling thread, which is
  // the device work of the op `name` (recorded for the profiler). Unless the op only
  // makes views (`reads_memory` false), it first waits for the work queued on the
  // device's current stream (synchronize_for_host_op), and the kernel's allocations
  // come from the device's memory. A view op's do not: the host writes them at once (a
  // nested view's sizes and strides), and without that wait the caching allocator may
  // hand out a block that work still queued on the stream writes.
  class Scope {
   public:
    Scope(c10::DeviceIndex device, const char* name, bool reads_memory = true)
        : queued_work_done_(device, name, reads_memory),
          route_(reads_memory ? device : -1),
          activity_(profiler::ActivityKind::kKernel, name, device) {
      // Ops almost always run on the current device: the guard's virtual calls are
      // then skipped.
      if (device != current_device()) {
        device_guard_.reset_device(make_device(device));
      }
    }

   private:
    // First, so the kernel and its activity start once the work queued on the device's
    // current stream is complete.
    struct QueuedWorkDone {
      QueuedWorkDone(c10::DeviceIndex device, const char* name, bool reads_memory) {
        if (reads_memory) {
          synchronize_for_host_op(device, name);
        }
      }
    } queued_work_done_;
    c10::OptionalDeviceGuard device_guard_;
    RouteCpuAllocationsTo route_;
    profiler::ActivityScope activity_;
  };

 private:
  struct Written {
    const at::Tensor* original;
    // What the kernel writes: the alias, or its copy in the compute dtype.
    at::Tensor cpu;
    const void* original_data;
    // The alias when `cpu` is its copy in the compute dtype.
    at::Tensor narrow_alias;
  };
  struct Widened {
    c10::TensorImpl* original;
    at::Tensor cpu;
  };

  // The copy in its compute dtype of an argument of an accelerator dtype, made from its
  // alias; the alias itself for other arguments.
  const at::Tensor& widened(const at::Tensor& tensor, const at::Tensor& alias);
  void note_widened_type(c10::ScalarType dtype, c10::ScalarType compute);
  at::Tensor narrowed(const at::Tensor& cpu);

  // A sparse COO vdev tensor as a SparseCPU tensor over aliases of its indices and values.
  const at::Tensor& alias_sparse(const at::Tensor& tensor);
  // A sparse compressed (CSR, CSC, BSR, BSC) vdev tensor as a SparseCsrCPU tensor over
  // aliases of its compressed and plain indices and values.
  const at::Tensor& alias_sparse_compressed(const at::Tensor& tensor);
  // A strided nested vdev tensor as a NestedTensorCPU tensor over an alias of its storage.
  const at::Tensor& alias_nested(const at::Tensor& tensor);
  void update_written_sparse(const at::Tensor& original, const at::Tensor& cpu);

  const char* op_name_;
  c10::DeviceIndex device_ = -1;
  bool saw_cpu_tensor_ = false;
  // Alias storage -> device storage. Not owned: the arguments hold their storages.
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::StorageImpl*>, 4> storages_;
  c10::SmallVector<Written, 2> written_;
  // The TensorImpls of arguments and their aliases (see reusable_cpu_alias). Not
  // owned: a new reference to a tensor that only Python holds takes the GIL (to keep
  // its Python object alive), twice per argument; the caller holds them.
  c10::SmallVector<std::pair<c10::TensorImpl*, at::Tensor>, 4> lent_;
  // Aliases of tensors over the same device storage as an earlier argument: made over
  // that argument's alias storage (see cpu_alias_over), and never kept.
  c10::SmallVector<std::pair<c10::TensorImpl*, at::Tensor>, 0> storage_sharing_aliases_;
  c10::SmallVector<at::Tensor, 0> sparse_parts_;
  const AcceleratorDtypes* accelerator_dtypes_ = nullptr;
  // Set once an argument has an accelerator dtype (note_tensor, note_dtype_argument):
  // the call widens.
  bool widening_ = false;
  c10::SmallVector<Widened, 0> widened_;
  // The (original, compute) dtypes of widened arguments, to narrow results.
  c10::SmallVector<std::pair<c10::ScalarType, c10::ScalarType>, 0> widened_types_;
  // Dtype arguments of no accelerator dtype: results in them are not narrowed.
  c10::SmallVector<c10::ScalarType, 0> requested_types_;
};

} // namespace vdev
