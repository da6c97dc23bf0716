// The boxed fallback: every aten op without a vdev kernel runs ATen's CPU kernel on
// zero-copy CPU aliases of its arguments (CpuRedispatch). VDEV_FALLBACK=silent (the
// default), warn (once per op) or error (refuse, naming the op) says how loudly.
#include "aten/Fallback.h"

#include "aten/CpuRedispatch.h"
#include "runtime/Device.h"

#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <cstdlib>
#include <deque>
#include <mutex>

namespace vdev {
namespace {

enum class FallbackMode { kSilent, kWarn, kError };

FallbackMode read_fallback_mode() {
  const char* text = std::getenv("VDEV_FALLBACK");
  const std::string mode = text == nullptr ? "" : text;
  if (mode.empty() || mode == "silent") {
    return FallbackMode::kSilent;
  }
  if (mode == "warn") {
    return FallbackMode::kWarn;
  }
  TORCH_CHECK(
      mode == "error", "VDEV_FALLBACK='", mode, "' is not one of silent, warn, error");
  return FallbackMode::kError;
}

std::string full_name(const c10::FunctionSchema& schema) {
  const c10::OperatorName& name = schema.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Calls per operator, keyed by its schema (which lives as long as the operator).
class FallbackCounter {
 public:
  // Returns true the first time `op` is counted.
  bool count(const c10::OperatorHandle& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [entry, first] = calls_.emplace(&op.schema(), 0);
    entry->second += 1;
    return first;
  }

  std::unordered_map<std::string, int64_t> snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unordered_map<std::string, int64_t> result;
    for (const auto& [schema, calls] : calls_) {
      result[full_name(*schema)] = calls;
    }
    return result;
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.clear();
  }

 private:
  std::mutex mutex_;
  ska::flat_hash_map<const c10::FunctionSchema*, int64_t> calls_;
};

FallbackCounter& counter() {
  static FallbackCounter* instance = new FallbackCounter();
  return *instance;
}

bool is_written(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

bool is_optional_generator(const c10::Argument& argument) {
  const auto& type = argument.type();
  return type->kind() == c10::TypeKind::OptionalType &&
      type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
}

// Index lists (Tensor?[]) may hold CPU tensors, as with CUDA.
bool is_index_list(const c10::Argument& argument) {
  const auto& type = argument.type();
  return type->kind() == c10::TypeKind::ListType &&
      type->containedType(0)->kind() == c10::TypeKind::OptionalType;
}

} // namespace

void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
  lazy_init();
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t first = stack->size() - arguments.size();
  CpuRedispatch call(schema.name().c_str());

  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      call.note_tensor(value.toTensor());
    } else if (value.isList()) {
      const bool cpu_allowed = is_index_list(arguments[i]);
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) {
          call.note_tensor(element.toTensor(), cpu_allowed);
        }
      }
    } else if (value.isDevice()) {
      call.note_device(value.toDevice());
    }
  }
  const c10::DeviceIndex device = call.device();

  // The original arguments: written ones are the results of in-place and out= ops,
  // and CpuRedispatch refers to them (a deque keeps their addresses stable).
  std::vector<c10::IValue> originals(
      stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  std::deque<at::Tensor> written_tensors;
  auto alias = [&](const at::Tensor& tensor, bool written) {
    if (!written || !is_vdev(tensor)) {
      return call.alias(tensor);
    }
    written_tensors.push_back(tensor);
    return call.alias_written(written_tensors.back());
  };
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    const bool written = is_written(arguments[i]);
    if (value.isTensor()) {
      value = alias(value.toTensor(), written);
    } else if (value.isList()) {
      c10::impl::GenericList list = value.toList();
      c10::impl::GenericList converted(list.elementType());
      converted.reserve(list.size());
      for (const c10::IValue& element : list) {
        converted.push_back(
            element.isTensor() ? c10::IValue(alias(element.toTensor(), written)) : element);
      }
      value = std::move(converted);
    } else if (value.isDevice() && value.toDevice().type() == kDeviceType) {
      value = c10::Device(c10::kCPU);
    } else if (value.isGenerator()) {
      value = call.generator(value.toGenerator());
    } else if (value.isNone() && is_optional_generator(arguments[i])) {
      value = call.generator(std::nullopt);
    }
  }

  {
    CpuRedispatch::Scope scope(device);
    cpu_kernel(stack);
  }

  call.update_written();
  const auto& returns = schema.returns();
  for (size_t i = 0; i < returns.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (is_written(returns[i])) {
      for (size_t j = 0; j < arguments.size(); ++j) {
        if (is_written(arguments[j]) &&
            arguments[j].alias_info()->beforeSets() == returns[i].alias_info()->beforeSets()) {
          value = originals[j];
          break;
        }
      }
    } else if (value.isTensor()) {
      value = call.to_device(value.toTensor());
    } else if (value.isList()) {
      c10::impl::GenericList list = value.toList();
      for (size_t j = 0; j < list.size(); ++j) {
        if (list.get(j).isTensor()) {
          list.set(j, call.to_device(list.get(j).toTensor()));
        }
      }
    }
  }
}

std::unordered_map<std::string, int64_t> fallback_stats() {
  return counter().snapshot();
}

void reset_fallback_stats() {
  counter().reset();
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const FallbackMode mode = read_fallback_mode();
  const bool first_call = counter().count(op);
  TORCH_CHECK(
      mode != FallbackMode::kError, full_name(op.schema()), " has no ", kBackendName,
      " kernel and VDEV_FALLBACK=error refuses the CPU fallback");
  if (mode == FallbackMode::kWarn && first_call) {
    TORCH_WARN(
        full_name(op.schema()), " has no ", kBackendName,
        " kernel: running ATen's CPU kernel on device memory");
  }
  run_on_cpu_aliases(op, stack, [&op](torch::jit::Stack* cpu_stack) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_stack);
  });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

} // namespace vdev
