// The boxed fallback: every aten op without a vdev kernel runs ATen's CPU kernel on
// zero-copy CPU aliases of its arguments (CpuRedispatch). VDEV_FALLBACK=silent (the
// default), warn (once per op) or error (refuse, naming the op) says how loudly.
#include "aten/Fallback.h"

#include "aten/CpuRedispatch.h"
#include "runtime/Device.h"

#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <c10/util/SmallVector.h>

#include <cstdlib>
#include <string_view>
#include <memory>
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

// What run_on_cpu_aliases needs of an operator's schema, worked out on its first call
// rather than walking the schema (alias sets, types) on every call.
struct OperatorFacts {
  explicit OperatorFacts(const c10::FunctionSchema& schema) {
    const auto& arguments = schema.arguments();
    for (const c10::Argument& argument : arguments) {
      written.push_back(is_written(argument));
      index_list.push_back(is_index_list(argument));
      optional_generator.push_back(is_optional_generator(argument));
    }
    for (const c10::Argument& result : schema.returns()) {
      int argument_index = -1;
      if (is_written(result)) {
        for (size_t i = 0; i < arguments.size(); ++i) {
          if (is_written(arguments[i]) &&
              arguments[i].alias_info()->beforeSets() == result.alias_info()->beforeSets()) {
            argument_index = static_cast<int>(i);
            break;
          }
        }
      }
      written_argument_of_result.push_back(argument_index);
    }
  }

  c10::SmallVector<bool, 8> written;
  c10::SmallVector<bool, 8> index_list;
  c10::SmallVector<bool, 8> optional_generator;
  // For each result, the written argument it returns (in-place, out=), or -1.
  c10::SmallVector<int, 4> written_argument_of_result;
};

// Per operator, keyed by its schema (which lives as long as the operator): its facts
// and how often the fallback ran it since the last reset.
class OperatorRegistry {
 public:
  struct Entry {
    explicit Entry(const c10::FunctionSchema& schema) : facts(schema) {}
    const OperatorFacts facts;
    int64_t fallback_calls = 0;
  };

  const OperatorFacts& facts(const c10::OperatorHandle& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    return entry(op).facts;
  }

  // Counts a fallback call of `op`; `first` is true the first time since the last reset.
  const OperatorFacts& count(const c10::OperatorHandle& op, bool& first) {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& counted = entry(op);
    first = counted.fallback_calls == 0;
    counted.fallback_calls += 1;
    return counted.facts;
  }

  std::unordered_map<std::string, int64_t> snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unordered_map<std::string, int64_t> result;
    for (const auto& [schema, counted] : entries_) {
      if (counted->fallback_calls > 0) {
        result[full_name(*schema)] = counted->fallback_calls;
      }
    }
    return result;
  }

  // Facts stay: calls in flight refer to them.
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [schema, counted] : entries_) {
      counted->fallback_calls = 0;
    }
  }

 private:
  Entry& entry(const c10::OperatorHandle& op) {
    const c10::FunctionSchema* schema = &op.schema();
    auto found = entries_.find(schema);
    if (found == entries_.end()) {
      found = entries_.emplace(schema, std::make_unique<Entry>(*schema)).first;
    }
    return *found->second;
  }

  std::mutex mutex_;
  ska::flat_hash_map<const c10::FunctionSchema*, std::unique_ptr<Entry>> entries_;
};

OperatorRegistry& registry() {
  static OperatorRegistry* instance = new OperatorRegistry();
  return *instance;
}

