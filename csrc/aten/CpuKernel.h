#pragma once

// CpuKernel<Op>: an unboxed, zero-copy vdev kernel for the ATen operator described by
// `Op`, an at::_ops struct (from <ATen/ops/NAME_ops.h>). It does what the boxed
// fallback does, without boxing: vdev tensor arguments become CPU aliases of their
// memory, the op is redispatched to its CPU kernel, and the results come back as vdev
// tensors without a copy (see CpuCall). One line registers it:
//
//   TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
//     register_cpu_kernel<at::_ops::_foreach_add__List>(m);
//   }
//
// Arguments: `Tensor`, `Tensor?` and `Tensor[]` (read or written, as the op's schema
// says) and anything without tensors. Ops with other tensor-carrying arguments
// (`Tensor?[]`, ITensorListRef), devices or generators do not compile: they need an
// Argument adapter below, or can stay with the boxed fallback.
// Results: nothing, `Tensor` and `Tensor[]` (fresh memory is adopted, views of an
// argument become vdev views of it), in-place and out= `Tensor&` (the original
// argument, resized if the kernel resized its alias), non-tensor values, and tuples
// of these.
// Devices: CUDA's rule by default; register_cpu_kernel<Op, DeviceRule::kAnyDevice>
// lets copies read from another device or the host (see DeviceRule).
#include "aten/CpuCall.h"

#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace vdev {
namespace cpu_kernel_detail {

// For each argument of the op `name.overload`, whether its schema marks it written.
std::vector<bool> written_arguments(const char* name, const char* overload_name);

template <class T>
inline constexpr bool kCarriesTensorsOrDevice = std::is_same_v<T, const at::ITensorListRef&> ||
    std::is_same_v<T, const c10::List<std::optional<at::Tensor>>&> ||
    std::is_same_v<T, std::optional<at::Generator>> ||
    std::is_same_v<T, std::optional<c10::Device>> || std::is_same_v<T, c10::Device>;

// How one argument reaches the CPU kernel: note() lets it decide the device, the
// constructor converts it, get() is what the kernel receives. By default: unchanged.
template <class T>
struct Argument {
  static_assert(
      !kCarriesTensorsOrDevice<T>,
      "CpuKernel has no adapter for this argument type; add one or use the boxed fallback");

  static void note(CpuCall&, const std::remove_reference_t<T>&) {}
  Argument(CpuCall&, T value, bool /*written*/) : value_(value) {}
  T get() {
    return value_;
  }
  at::Tensor* original_of(const at::Tensor&) {
    return nullptr;
  }

  T value_;
};

// Tensor arguments, const or mutable (in-place self, out=).
template <class TensorRef>
struct TensorArgument {
  static void note(CpuCall& call, const at::Tensor& tensor) {
    call.note_tensor(tensor);
  }
  TensorArgument(CpuCall& call, TensorRef tensor, bool written)
      : original_(&tensor), alias_(call.alias(tensor, written)) {}
  TensorRef get() {
    return alias_;
  }
  // The kernel returns in-place and out= results by reference to the argument it got.
  at::Tensor* original_of(const at::Tensor& returned) {
    return &returned == &alias_ ? const_cast<at::Tensor*>(original_) : nullptr;
  }

  std::remove_reference_t<TensorRef>* original_;
  at::Tensor alias_;
};

template <>
struct Argument<const at::Tensor&> : TensorArgument<const at::Tensor&> {
  using TensorArgument::TensorArgument;
};

template <>
struct Argument<at::Tensor&> : TensorArgument<at::Tensor&> {
  using TensorArgument::TensorArgument;
};

template <>
struct Argument<const std::optional<at::Tensor>&> {
  static void note(CpuCall& call, const std::optional<at::Tensor>& tensor) {
    if (tensor.has_value()) {
      call.note_tensor(*tensor);
    }
  }
  Argument(CpuCall& call, const std::optional<at::Tensor>& tensor, bool written) {
    if (tensor.has_value()) {
      alias_ = call.alias(*tensor, written);
    }
  }
  const std::optional<at::Tensor>& get() {
    return alias_;
  }
  at::Tensor* original_of(const at::Tensor&) {
    return nullptr;
  }

