#include "aten/SupportedDtypes.h"

#include "aten/DiscardingWarnings.h"
#include "runtime/Launch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <deque>
#include <string>
#include <string_view>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace vdev {
namespace {

struct KnownSignatures {
  std::shared_mutex mutex;
  std::unordered_set<std::string_view> keys;  // views of `storage`, looked up without a copy
  std::deque<std::string> storage;            // never moves its strings
};

KnownSignatures& known_signatures() {
  static KnownSignatures* known = new KnownSignatures();  // used by threads alive at exit
  return *known;
}

c10::TypeKind kind_of(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.real_type();
  if (const auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind();
  }
  return type->kind();
}

// What an alias's refused data access raises: it ends the run refusing data.
constexpr std::string_view kDataRefused = "vdev: a run refusing data accessed a tensor's data";

} // namespace

at::Tensor DataRefusingAliases::alias(const at::Tensor& tensor) {
  if (!tensor.defined() || !is_vdev(tensor)) {
    return tensor;
  }
  at::Tensor alias = aliases_.alias(tensor);
  alias.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl()->release_data_and_set_meta_custom_data_ptr_error_msg_(
      std::string(kDataRefused));
  return alias;
}

void raise_metadata_errors(const char* op_name, c10::function_ref<void(DataRefusingAliases&)> kernel) {
  const DiscardingWarnings discarding;
  c10::impl::ExcludeDispatchKeyGuard as_launched(keys_handled_on_host());
  DataRefusingAliases aliases;
  try {
    kernel(aliases);
  } catch (const c10::NotImplementedError& error) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, op_name, ": ", error.what_without_backtrace());
  } catch (const c10::Error& error) {
    if (error.msg().find(kDataRefused) == std::string::npos) {
      throw;
    }
  }
}

void raise_metadata_errors(
    const char* op_name, const c10::OperatorHandle& cpu_op, const c10::KernelFunction* cpu_kernel,
    c10::ArrayRef<c10::IValue> arguments, c10::ArrayRef<at::Tensor> outputs) {
  raise_metadata_errors(op_name, [&](DataRefusingAliases& aliases) {
    torch::jit::Stack stack;
    stack.reserve(arguments.size() + outputs.size());
    for (const c10::IValue& value : arguments) {
      if (value.isTensor()) {
        stack.emplace_back(aliases.alias(value.toTensor()));
      } else if (value.isList()) {
        c10::impl::GenericList converted(value.toList().elementType());
        converted.reserve(value.toListRef().size());
        for (const c10::IValue& element : value.toListRef()) {
          converted.push_back(element.isTensor() ? c10::IValue(aliases.alias(element.toTensor())) : element);
        }
        stack.emplace_back(std::move(converted));
      } else if (value.isDevice() && value.toDevice().type() == kDeviceType) {
        stack.emplace_back(c10::Device(c10::kCPU));
      } else {
        stack.push_back(value);
      }
    }
    for (const at::Tensor& output : outputs) {
      stack.emplace_back(aliases.alias(output));
    }
    constexpr c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);
    if (cpu_kernel != nullptr) {
      cpu_kernel->callBoxed(cpu_op, kCpu, &stack);
    } else {
      cpu_op.redispatchBoxed(kCpu, &stack);
    }
  });
}

DtypeSignature::DtypeSignature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  const c10::FunctionSchema& schema = op.schema();
  add_identity(&schema);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      add(value.toTensor());
    } else if (value.isNone()) {
      key_.push_back('n');
    } else if (value.isList()) {
      key_.push_back('[');
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) {
          add(element.toTensor());
        } else if (element.isNone()) {
          key_.push_back('n');
        }
      }
      key_.push_back(']');
    } else if (value.isString()) {
      add(c10::string_view(value.toStringRef()));
    } else if (i < schema.arguments().size()) {
      const c10::TypeKind kind = kind_of(schema.arguments()[i]);
      if (kind == c10::TypeKind::NumberType) {
        add(value.toScalar());
      } else if (kind == c10::TypeKind::BoolType) {
        add(value.toBool());
      } else if (kind == c10::TypeKind::ScalarTypeType && value.isInt()) {
        add(std::optional<c10::ScalarType>(static_cast<c10::ScalarType>(value.toInt())));
      }
    }
  }
}

DtypeSignature::DtypeSignature(const char* op_name) {
  add_identity(op_name);
}

void DtypeSignature::add_identity(const void* identity) {
  const char* bytes = reinterpret_cast<const char*>(&identity);
  key_.append(bytes, bytes + sizeof(identity));
}

void DtypeSignature::add(const std::optional<at::Tensor>& tensor) {
  if (tensor.has_value()) {
    add(*tensor);
  } else {
    key_.push_back('n');
  }
}

void DtypeSignature::add(at::TensorList tensors) {
  key_.push_back('[');
  for (const at::Tensor& tensor : tensors) {
    add(tensor);
  }
  key_.push_back(']');
}

void DtypeSignature::add(const c10::Scalar& scalar) {
  key_.push_back(scalar.isComplex() ? 'c' : scalar.isFloatingPoint() ? 'f' : scalar.isBoolean() ? 'b' : 'i');
}

void DtypeSignature::add(c10::ArrayRef<c10::Scalar> scalars) {
  key_.push_back('[');
  for (const c10::Scalar& scalar : scalars) {
    add(scalar);
  }
  key_.push_back(']');
}

void DtypeSignature::add(std::optional<c10::ScalarType> dtype) {
  key_.push_back('d');
  key_.push_back(dtype.has_value() ? static_cast<char>(*dtype) : 'n');
}

void DtypeSignature::add(c10::string_view text) {
  key_.push_back('"');
  key_.append(text.begin(), text.end());
  key_.push_back('\0');
}

void DtypeSignature::add(bool flag) {
  key_.push_back(flag ? 'T' : 'F');
}

void DtypeSignature::add(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    key_.push_back('u');
    return;
  }
  const int64_t numel = tensor.numel();
  key_.push_back(numel == 0 ? '0' : numel == 1 ? '1' : 't');
  key_.push_back(static_cast<char>(tensor.scalar_type()));
  key_.push_back(static_cast<char>(tensor.device().type()));
}

bool DtypeSignature::known_to_run() const {
  KnownSignatures& known = known_signatures();
  std::shared_lock<std::shared_mutex> lock(known.mutex);
  return known.keys.count(std::string_view(key_.data(), key_.size())) != 0;
}

void DtypeSignature::note_runs() const {
  KnownSignatures& known = known_signatures();
  std::unique_lock<std::shared_mutex> lock(known.mutex);
  const std::string_view key(key_.data(), key_.size());
  if (known.keys.count(key) == 0) {
    known.keys.insert(known.storage.emplace_back(key));
  }
}

} // namespace vdev
