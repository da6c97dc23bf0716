// The boxed fallback: every aten op without a vdev kernel runs ATen's CPU kernel on
// zero-copy CPU aliases of its arguments (CpuRedispatch). VDEV_FALLBACK=silent (the
// default), warn (once per op) or error (refuse, naming the op) says how loudly.
#include "aten/Fallback.h"

#include "aten/CpuRedispatch.h"
#include "aten/OperatorFacts.h"
#include "aten/QueuedOp.h"
#include "runtime/Device.h"

#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

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

bool is_dtype(const c10::Argument& argument) {
  // The real type: a schema's type() of a ScalarType is int.
  const auto& type = argument.real_type();
  const auto& named = type->kind() == c10::TypeKind::OptionalType ? type->containedType(0) : type;
  return named->kind() == c10::TypeKind::ScalarTypeType;
}

} // namespace

OperatorFacts::OperatorFacts(const c10::FunctionSchema& schema)
    : accelerator_dtypes(vdev::accelerator_dtypes(schema.name())), views_only(!schema.returns().empty()) {
  const auto& arguments = schema.arguments();
  for (const c10::Argument& argument : arguments) {
    written.push_back(is_written(argument));
    index_list.push_back(is_index_list(argument));
    optional_generator.push_back(is_optional_generator(argument));
    dtype.push_back(is_dtype(argument));
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
    views_only = views_only && argument_index < 0 && result.alias_info() != nullptr;
  }
  for (bool argument_written : written) {
    views_only = views_only && !argument_written;
  }
  launch = plan_launch(schema, *this);
}

namespace {

// Per operator, keyed by its schema (which lives as long as the operator): its facts
// and how often the fallback ran it since the last reset. Entries are never removed.
class OperatorRegistry {
 public:
  struct Entry {
    explicit Entry(const c10::FunctionSchema& schema) : schema(schema), facts(schema) {}
    const c10::FunctionSchema& schema;
    const OperatorFacts facts;
    std::atomic<int64_t> fallback_calls{0};
  };

  const OperatorFacts& facts(const c10::OperatorHandle& op) {
    return cached_entry(op).facts;
  }

  // Counts a fallback call of `op`; `first` is true the first time since the last reset.
  const OperatorFacts& count(const c10::OperatorHandle& op, bool& first) {
    Entry& counted = cached_entry(op);
    first = counted.fallback_calls.fetch_add(1, std::memory_order_relaxed) == 0;
    return counted.facts;
  }

  std::unordered_map<std::string, int64_t> snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unordered_map<std::string, int64_t> result;
    for (const auto& [schema, counted] : entries_) {
      const int64_t calls = counted->fallback_calls.load(std::memory_order_relaxed);
      if (calls > 0) {
        result[full_name(*schema)] = calls;
      }
    }
    return result;
  }

  // Facts stay: calls in flight refer to them.
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [schema, counted] : entries_) {
      counted->fallback_calls.store(0, std::memory_order_relaxed);
    }
  }

 private:
  // Every fallback call needs its op's entry: a direct-mapped cache of the entries
  // looked up so far serves most calls with one load, neither taking the lock nor
  // hashing. Entries live forever, so a cached one stays valid; a slot holds one
  // pointer, so a reader sees a whole entry or none.
  Entry& cached_entry(const c10::OperatorHandle& op) {
    const c10::FunctionSchema* schema = &op.schema();
    std::atomic<Entry*>& slot =
        cache_[(reinterpret_cast<uintptr_t>(schema) / alignof(c10::FunctionSchema)) % kCacheSlots];
    Entry* cached = slot.load(std::memory_order_acquire);
    if (cached != nullptr && &cached->schema == schema) {
      return *cached;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = entries_.find(schema);
    if (found == entries_.end()) {
      found = entries_.emplace(schema, std::make_unique<Entry>(*schema)).first;
    }
    slot.store(found->second.get(), std::memory_order_release);
    return *found->second;
  }

  static constexpr size_t kCacheSlots = 256;
  std::atomic<Entry*> cache_[kCacheSlots] = {};
  std::mutex mutex_;
  ska::flat_hash_map<const c10::FunctionSchema*, std::unique_ptr<Entry>> entries_;
};

