#pragma once

// CpuKernel<at::_ops::X>::call is an unboxed vdev kernel for aten op X that runs
// ATen's CPU kernel for X on zero-copy CPU aliases of its vdev arguments (see
// CpuRedispatch.h). It serves any op whose signature uses the argument and return
// types handled below, so a native kernel is one line: register_cpu_kernels<Ops...>(m).
// Unlike the boxed fallback it builds no IValue stack and parses no schema per call.

#include "aten/CpuRedispatch.h"
#include "aten/OperatorFacts.h"
#include "aten/QueuedOp.h"
#include "aten/SupportedDtypes.h"
#include "runtime/Device.h"
#include "runtime/Launch.h"

#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace vdev {
namespace cpu_kernel {

// Device discovery over one argument.
inline void note(CpuRedispatch& call, const at::Tensor& tensor) {
  call.note_tensor(tensor);
}
// In-place self and out= arguments.
inline void note(CpuRedispatch& call, at::Tensor& tensor) {
  call.note_tensor(tensor, CpuRedispatch::CpuTensors::Rejected);
}
inline void note(CpuRedispatch& call, const std::optional<at::Tensor>& tensor) {
  if (tensor.has_value()) {
    call.note_tensor(*tensor);
  }
}
inline void note(CpuRedispatch& call, at::TensorList tensors) {
  for (const at::Tensor& tensor : tensors) {
    call.note_tensor(tensor);
  }
}
inline void note(CpuRedispatch& call, const at::ITensorListRef& tensors) {
  for (const at::Tensor& tensor : tensors) {
    call.note_tensor(tensor);
  }
}
// Index lists may hold CPU tensors, as with CUDA.
inline void note(CpuRedispatch& call, const c10::List<std::optional<at::Tensor>>& tensors) {
  for (const std::optional<at::Tensor>& tensor : tensors) {
    if (tensor.has_value()) {
      call.note_tensor(*tensor, CpuRedispatch::CpuTensors::Allowed);
    }
  }
}
inline void note(CpuRedispatch& call, const std::optional<c10::Device>& device) {
  call.note_device(device);
}
inline void note(CpuRedispatch& call, std::optional<c10::ScalarType> dtype) {
  if (dtype.has_value()) {
    call.note_dtype_argument(*dtype);
  }
}
inline void note(CpuRedispatch& call, c10::ScalarType dtype) {
  call.note_dtype_argument(dtype);
}
template <class T>
void note(CpuRedispatch& /*call*/, const T& /*other*/) {}

// An argument as the CPU kernel receives it. By default: unchanged.
template <class Arg, class = void>
struct Converted {
  Converted(CpuRedispatch& /*call*/, Arg value) : value(std::forward<Arg>(value)) {}
  Arg get() {
    return std::forward<Arg>(value);
  }
  Arg value;
};

// A tensor argument reaches the kernel as the call's one alias of it (made_alias),
// which the call holds: looked up when the kernel is called, as making later aliases
// may move it. A tensor that is not vdev's reaches the kernel as is.
template <>
struct Converted<const at::Tensor&> {
  Converted(CpuRedispatch& call, const at::Tensor& tensor) : call(call), original(tensor) {
    call.alias(tensor);
  }
  const at::Tensor& get() {
    const at::Tensor* made = call.made_alias(original);
    return made != nullptr ? *made : original;
  }
  CpuRedispatch& call;
  const at::Tensor& original;
};

// In-place self and out= arguments: the kernel's changes are taken over afterwards.
template <>
struct Converted<at::Tensor&> {
  Converted(CpuRedispatch& call, at::Tensor& tensor) : call(call), original(tensor) {
    call.alias_written(tensor);
  }
  at::Tensor& get() {
    at::Tensor* made = call.made_alias(original);
    return made != nullptr ? *made : original;
  }
  CpuRedispatch& call;
  at::Tensor& original;
};

template <>
struct Converted<const std::optional<at::Tensor>&> {
  Converted(CpuRedispatch& call, const std::optional<at::Tensor>& tensor) {
    if (tensor.has_value()) {
      cpu = call.alias(*tensor);
    }
  }
  const std::optional<at::Tensor>& get() {
    return cpu;
  }
  std::optional<at::Tensor> cpu;
};

inline std::vector<at::Tensor> alias_all(CpuRedispatch& call, at::TensorList tensors) {
  std::vector<at::Tensor> aliases;
  aliases.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    aliases.push_back(call.alias(tensor));
  }
  return aliases;
}

