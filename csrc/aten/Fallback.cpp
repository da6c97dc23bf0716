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
#include "aten/Fallback.h"

#include "aten/Tensor.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <ATen/core/op_registration/adaption.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <ATen/ops/empty_strided.h>

namespace vdev {
namespace {

struct AliasedArgument {
  at::Tensor device_tensor;
  at::Tensor cpu_tensor;
  c10::StorageImpl* cpu_storage;
  const void* original_data;
};

class CpuCall {
 public:
  explicit CpuCall(const c10::FunctionSchema& schema) : schema_(schema) {}

  // Finds the device the op runs on, rejecting tensors of different devices.
  void find_device(const torch::jit::Stack& stack, size_t first_arg) {
    bool saw_large_cpu_tensor = false;
    auto note_tensor = [&](const at::Tensor& tensor, bool allow_cpu) {
      if (!tensor.defined()) {
        return;
      }
      if (is_vdev(tensor)) {
        note_device(tensor.device());
      } else if (!allow_cpu && tensor.device().is_cpu() && tensor.dim() > 0) {
        saw_large_cpu_tensor = true;
      }
    };
    for (size_t i = 0; i < schema_.arguments().size(); ++i) {
      const c10::IValue& value = stack[first_arg + i];
      if (value.isTensor()) {
        note_tensor(value.toTensor(), false);
      } else if (value.isList()) {
        // Index lists (Tensor?[]) may hold CPU tensors, as with CUDA.
        const bool allow_cpu = schema_.arguments()[i].type()->containedType(0)->kind() ==
            c10::TypeKind::OptionalType;
        for (const c10::IValue& element : value.toListRef()) {
          if (element.isTensor()) {
            note_tensor(element.toTensor(), allow_cpu);
          }
        }
      } else if (value.isDevice() && value.toDevice().type() == kDeviceType && device_ < 0) {
        device_ = resolve_device_index(value.toDevice().index());
      }
    }
    if (device_ < 0) {
      device_ = current_device();
    }
    TORCH_CHECK(
        !saw_large_cpu_tensor,
        "Expected all tensors to be on the same device, but found at least two devices, ",
        make_device(device_), " and cpu! (in ", schema_.name(), ")");
  }

  void to_cpu_arguments(torch::jit::Stack& stack, size_t first_arg) {
    const auto& arguments = schema_.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = stack[first_arg + i];
      if (value.isTensor()) {
        value = alias(value.toTensor(), is_written(arguments[i]));
      } else if (value.isList()) {
        value = alias_list(value, is_written(arguments[i]));
      } else if (value.isDevice()) {
        if (value.toDevice().type() == kDeviceType) {
          value = c10::Device(c10::kCPU);
        }
      } else if (value.isGenerator()) {
        value = cpu_generator_for(value.toGenerator(), device_);
      } else if (value.isNone() && is_generator(arguments[i])) {
        value = cpu_generator_for(std::nullopt, device_);
      }
    }
  }

  // Run the CPU kernel with allocations coming from device memory.
  void run(torch::jit::Stack* stack, const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
    c10::DeviceGuard device_guard(make_device(device_));
    RouteCpuAllocationsTo route(device_);
    cpu_kernel(stack);
  }

  void to_device_results(torch::jit::Stack& stack, size_t first_arg) {
    update_written_arguments();
    const auto& returns = schema_.returns();
    for (size_t i = 0; i < returns.size(); ++i) {
      c10::IValue& value = stack[first_arg + i];
      if (const c10::IValue* original = written_argument_for(returns[i])) {
        value = *original;
      } else if (value.isTensor()) {
        value = to_device(value.toTensor());
      } else if (value.isList()) {
        c10::impl::GenericList list = value.toList();
        for (size_t j = 0; j < list.size(); ++j) {
          if (list.get(j).isTensor()) {
            list.set(j, to_device(list.get(j).toTensor()));
          }
        }
      }
    }
  }

  void remember_arguments(const torch::jit::Stack& stack, size_t first_arg) {
    original_arguments_.assign(
        stack.begin() + static_cast<std::ptrdiff_t>(first_arg),
        stack.begin() + static_cast<std::ptrdiff_t>(first_arg + schema_.arguments().size()));
  }

 private:
  static bool is_written(const c10::Argument& argument) {
    return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
  }

  static bool is_generator(const c10::Argument& argument) {
    const auto& type = argument.type();
    return type->kind() == c10::TypeKind::OptionalType &&
        type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
  }