OperatorRegistry& registry() {
  static OperatorRegistry* instance = new OperatorRegistry();
  return *instance;
}

template <class CpuKernel>
void run_with_facts(
    const c10::OperatorHandle& op, const OperatorFacts& facts, torch::jit::Stack* stack,
    const CpuKernel& cpu_kernel) {
  lazy_init();
  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = facts.written.size();
  const size_t first = stack->size() - argument_count;
  // The original arguments, moved out of the stack, whose slots get the converted ones:
  // written ones are the results of in-place and out= ops, and CpuRedispatch refers to
  // them by address (so they outlive it). The addresses stay put: `originals` is never
  // resized, and a list's elements live in the list it holds.
  const c10::SmallVector<c10::IValue, 8> originals(
      std::make_move_iterator(stack->begin() + static_cast<std::ptrdiff_t>(first)),
      std::make_move_iterator(stack->end()));
  CpuRedispatch call(schema.name().c_str());
  call.accept_accelerator_dtypes(facts.accelerator_dtypes);

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
    } else if (facts.dtype[i] && value.isInt()) {
      call.note_dtype_argument(static_cast<c10::ScalarType>(value.toInt()));
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
    } else if (facts.dtype[i] && original.isInt()) {
      value = static_cast<int64_t>(call.dtype_argument(static_cast<c10::ScalarType>(original.toInt())));
    } else {
      value = original;
    }
  }

  {
    CpuRedispatch::Scope scope(device, schema.name().c_str(), !facts.views_only);
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

const OperatorFacts& operator_facts(const c10::OperatorHandle& op) {
  return registry().facts(op);
}

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

// `cpu_key` is the key of the CPU kernels that run: CPU, or SparseCPU (SparseCsrCPU)
// when a sparse COO (compressed) tensor is among the arguments (sparse kernels also
// take the dense ones).
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
  if (cpu_key == c10::DispatchKey::CPU) {
    lazy_init();
    if (launch_op(op, facts, stack)) {
      return;
    }
  }
  run_with_facts(op, facts, stack, [&op, cpu_key](torch::jit::Stack* cpu_stack) {
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), cpu_stack);
  });
}

void sparse_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::SparseCPU, op, stack);
}

void nested_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::NestedTensorCPU, op, stack);
}

void sparse_compressed_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::SparseCsrCPU, op, stack);
}

} // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to(c10::DispatchKey::CPU, op, stack);
}