  std::optional<at::Tensor> alias_;
};

template <>
struct Argument<at::TensorList> {
  static void note(CpuCall& call, at::TensorList tensors) {
    for (const at::Tensor& tensor : tensors) {
      call.note_tensor(tensor);
    }
  }
  Argument(CpuCall& call, at::TensorList tensors, bool written) {
    aliases_.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) {
      aliases_.push_back(call.alias(tensor, written));
    }
  }
  at::TensorList get() {
    return aliases_;
  }
  at::Tensor* original_of(const at::Tensor&) {
    return nullptr;
  }

  std::vector<at::Tensor> aliases_;
};

// How the kernel's result becomes the vdev op's result. By default: unchanged.
template <class Ret>
struct Result {
  template <class Arguments>
  static Ret to_device(CpuCall&, Ret result, Arguments&) {
    return result;
  }
};

template <>
struct Result<at::Tensor> {
  template <class Arguments>
  static at::Tensor to_device(CpuCall& call, const at::Tensor& result, Arguments&) {
    return call.to_device(result);
  }
};

template <>
struct Result<std::vector<at::Tensor>> {
  template <class Arguments>
  static std::vector<at::Tensor> to_device(
      CpuCall& call, std::vector<at::Tensor> results, Arguments&) {
    for (at::Tensor& result : results) {
      result = call.to_device(result);
    }
    return results;
  }
};

template <class... Elements>
struct Result<std::tuple<Elements...>> {
  template <class Arguments>
  static std::tuple<Elements...> to_device(
      CpuCall& call, std::tuple<Elements...> results, Arguments& arguments) {
    return std::apply(
        [&](auto&&... result) {
          return std::tuple<Elements...>(Result<Elements>::to_device(
              call, std::forward<Elements>(result), arguments)...);
        },
        std::move(results));
  }
};

template <class TensorRef>
struct ReferenceResult {
  template <class Arguments>
  static TensorRef to_device(CpuCall&, TensorRef result, Arguments& arguments) {
    at::Tensor* original = std::apply(
        [&result](auto&... argument) {
          at::Tensor* found = nullptr;
          ((found = found ? found : argument.original_of(result)), ...);
          return found;
        },
        arguments);
    TORCH_INTERNAL_ASSERT(
        original != nullptr, "a CPU kernel returned a reference to none of its arguments");
    return *original;
  }
};

template <>
struct Result<at::Tensor&> : ReferenceResult<at::Tensor&> {};

template <>
struct Result<const at::Tensor&> : ReferenceResult<const at::Tensor&> {};

} // namespace cpu_kernel_detail

template <class Op, DeviceRule rule = DeviceRule::kSameDevice, class Schema = typename Op::schema>
struct CpuKernel;

template <class Op, DeviceRule rule, class Ret, class... Args>
struct CpuKernel<Op, rule, Ret(Args...)> {
  static Ret call(Args... args) {
    CpuCall call(Op::name, rule);
    (cpu_kernel_detail::Argument<Args>::note(call, args), ...);
    call.device();
    return run(call, std::index_sequence_for<Args...>{}, args...);
  }

 private:
  template <size_t... Index>
  static Ret run(CpuCall& call, std::index_sequence<Index...>, Args... args) {
    static const std::vector<bool> written =
        cpu_kernel_detail::written_arguments(Op::name, Op::overload_name);
    std::tuple<cpu_kernel_detail::Argument<Args>...> cpu_args{
        cpu_kernel_detail::Argument<Args>(call, args, written[Index])...};
    auto run_cpu_kernel = [&]() -> decltype(auto) {
      CpuCall::KernelScope scope(call);
      return std::apply(
          [](auto&... argument) -> Ret {
            return Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), argument.get()...);
          },
          cpu_args);
    };
    if constexpr (std::is_void_v<Ret>) {
      run_cpu_kernel();
      call.update_written_arguments();
    } else {
      decltype(auto) result = run_cpu_kernel();
      call.update_written_arguments();
      return cpu_kernel_detail::Result<Ret>::to_device(call, std::forward<Ret>(result), cpu_args);
    }
  }
};

// Registers CpuKernel<Op, rule> as the vdev kernel of Op in a
// TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) block.
template <class Op, DeviceRule rule = DeviceRule::kSameDevice>
void register_cpu_kernel(torch::Library& library) {
  std::string name = Op::name;
  if (Op::overload_name[0] != '\0') {
    name = name + "." + Op::overload_name;
  }
  using Kernel = CpuKernel<Op, rule>;
  library.impl(name.c_str(), TORCH_FN(Kernel::call));
}

} // namespace vdev