template <>
struct Converted<at::TensorList> {
  Converted(CpuRedispatch& call, at::TensorList tensors) : cpu(alias_all(call, tensors)) {}
  at::TensorList get() {
    return cpu;
  }
  std::vector<at::Tensor> cpu;
};

template <>
struct Converted<const at::ITensorListRef&> {
  Converted(CpuRedispatch& call, const at::ITensorListRef& tensors) {
    cpu.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) {
      cpu.push_back(call.alias(tensor));
    }
  }
  // Made on use: the converted arguments are moved into place before the call.
  const at::ITensorListRef& get() {
    ref = at::ITensorListRef(cpu);
    return ref;
  }
  std::vector<at::Tensor> cpu;
  at::ITensorListRef ref;
};

template <>
struct Converted<const c10::List<std::optional<at::Tensor>>&> {
  Converted(CpuRedispatch& call, const c10::List<std::optional<at::Tensor>>& tensors) {
    cpu.reserve(tensors.size());
    for (const std::optional<at::Tensor>& tensor : tensors) {
      cpu.push_back(tensor.has_value() ? std::optional<at::Tensor>(call.alias(*tensor)) : std::nullopt);
    }
  }
  const c10::List<std::optional<at::Tensor>>& get() {
    return cpu;
  }
  c10::List<std::optional<at::Tensor>> cpu;
};

// Random ops draw from the vdev generator's CPU state (the device default if none).
template <>
struct Converted<std::optional<at::Generator>> {
  Converted(CpuRedispatch& call, std::optional<at::Generator> generator)
      : cpu(call.generator(generator)) {}
  std::optional<at::Generator> get() {
    return cpu;
  }
  at::Generator cpu;
};

template <>
struct Converted<std::optional<c10::Device>> {
  Converted(CpuRedispatch& /*call*/, std::optional<c10::Device> device)
      : cpu(device.has_value() && device->type() == kDeviceType ? c10::Device(c10::kCPU) : device) {}
  std::optional<c10::Device> get() {
    return cpu;
  }
  std::optional<c10::Device> cpu;
};

template <>
struct Converted<std::optional<c10::ScalarType>> {
  Converted(CpuRedispatch& call, std::optional<c10::ScalarType> dtype)
      : cpu(dtype.has_value() ? std::optional(call.dtype_argument(*dtype)) : dtype) {}
  std::optional<c10::ScalarType> get() {
    return cpu;
  }
  std::optional<c10::ScalarType> cpu;
};

template <>
struct Converted<c10::ScalarType> {
  Converted(CpuRedispatch& call, c10::ScalarType dtype) : cpu(call.dtype_argument(dtype)) {}
  c10::ScalarType get() {
    return cpu;
  }
  c10::ScalarType cpu;
};

// A result as the caller receives it.
template <class Result>
struct Returned {
  static Result convert(CpuRedispatch& /*call*/, Result result) {
    return result;
  }
};

template <>
struct Returned<at::Tensor> {
  static at::Tensor convert(CpuRedispatch& call, const at::Tensor& result) {
    return call.to_device(result);
  }
};

inline const at::Tensor& original_of(CpuRedispatch& call, const at::Tensor& result) {
  const at::Tensor* original = call.written_original(result);
  TORCH_INTERNAL_ASSERT(original != nullptr, "a vdev CPU kernel returned a tensor it does not write");
  return *original;
}

