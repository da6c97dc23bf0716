#pragma once

#include "runtime/Allocator.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <string_view>
#include <utility>
#include <vector>

namespace vdev {

// Which devices the tensor arguments of one op may be on.
enum class DeviceRule {
  // CUDA's rule: all on one vdev device; CPU tensors only as 0-dim scalars (and in
  // index lists). Errors say "Expected all tensors to be on the same device".
  kSameDevice,
  // Copies: any vdev device or CPU, since all of it is host memory. The kernel runs on
  // behalf of the first vdev argument's device.
  kAnyDevice,
};

// One run of an ATen CPU kernel on behalf of a vdev op, without copying any data:
//  1. the arguments decide the device the op runs on (note_*, then device());
//  2. vdev tensor arguments become CPU aliases of their memory (alias), generators
//     the CPU state of vdev generators (cpu_generator);
//  3. the kernel runs inside a KernelScope, so its CPU allocations are device memory;
//  4. written arguments take over any resize the kernel did to their aliases
//     (update_written_arguments), and CPU results become vdev tensors (to_device):
//     views of an argument's memory become views of the argument, fresh memory is
//     adopted as is.
// The boxed fallback (Fallback.cpp) and the unboxed CpuKernel (CpuKernel.h) drive it.
class CpuCall {
 public:
  // `op_name` names the op in errors and must outlive the call.
  explicit CpuCall(std::string_view op_name, DeviceRule rule = DeviceRule::kSameDevice);

  // A tensor argument. A non-scalar CPU tensor is a device mix unless `cpu_allowed`.
  void note_tensor(const at::Tensor& tensor, bool cpu_allowed = false);
  // A Device argument (factories): it decides the device if no tensor did before it.
  void note_device_argument(c10::Device device);
  // The device the op runs on (the current device if nothing decided it); raises if
  // the noted tensors mix devices. Call after noting every argument.
  c10::DeviceIndex device();

  // The CPU alias of a vdev tensor (other tensors are returned as they are). The
  // alias of a `written` argument passes any resize back to it in update_written_arguments.
  at::Tensor alias(const at::Tensor& tensor, bool written);
  // The CPU generator behind `generator` (a vdev generator, or none: the device's default).
  at::Generator cpu_generator(const std::optional<at::Generator>& generator);

  // While alive: the device is current and this thread's CPU allocations come from
  // its memory. The dispatch state is the caller's, as for a CPU kernel: the ops the
  // kernel calls bump version counters exactly when they would on CPU (the aliases
  // share them), and the aliases never require grad, so nothing is recorded twice.
  class KernelScope {
   public:
    explicit KernelScope(CpuCall& call);

   private:
    c10::DeviceGuard device_guard_;
    RouteCpuAllocationsTo route_allocations_;
  };

  void update_written_arguments();
  // The vdev tensor for a CPU result of the kernel.
  at::Tensor to_device(const at::Tensor& cpu);

 private:
  struct AliasedArgument {
    at::Tensor device_tensor; // defined for written arguments only
    at::Tensor cpu_tensor;
    c10::StorageImpl* cpu_storage;
    const void* original_data;
    c10::Storage device_storage;
  };

  void note_device(c10::Device device);

  std::string_view op_name_;
  DeviceRule rule_;
  c10::DeviceIndex device_ = -1;
  bool saw_cpu_tensor_ = false;
  std::vector<AliasedArgument> aliased_;
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> adopted_;
};

} // namespace vdev
