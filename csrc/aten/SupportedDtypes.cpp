#include "aten/SupportedDtypes.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace vdev {
namespace {

struct KnownSignatures {
  std::shared_mutex mutex;
  std::unordered_set<std::string> keys;
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

} // namespace

DtypeSignature::DtypeSignature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  const c10::FunctionSchema& schema = op.schema();
  const void* op_identity = &schema;
  key_.append(reinterpret_cast<const char*>(&op_identity), sizeof(op_identity));
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      add_tensor(value.toTensor());
    } else if (value.isNone()) {
      key_.push_back('n');
    } else if (value.isList()) {
      key_.push_back('[');
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor()) {
          add_tensor(element.toTensor());
        } else if (element.isNone()) {
          key_.push_back('n');
        }
      }
      key_.push_back(']');
    } else if (value.isString()) {
      key_.push_back('"');
      key_.append(value.toStringRef());
      key_.push_back('\0');
    } else if (i < schema.arguments().size()) {
      const c10::TypeKind kind = kind_of(schema.arguments()[i]);
      if (kind == c10::TypeKind::NumberType) {
        key_.push_back(value.isComplexDouble() ? 'c' : value.isDouble() ? 'f' : value.isBool() ? 'b' : 'i');
      } else if (kind == c10::TypeKind::ScalarTypeType && value.isInt()) {
        key_.push_back('d');
        key_.push_back(static_cast<char>(value.toInt()));
      }
    }
  }
}

void DtypeSignature::add_tensor(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    key_.push_back('u');
    return;
  }
  key_.push_back('t');
  key_.push_back(static_cast<char>(tensor.scalar_type()));
  key_.push_back(static_cast<char>(tensor.device().type()));
}

bool DtypeSignature::known_to_run() const {
  KnownSignatures& known = known_signatures();
  std::shared_lock<std::shared_mutex> lock(known.mutex);
  return known.keys.count(key_) != 0;
}

void DtypeSignature::note_runs() const {
  KnownSignatures& known = known_signatures();
  std::unique_lock<std::shared_mutex> lock(known.mutex);
  known.keys.insert(key_);
}

} // namespace vdev