template <>
struct Returned<at::Tensor&> {
  static at::Tensor& convert(CpuRedispatch& call, const at::Tensor& result) {
    // The original was passed as a mutable reference: giving it back as one is sound.
    return const_cast<at::Tensor&>(original_of(call, result));
  }
};

template <>
struct Returned<const at::Tensor&> {
  static const at::Tensor& convert(CpuRedispatch& call, const at::Tensor& result) {
    return original_of(call, result);
  }
};

template <>
struct Returned<std::vector<at::Tensor>> {
  static std::vector<at::Tensor> convert(CpuRedispatch& call, std::vector<at::Tensor> results) {
    for (at::Tensor& result : results) {
      result = call.to_device(result);
    }
    return results;
  }
};

template <class... Results>
struct Returned<std::tuple<Results...>> {
  static std::tuple<Results...> convert(CpuRedispatch& call, std::tuple<Results...> results) {
    return std::apply(
        [&call](auto&&... result) {
          return std::tuple<Results...>(
              Returned<Results>::convert(call, std::forward<decltype(result)>(result))...);
        },
        std::move(results));
  }
};

// The results a launched op left on the stack (launch_op) as the kernel returns them:
// fresh tensors, or references to the written arguments they are (`arguments` holds
// the addresses of the kernel's arguments).
template <class Result>
struct FromStack {
  static constexpr bool kLaunchable = false;
};

template <>
struct FromStack<void> {
  static constexpr bool kLaunchable = true;
  static void take(torch::jit::Stack& /*stack*/, const OperatorFacts& /*facts*/, void* const* /*arguments*/) {}
};

template <>
struct FromStack<at::Tensor> {
  static constexpr bool kLaunchable = true;
  static at::Tensor take(torch::jit::Stack& stack, const OperatorFacts& /*facts*/, void* const* /*arguments*/) {
    return std::move(stack[0]).toTensor();
  }
};

template <class... Results>
struct FromStack<std::tuple<Results...>> {
  static constexpr bool kLaunchable =
      (std::is_same_v<Results, at::Tensor> && ...) || (std::is_same_v<Results, at::Tensor&> && ...);
  static std::tuple<Results...> take(torch::jit::Stack& stack, const OperatorFacts& facts, void* const* arguments) {
    return take(stack, facts, arguments, std::index_sequence_for<Results...>());
  }
  template <size_t... I>
  static std::tuple<Results...> take(
      torch::jit::Stack& stack, const OperatorFacts& facts, void* const* arguments, std::index_sequence<I...>) {
    if constexpr ((std::is_same_v<Results, at::Tensor> && ...)) {
      return std::tuple<Results...>(std::move(stack[I]).toTensor()...);
    } else {
      return std::tuple<Results...>(
          *static_cast<at::Tensor*>(arguments[facts.written_argument_of_result[I]])...);
    }
  }
};

template <>
struct FromStack<at::Tensor&> {
  static constexpr bool kLaunchable = true;
  static at::Tensor& take(torch::jit::Stack& /*stack*/, const OperatorFacts& facts, void* const* arguments) {
    return *static_cast<at::Tensor*>(arguments[facts.written_argument_of_result[0]]);
  }
};

template <>
struct FromStack<const at::Tensor&> {
  static constexpr bool kLaunchable = true;
  static const at::Tensor& take(torch::jit::Stack& /*stack*/, const OperatorFacts& facts, void* const* arguments) {
    return *static_cast<const at::Tensor*>(arguments[facts.written_argument_of_result[0]]);
  }
};

} // namespace cpu_kernel

// CpuOp is the op whose CPU kernel runs: Op itself, or one with the same signature
// (convolution for convolution_overrideable).
template <class Op, class CpuOp = Op, class Schema = typename Op::schema>
struct CpuKernel;

template <class Op, class CpuOp, class Result, class... Args>
struct CpuKernel<Op, CpuOp, Result(Args...)> {
  static_assert(std::is_same_v<typename Op::schema, typename CpuOp::schema>);