void run_with_facts(
    const c10::OperatorHandle& op, const OperatorFacts& facts, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
  lazy_init();
  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = facts.written.size();
  const size_t first = stack->size() - argument_count;
  // The original arguments: written ones are the results of in-place and out= ops,
  // and CpuRedispatch refers to them by address (so they outlive it). The addresses
  // stay put: `originals` is never resized, and a list's elements live in the list it
  // holds.
  const c10::SmallVector<c10::IValue, 8> originals(
      stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  CpuRedispatch call(schema.name().c_str());

  for (size_t i = 0; i < argument_count; ++i) {
    const c10::IValue& value = originals[i];
    using CpuTensors = CpuRedispatch::CpuTensors;
    const CpuTensors cpu = facts.written[i] ? CpuTensors::Rejected
        : facts.index_list[i]               ? CpuTensors::Allowed
                                            : CpuTensors::ScalarsAllowed;
    if (value.isTensor()) {
      call.note_tensor(value.toTensor(), cpu);
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) {
          call.note_tensor(element.toTensor(), cpu);
        }
      }
    } else if (value.isDevice()) {
      call.note_device(value.toDevice());
    }
  }
  const c10::DeviceIndex device = call.device();

  for (size_t i = 0; i < argument_count; ++i) {
    const c10::IValue& original = originals[i];
    c10::IValue& value = (*stack)[first + i];
    auto alias = [&call, written = facts.written[i]](const at::Tensor& tensor) {
      return written ? call.alias_written(tensor) : call.alias(tensor);
    };
    if (original.isTensor()) {
      value = alias(original.toTensor());
    } else if (original.isList()) {
      c10::impl::GenericList converted(original.toList().elementType());
      const c10::ArrayRef<c10::IValue> elements = original.toListRef();
      converted.reserve(elements.size());
      for (const c10::IValue& element : elements) {
        converted.push_back(element.isTensor() ? c10::IValue(alias(element.toTensor())) : element);
      }
      value = std::move(converted);
    } else if (original.isDevice() && original.toDevice().type() == kDeviceType) {
      value = c10::Device(c10::kCPU);
    } else if (original.isGenerator()) {
      value = call.generator(original.toGenerator());
    } else if (original.isNone() && facts.optional_generator[i]) {
      value = call.generator(std::nullopt);
    }
  }

  {
    CpuRedispatch::Scope scope(device);
    cpu_kernel(stack);
  }

  call.update_written();
  for (size_t i = 0; i < facts.written_argument_of_result.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    const int written_argument = facts.written_argument_of_result[i];
    if (written_argument >= 0) {
      value = originals[written_argument];
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

} // namespace

void run_on_cpu_aliases(
    const c10::OperatorHandle& op, torch::jit::Stack* stack,
    const std::function<void(torch::jit::Stack*)>& cpu_kernel) {
  run_with_facts(op, registry().facts(op), stack, cpu_kernel);
}

std::unordered_map<std::string, int64_t> fallback_stats() {
  return registry().snapshot();
}

void reset_fallback_stats() {
  registry().reset();
}

namespace {

// `cpu_key` is the key of the CPU kernels that run: CPU, or SparseCPU when a sparse
// tensor is among the arguments (sparse kernels also take the dense ones).
void fallback_to(c10::DispatchKey cpu_key, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const FallbackMode mode = read_fallback_mode();
  bool first_call = false;
  const OperatorFacts& facts = registry().count(op, first_call);
  TORCH_CHECK(
      mode != FallbackMode::kError, full_name(op.schema()), " has no ", kBackendName,
      " kernel and VDEV_FALLBACK=error refuses the CPU fallback");
  if (mode == FallbackMode::kWarn && first_call) {
    TORCH_WARN(
        full_name(op.schema()), " has no ", kBackendName,
        " kernel: running ATen's CPU kernel on device memory");
  }
  run_with_facts(op, facts, stack, [&op, cpu_key](torch::jit::Stack* cpu_stack) {
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), cpu_stack);
  });
}

void sparse_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::SparseCPU, op, stack);
}

} // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::CPU, op, stack);
}

namespace {

// An op with both a CPU (SparseCPU) kernel and a CompositeExplicitAutograd(NonFunctional)
// one reaches the composite on vdev, not the fallback: for structured ops a meta
// function, `empty`, then the boxed .out (twice the work of the CPU's fused kernel);
// for others ATen's generic version, which may differ from the CPU's (native_group_norm's
// views reject channels-last input; dense composites cannot take sparse tensors). vdev
// runs the CPU kernel instead, through the fallback. Done at first use, when every vdev
// kernel of the library is registered.
std::vector<std::string>& sent_to_fallback() {
  static std::vector<std::string> names;
  return names;
}

void prefer_cpu_kernels_to_composites(
    torch::Library& library, c10::DispatchKey cpu_key, c10::DispatchKey vdev_key,
    torch::CppFunction (*fallback)()) {
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    constexpr std::string_view kAtenPrefix = "aten::";
    if (name.name.compare(0, kAtenPrefix.size(), kAtenPrefix) != 0) {
      continue;
    }
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op.has_value() || op->hasKernelForDispatchKey(vdev_key) || !op->hasKernelForDispatchKey(cpu_key) ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))) {
      continue;
    }
    std::string unqualified = name.name.substr(kAtenPrefix.size());
    if (!name.overload_name.empty()) {
      unqualified += "." + name.overload_name;
    }
    library.impl(unqualified.c_str(), fallback());
    sent_to_fallback().push_back(std::string(kAtenPrefix) + unqualified);
  }
}

// Never destroyed: unregistering kernels while the process exits (with autograd's
// device threads still about) aborted it.
template <c10::DispatchKey kVdevKey>
torch::Library& aten_library() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten", kVdevKey, __FILE__, __LINE__);
  return *library;
}

void prefer_cpu_kernels() {
  prefer_cpu_kernels_to_composites(
      aten_library<c10::DispatchKey::PrivateUse1>(), c10::DispatchKey::CPU, c10::DispatchKey::PrivateUse1,
      &torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>);
  prefer_cpu_kernels_to_composites(
      aten_library<c10::DispatchKey::SparsePrivateUse1>(), c10::DispatchKey::SparseCPU,
      c10::DispatchKey::SparsePrivateUse1, &torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback>);
}

} // namespace

std::vector<std::string> ops_sent_to_fallback() {
  return is_initialized() ? sent_to_fallback() : std::vector<std::string>();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  on_first_init(&prefer_cpu_kernels);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback>());
}

} // namespace vdev
