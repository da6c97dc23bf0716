// The boxed fallback: every aten op without a vdev kernel runs ATen's CPU kernel
// on CPU tensors that alias device memory (device memory is host RAM), so no data
// is copied in or out:
//  - vdev tensor arguments become CPU aliases (same memory, sizes, strides, offset);
//    vdev Device arguments become CPU; random ops get the vdev generator's CPU state;
//  - the CPU kernel's allocations are routed to the device's allocator, so fresh
//    outputs already live in device memory and are adopted as vdev tensors;
//  - outputs that view an argument become vdev views of that argument's storage;
//    in-place and out= results are the original vdev tensors, updated if the kernel
//    resized them.
// CpuCall does the aliasing; this file walks the boxed stack by the op's schema.
#include "aten/Fallback.h"

#include "aten/CpuCall.h"

#include <torch/library.h>

namespace vdev {
namespace {

bool is_written(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

bool is_generator(const c10::Argument& argument) {
  const auto& type = argument.type();
  return type->kind() == c10::TypeKind::OptionalType &&
      type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
}

// Index lists (Tensor?[]) may hold CPU tensors, as with CUDA.
bool is_index_list(const c10::Argument& argument) {
  return argument.type()->containedType(0)->kind() == c10::TypeKind::OptionalType;
}

class BoxedCall {
 public:
  BoxedCall(const c10::FunctionSchema& schema, torch::jit::Stack& stack)
      : schema_(schema),
        stack_(stack),
        first_arg_(stack.size() - schema.arguments().size()),
        call_(schema.name()) {}

  void find_device() {
    for (size_t i = 0; i < schema_.arguments().size(); ++i) {
      const c10::IValue& value = argument(i);
      if (value.isTensor()) {
        call_.note_tensor(value.toTensor());
      } else if (value.isList()) {
        const bool cpu_allowed = is_index_list(schema_.arguments()[i]);
        for (const c10::IValue& element : value.toListRef()) {
          if (element.isTensor()) {
            call_.note_tensor(element.toTensor(), cpu_allowed);
          }
        }
      } else if (value.isDevice()) {
        call_.note_device_argument(value.toDevice());
      }
    }
    call_.device();
  }

  void to_cpu_arguments() {
    original_arguments_.assign(
        stack_.begin() + static_cast<std::ptrdiff_t>(first_arg_), stack_.end());
    const auto& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = argument(i);
      if (value.isTensor()) {
        value = call_.alias(value.toTensor(), is_written(arguments[i]));
      } else if (value.isList()) {
        value = alias_list(value, is_written(arguments[i]));
      } else if (value.isDevice()) {
        if (value.toDevice().type() == kDeviceType) {
          value = c10::Device(c10::kCPU);
        }
      } else if (value.isGenerator()) {
        value = call_.cpu_generator(value.toGenerator());
      } else if (value.isNone() && is_generator(arguments[i])) {
        value = call_.cpu_generator(std::nullopt);
      }
    }
  }

  void run(const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
    CpuCall::KernelScope scope(call_);
    cpu_kernel(&stack_);
  }

  void to_device_results() {
    call_.update_written_arguments();
    const auto& returns = schema_.returns();
    for (size_t i = 0; i < returns.size(); ++i) {
      c10::IValue& value = stack_[first_arg_ + i];
      if (const c10::IValue* original = written_argument_for(returns[i])) {
        value = *original;
      } else if (value.isTensor()) {
        value = call_.to_device(value.toTensor());
      } else if (value.isList()) {
        c10::impl::GenericList list = value.toList();
        for (size_t j = 0; j < list.size(); ++j) {
          if (list.get(j).isTensor()) {
            list.set(j, call_.to_device(list.get(j).toTensor()));
          }
        }
      }
    }
  }

 private:
  c10::IValue& argument(size_t index) {
    return stack_[first_arg_ + index];
  }

  c10::IValue alias_list(const c10::IValue& value, bool written) {
    c10::impl::GenericList list = value.toList();
    c10::impl::GenericList converted(list.elementType());
    converted.reserve(list.size());
    for (const c10::IValue& element : list) {
      converted.push_back(
          element.isTensor() ? c10::IValue(call_.alias(element.toTensor(), written)) : element);
    }
    return converted;
  }

  const c10::IValue* written_argument_for(const c10::Argument& result) const {
    if (!is_written(result)) {
      return nullptr;
    }
    const auto& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (is_written(arguments[i]) &&
          arguments[i].alias_info()->beforeSets() == result.alias_info()->beforeSets()) {
        return &original_arguments_[i];
      }
    }
    return nullptr;
  }

  const c10::FunctionSchema& schema_;
  torch::jit::Stack& stack_;
  const size_t first_arg_;
  CpuCall call_;
  std::vector<c10::IValue> original_arguments_;
};

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu_aliases(op, stack, [&op](torch::jit::Stack* cpu_stack) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_stack);
  });
}

} // namespace

void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
  BoxedCall call(op.schema(), *stack);
  call.find_device();
  call.to_cpu_arguments();
  call.run(cpu_kernel);
  call.to_device_results();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

} // namespace vdev