  static Result call(Args... args) {
    lazy_init();
    // Op's launch plan names the CPU kernel the stream runs (CpuOp is for this thread).
    if constexpr (cpu_kernel::FromStack<Result>::kLaunchable) {
      static const c10::OperatorHandle op =
          c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
      static const OperatorFacts& facts = operator_facts(op);
      if (facts.launch.meta != nullptr) {
        torch::jit::Stack stack = c10::impl::boxArgs<Args...>(args...);
        if (launch_op(op, facts, &stack)) {
          std::array<void*, sizeof...(Args)> arguments{
              const_cast<void*>(static_cast<const void*>(std::addressof(args)))...};
          return cpu_kernel::FromStack<Result>::take(stack, facts, arguments.data());
        }
      }
    }
    CpuRedispatch call(Op::name);
    static const AcceleratorDtypes* const accelerator_dtypes = vdev::accelerator_dtypes(Op::name);
    call.accept_accelerator_dtypes(accelerator_dtypes);
    (cpu_kernel::note(call, args), ...);
    const c10::DeviceIndex device = call.device();
    std::tuple<cpu_kernel::Converted<Args>...> converted{
        cpu_kernel::Converted<Args>(call, std::forward<Args>(args))...};
    auto run_cpu_kernel = [&]() -> Result {
      CpuRedispatch::Scope scope(device, Op::name);
      return std::apply(
          [](auto&... argument) -> Result {
            constexpr c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);
            return CpuOp::redispatch(kCpu, argument.get()...);
          },
          converted);
    };
    if constexpr (std::is_void_v<Result>) {
      run_cpu_kernel();
      call.update_written();
    } else {
      Result result = run_cpu_kernel();
      call.update_written();
      return cpu_kernel::Returned<Result>::convert(call, result);
    }
  }
};

namespace cpu_kernel {

// Whether an argument holds a tensor that is not vdev's.
inline bool holds_host_tensor(const at::Tensor& tensor) {
  return tensor.defined() && !is_vdev(tensor);
}
inline bool holds_host_tensor(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && holds_host_tensor(*tensor);
}
inline bool holds_host_tensor(at::TensorList tensors) {
  for (const at::Tensor& tensor : tensors) {
    if (holds_host_tensor(tensor)) {
      return true;
    }
  }
  return false;
}
template <class T>
bool holds_host_tensor(const T& /*other*/) {
  return false;
}

inline void bump_versions(at::TensorList tensors) {
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.is_inference()) {
      tensor.unsafeGetTensorImpl()->bump_version();
    }
  }
}
template <class T>
void bump_versions(const T& /*other*/) {}

// An argument as a queued kernel keeps it until it runs: owned, since the host goes on.
// Tensors become CPU aliases made at the launch (LaunchAliases: they hold no memory).
template <class Arg>
struct Kept {
  using type = std::decay_t<Arg>;
  static type keep(const type& value) {
    return value;
  }
};
template <>
struct Kept<const at::Tensor&> {
  using type = at::Tensor;
  static type keep(const at::Tensor& tensor) {
    return LaunchAliases().alias(tensor);
  }
};
template <>
struct Kept<at::Tensor&> : Kept<const at::Tensor&> {};
template <>
struct Kept<const std::optional<at::Tensor>&> {
  using type = std::optional<at::Tensor>;
  static type keep(const std::optional<at::Tensor>& tensor) {
    return tensor.has_value() && tensor->defined() ? type(LaunchAliases().alias(*tensor)) : tensor;
  }
};
template <>
struct Kept<at::TensorList> {
  using type = std::vector<at::Tensor>;
  static type keep(at::TensorList tensors) {
    LaunchAliases launch_aliases;
    type aliases;
    aliases.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) {
      // Queued ops write lists (a foreach op's self, a fused optimizer's lists): a lazy
      // clone's shared memory is copied first, so its other sharers keep their values.
      end_copy_on_write(tensor);
      aliases.push_back(launch_aliases.alias(tensor));
    }
    return aliases;
  }
};
template <class T>
struct Kept<c10::ArrayRef<T>> {
  using type = std::vector<T>;
  static type keep(c10::ArrayRef<T> values) {
    return values.vec();
  }
};

} // namespace cpu_kernel