  void note_device(c10::Device device) {
    if (device_ < 0) {
      device_ = device.index();
      return;
    }
    TORCH_CHECK(
        device_ == device.index(),
        "Expected all tensors to be on the same device, but found at least two devices, ",
        make_device(device_), " and ", device, "! (in ", schema_.name(), ")");
  }

  at::Tensor alias(const at::Tensor& tensor, bool written) {
    if (!is_vdev(tensor)) {
      return tensor;
    }
    at::Tensor cpu = cpu_alias(tensor);
    aliased_.push_back(AliasedArgument{
        written ? tensor : at::Tensor(), cpu, cpu.storage().unsafeGetStorageImpl(),
        cpu.storage().data()});
    device_storages_.push_back(tensor.storage());
    return cpu;
  }

  c10::IValue alias_list(const c10::IValue& value, bool written) {
    c10::impl::GenericList list = value.toList();
    c10::impl::GenericList converted(list.elementType());
    converted.reserve(list.size());
    for (const c10::IValue& element : list) {
      converted.push_back(element.isTensor() ? c10::IValue(alias(element.toTensor(), written))
                                             : element);
    }
    return converted;
  }

  // A kernel may resize an in-place or out= argument: its CPU alias then holds new
  // device memory (allocated through the alias storage's allocator) and new geometry,
  // which the device tensor takes over.
  void update_written_arguments() {
    for (AliasedArgument& argument : aliased_) {
      if (!argument.device_tensor.defined()) {
        continue;
      }
      c10::StorageImpl* cpu_storage = argument.cpu_storage;
      c10::StorageImpl* device_storage = argument.device_tensor.storage().unsafeGetStorageImpl();
      if (cpu_storage->data() != argument.original_data) {
        c10::DataPtr data = cpu_storage->set_data_ptr(c10::DataPtr());
        adopt_device_memory(data, device_);
        device_storage->set_data_ptr_noswap(std::move(data));
        device_storage->set_nbytes(cpu_storage->nbytes());
      }
      const at::Tensor& cpu = argument.cpu_tensor;
      auto* impl = argument.device_tensor.unsafeGetTensorImpl();
      if (cpu.sizes() != argument.device_tensor.sizes() ||
          cpu.strides() != argument.device_tensor.strides() ||
          cpu.storage_offset() != argument.device_tensor.storage_offset()) {
        impl->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
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

  at::Tensor to_device(const at::Tensor& cpu) {
    if (!cpu.defined() || !cpu.device().is_cpu()) {
      return cpu;
    }
    c10::StorageImpl* storage = cpu.storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < aliased_.size(); ++i) {
      if (aliased_[i].cpu_storage == storage) {
        return view_of_storage(
            device_storages_[i], cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
    for (auto& [cpu_storage, device_storage] : adopted_) {
      if (cpu_storage == storage) {
        return view_of_storage(
            device_storage, cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
    if (owns_device_memory(storage->data_ptr())) {
      c10::DataPtr data = storage->set_data_ptr(c10::DataPtr());
      adopt_device_memory(data, device_);
      c10::Storage device_storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), storage->nbytes(), std::move(data),
          &caching_allocator(), /*resizable=*/true));
      adopted_.emplace_back(storage, device_storage);
      return view_of_storage(
          device_storage, cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
    // Memory the kernel did not allocate through the CPU allocator (a constant, a
    // CPU argument returned as is): the one case that needs a copy.
    at::Tensor result = at::empty_strided(
        cpu.sizes(), cpu.strides(), cpu.options().device(make_device(device_)));
    cpu_alias(result).copy_(cpu);
    return result;
  }

  const c10::FunctionSchema& schema_;
  c10::DeviceIndex device_ = -1;
  std::vector<AliasedArgument> aliased_;
  std::vector<c10::Storage> device_storages_;
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> adopted_;
  std::vector<c10::IValue> original_arguments_;
};

} // namespace

void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
  lazy_init();
  const c10::FunctionSchema& schema = op.schema();
  const size_t first_arg = stack->size() - schema.arguments().size();
  CpuCall call(schema);
  call.find_device(*stack, first_arg);
  call.remember_arguments(*stack, first_arg);
  call.to_cpu_arguments(*stack, first_arg);
  {
    // The op's autograd, if any, was handled above this kernel; what the CPU kernel
    // calls internally must not be recorded again.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    call.run(stack, cpu_kernel);
  }
  call.to_device_results(*stack, first_arg);
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu_aliases(op, stack, [&op](torch::jit::Stack* cpu_stack) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_stack);
  });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

} // namespace vdev