namespace {

// `name` without the in-place variant's trailing underscore (dunder names keep theirs).
std::string family_of(const c10::OperatorName& name) {
  const std::string& base = name.name;
  const bool in_place = base.size() > 2 && base.back() == '_' && base[base.size() - 2] != '_';
  return in_place ? base.substr(0, base.size() - 1) : base;
}

// The direct fallbacks (see register_direct_fallbacks), by op family.
class DirectFallbacks {
 public:
  void register_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (registered_) {
      return;
    }
    registered_ = true;
    c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      constexpr std::string_view kAtenPrefix = "aten::";
      std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
      if (name.name.compare(0, kAtenPrefix.size(), kAtenPrefix) != 0 || !op.has_value()) {
        continue;
      }
      const bool explicit_composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
      const bool implicit_composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
      for (const Target& target : kTargets) {
        const bool composite = explicit_composite || (target.over_implicit_composite && implicit_composite);
        if (composite && op->hasKernelForDispatchKey(target.cpu_key) &&
            !op->hasKernelForDispatchKey(target.vdev_key)) {
          families_[family_of(name)].ops.push_back(Op{name, &target, std::nullopt});
        }
      }
    }
    for (auto& [family, members] : families_) {
      register_family(members);
    }
  }

  bool is_registered(const c10::OperatorName& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = families_.find(family_of(name));
    if (found == families_.end()) {
      return false;
    }
    for (const Op& op : found->second.ops) {
      if (op.name == name && op.target->vdev_key == c10::DispatchKey::PrivateUse1) {
        return op.registration.has_value();
      }
    }
    return false;
  }

  void withdraw(const std::string& family) {
    std::lock_guard<std::mutex> lock(mutex_);
    Family& members = families_[family];
    if (members.withdrawals++ == 0) {
      for (Op& op : members.ops) {
        op.registration.reset();
      }
    }
  }

  void restore(const std::string& family) {
    std::lock_guard<std::mutex> lock(mutex_);
    Family& members = families_[family];
    if (--members.withdrawals == 0 && registered_) {
      register_family(members);
    }
  }

 private:
  // The dense, sparse COO and sparse compressed counterparts: an op with a composite
  // kernel and a CPU (SparseCPU, SparseCsrCPU) one gets the fallback for vdev tensors
  // of that layout.
  // Nested tensors also take the CPU's kernel over a CompositeImplicitAutograd one
  // (linear, matmul): the composites use sizes nested tensors do not have, and
  // autograd for nested tensors is AutogradNestedTensor's, which the CPU kernel
  // already settles.
  struct Target {
    c10::DispatchKey cpu_key;
    c10::DispatchKey vdev_key;
    c10::KernelFunction (*fallback)();
    bool over_implicit_composite;
  };
  static constexpr Target kTargets[] = {
      {c10::DispatchKey::CPU, c10::DispatchKey::PrivateUse1,
       &c10::KernelFunction::makeFromBoxedFunction<&cpu_fallback>, false},
      {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1,
       &c10::KernelFunction::makeFromBoxedFunction<&sparse_cpu_fallback>, false},
      {c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1,
       &c10::KernelFunction::makeFromBoxedFunction<&sparse_compressed_cpu_fallback>, false},
      {c10::DispatchKey::NestedTensorCPU, c10::DispatchKey::NestedTensorPrivateUse1,
       &c10::KernelFunction::makeFromBoxedFunction<&nested_cpu_fallback>, true},
  };

  struct Op {
    c10::OperatorName name;
    const Target* target;
    std::optional<c10::RegistrationHandleRAII> registration;
  };
  struct Family {
    std::vector<Op> ops;
    int withdrawals = 0;
  };

  static void register_family(Family& members) {
    if (members.withdrawals > 0) {
      return;
    }
    for (Op& op : members.ops) {
      op.registration.emplace(c10::Dispatcher::singleton().registerImpl(
          op.name, op.target->vdev_key, op.target->fallback(), std::nullopt, nullptr,
          "direct fallback registered by torch_vdev"));
    }
  }

  std::mutex mutex_;
  bool registered_ = false;
  std::unordered_map<std::string, Family> families_;
};

DirectFallbacks& direct_fallbacks() {
  // Leaked on purpose: registrations must not be undone during static destruction.
  static DirectFallbacks* instance = new DirectFallbacks();
  return *instance;
}

} // namespace

void register_direct_fallbacks() {
  direct_fallbacks().register_all();
}

bool has_vdev_kernel(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
      !direct_fallbacks().is_registered(op.operator_name());
}

DirectFallbacksWithdrawn::DirectFallbacksWithdrawn(const c10::OperatorHandle& op)
    : family_(family_of(op.operator_name())) {
  direct_fallbacks().withdraw(family_);
}

DirectFallbacksWithdrawn::~DirectFallbacksWithdrawn() {
  direct_fallbacks().restore(family_);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_cpu_fallback>());
}

// Quantized tensors are deprecated in PyTorch 2.13 (quantize_per_tensor warns that they
// will be removed): vdev has no quantized kernels, and says so instead of PyTorch's
// generic "could not run" error.
void refuse_quantized(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, kBackendName, " does not support quantized tensors: they are deprecated in PyTorch 2.13 ",
      "and ", kBackendName, " has no quantized kernels (", full_name(op.schema()),
      "). Dequantize first (tensor.dequantize()), or use low-precision dtypes such as float8_e4m3fn.");
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_compressed_cpu_fallback>());
}

} // namespace vdev