// QueuedCpuKernel<Op>::call is the kernel of an op that writes only its arguments
// (in-place foreach and fused optimizer ops): checked on the host, then queued on the
// device's current stream, where ATen's CPU kernel runs on aliases the kernel owns. An
// op given a host tensor (a CPU scalar, CPU step counts) runs as CpuKernel<Op> does.
template <class Op, class Schema = typename Op::schema>
struct QueuedCpuKernel;

template <class Op, class... Args>
struct QueuedCpuKernel<Op, void(Args...)> {
  static void call(Args... args) {
    lazy_init();
    if ((cpu_kernel::holds_host_tensor(args) || ...)) {
      return CpuKernel<Op>::call(std::forward<Args>(args)...);
    }
    c10::DeviceIndex device = -1;
    {
      CpuRedispatch checks(Op::name);
      (cpu_kernel::note(checks, args), ...);
      device = checks.device();
    }
    DtypeSignature dtypes(Op::name);
    (dtypes.add(args), ...);
    const bool dtypes_known = dtypes.known_to_run();
    if (!dtypes_known) {
      raise_metadata_errors(Op::name, [&](DataRefusingAliases& aliases) {
        auto refusing = std::make_tuple(refusing_data(aliases, args)...);
        std::apply([](auto&... argument) { Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), argument...); }, refusing);
      });
    }
    // The CPU's foreach kernels write each tensor with an in-place op, which bumps its
    // version; the kernel's aliases count their own versions (LaunchAliases), so the
    // host counts those writes now, at the launch.
    static const bool bumps_versions = std::string_view(Op::name).substr(0, 15) == "aten::_foreach_";
    if (bumps_versions) {
      static const OperatorFacts& facts =
          operator_facts(c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name));
      size_t index = 0;
      ((facts.written[index++] ? cpu_kernel::bump_versions(args) : void()), ...);
    }
    auto kernel = [kept = std::make_tuple(cpu_kernel::Kept<Args>::keep(args)...), device]() mutable {
      profiler::ActivityScope activity(profiler::ActivityKind::kKernel, Op::name, device);
      std::apply(
          [](auto&... argument) {
            constexpr c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);
            Op::redispatch(kCpu, argument...);
          },
          kept);
    };
    if (dtypes_known) {
      launch(current_stream(device), Op::name, std::move(kernel));
    } else if (launch_checking_support(current_stream(device), Op::name, std::move(kernel))) {
      dtypes.note_runs();
    }
  }
};

namespace cpu_kernel {

// Registers `kernel` for the op named "aten::name" with `overload` in `library`.
template <class Kernel>
void register_kernel(torch::Library& library, const char* name, const char* overload, Kernel kernel) {
  std::string full_name = name;
  if (overload[0] != '\0') {
    full_name += std::string(".") + overload;
  }
  library.impl(full_name.c_str() + full_name.find("::") + 2, kernel);
}

} // namespace cpu_kernel

// Registers CpuKernel<Op> as the vdev kernel of each Op.
template <class... Ops>
void register_cpu_kernels(torch::Library& library) {
  (cpu_kernel::register_kernel(
       library, Ops::name, Ops::overload_name, TORCH_FN(CpuKernel<Ops>::call)),
   ...);
}

// Registers QueuedCpuKernel<Op> as the vdev kernel of each Op.
template <class... Ops>
void register_queued_cpu_kernels(torch::Library& library) {
  (cpu_kernel::register_kernel(
       library, Ops::name, Ops::overload_name, TORCH_FN(QueuedCpuKernel<Ops>::call)),
   ...);
}

} // namespace vdev
