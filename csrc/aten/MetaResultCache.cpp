#include "aten/MetaResultCache.h"

#include <c10/core/DefaultDtype.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace vdev {
namespace {

// What kind of value the next words describe, so values of different kinds never
// describe alike.
enum Kind : int64_t { kNone = 1, kTensor, kUndefinedTensor, kInt, kDouble, kComplex, kBool, kString, kDevice, kList };

int64_t bits_of(double value) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

size_t index_in(c10::SmallVector<const void*, 6>& seen, const void* pointer) {
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] == pointer) {
      return i;
    }
  }
  seen.push_back(pointer);
  return seen.size() - 1;
}

} // namespace

void LaunchSignature::add(int64_t word) {
  words_.push_back(word);
}

bool LaunchSignature::describe(const OperatorFacts& facts, c10::ArrayRef<c10::IValue> arguments) {
  add(reinterpret_cast<intptr_t>(&facts));
  add(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  for (const c10::IValue& value : arguments) {
    if (!describe_value(value)) {
      return false;
    }
  }
  for (int64_t word : words_) {
    hash_ = (hash_ ^ static_cast<size_t>(word)) * 0x100000001b3ULL;
  }
  return true;
}

void LaunchSignature::describe_tensor(const at::Tensor& tensor) {
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  const c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  add(kTensor);
  add((static_cast<int64_t>(tensor.device().type()) << 8) | static_cast<uint8_t>(tensor.device().index()));
  add(static_cast<int64_t>(impl->dtype().toScalarType()));
  add(impl->is_conj() | (impl->is_neg() << 1) | (impl->is_wrapped_number() << 2));
  add(static_cast<int64_t>(index_in(impls_, impl)));
  add(static_cast<int64_t>(index_in(storages_, storage)));
  add(static_cast<int64_t>(storage->nbytes()));
  add(impl->storage_offset());
  const c10::IntArrayRef sizes = impl->sizes();
  const c10::IntArrayRef strides = impl->strides();
  add(static_cast<int64_t>(sizes.size()));
  words_.append(sizes.begin(), sizes.end());
  words_.append(strides.begin(), strides.end());
}

bool LaunchSignature::describe_value(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined()) {
      add(kUndefinedTensor);
      return true;
    }
    // Launched arguments are strided (launchable_argument), so they have storages.
    describe_tensor(tensor);
    return true;
  }
  if (value.isNone()) {
    add(kNone);
  } else if (value.isInt()) {
    add(kInt);
    add(value.toInt());
  } else if (value.isDouble()) {
    add(kDouble);
    add(bits_of(value.toDouble()));
  } else if (value.isComplexDouble()) {
    const c10::complex<double> complex = value.toComplexDouble();
    add(kComplex);
    add(bits_of(complex.real()));
    add(bits_of(complex.imag()));
  } else if (value.isBool()) {
    add(kBool);
    add(value.toBool());
  } else if (value.isString()) {
    const std::string& text = value.toStringRef();
    add(kString);
    add(static_cast<int64_t>(text.size()));
    for (size_t i = 0; i < text.size(); i += sizeof(int64_t)) {
      int64_t word = 0;
      std::memcpy(&word, text.data() + i, std::min(sizeof(int64_t), text.size() - i));
      add(word);
    }
  } else if (value.isDevice()) {
    add(kDevice);
    add((static_cast<int64_t>(value.toDevice().type()) << 8) | static_cast<uint8_t>(value.toDevice().index()));
  } else if (value.isList()) {
    const c10::ArrayRef<c10::IValue> elements = value.toListRef();
    add(kList);
    add(static_cast<int64_t>(elements.size()));
    for (const c10::IValue& element : elements) {
      if (!describe_value(element)) {
        return false;
      }
    }
  } else {
    return false;
  }
  return true;
}

bool LaunchSignature::operator==(const LaunchSignature& other) const {
  return hash_ == other.hash_ && words_.size() == other.words_.size() &&
      std::memcmp(words_.data(), other.words_.data(), words_.size() * sizeof(int64_t)) == 0;
}

namespace {

// Direct-mapped: a signature's slot is fixed by its hash, a newer one takes it over.
class RememberedMetaResults {
 public:
  const MetaResult* find(const LaunchSignature& signature) const {
    const Slot& slot = slots_[signature.hash() % kSlots];
    return slot.filled && slot.signature == signature ? &slot.result : nullptr;
  }

  void remember(const LaunchSignature& signature, const MetaResult& result) {
    Slot& slot = slots_[signature.hash() % kSlots];
    slot.signature = signature;
    slot.result = result;
    slot.filled = true;
  }

 private:
  static constexpr size_t kSlots = 251;
  struct Slot {
    bool filled = false;
    LaunchSignature signature;
    MetaResult result;
  };
  std::array<Slot, kSlots> slots_;
};

RememberedMetaResults& remembered() {
  thread_local RememberedMetaResults results;
  return results;
}

} // namespace

const MetaResult* remembered_meta_result(const LaunchSignature& signature) {
  return remembered().find(signature);
}

void remember_meta_result(const LaunchSignature& signature, const MetaResult& result) {
  remembered().remember(signature, result);
}

} // namespace vdev
