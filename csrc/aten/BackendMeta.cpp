#include "aten/BackendMeta.h"

#include "aten/Tensor.h"

#include <torch/csrc/jit/serialization/pickler_helper.h>

namespace vdev {
namespace {

// Serialized flags share the metadata dict with PyTorch's own keys ("conj", "neg").
constexpr char kKeyPrefix[] = "vdev.";

void check_vdev(const at::Tensor& tensor) {
  TORCH_CHECK(
      is_vdev(tensor), "Backend metadata belongs to ", kBackendName, " tensors, got a tensor on ",
      tensor.device());
}

void save_flags(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [name, value] : backend_flags(tensor)) {
    metadata[kKeyPrefix + name] = value;
  }
}

void load_flags(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  std::map<std::string, bool> flags;
  const std::string prefix = kKeyPrefix;
  for (const auto& [key, value] : metadata) {
    if (key.compare(0, prefix.size(), prefix) == 0) {
      flags[key.substr(prefix.size())] = value;
    }
  }
  if (!flags.empty()) {
    set_backend_flags(tensor, std::move(flags));
  }
}

struct RegisterSerialization {
  RegisterSerialization() {
    torch::jit::TensorBackendMetaRegistry(kDeviceType, &save_flags, &load_flags);
  }
} register_serialization;

} // namespace

std::map<std::string, bool> backend_flags(const at::Tensor& tensor) {
  check_vdev(tensor);
  auto* meta = dynamic_cast<const BackendMeta*>(tensor.unsafeGetTensorImpl()->get_backend_meta());
  return meta != nullptr ? meta->flags() : std::map<std::string, bool>();
}

void set_backend_flags(const at::Tensor& tensor, std::map<std::string, bool> flags) {
  check_vdev(tensor);
  c10::intrusive_ptr<c10::BackendMeta> meta;
  if (!flags.empty()) {
    meta = c10::make_intrusive<BackendMeta>(std::move(flags));
  }
  tensor.unsafeGetTensorImpl()->set_backend_meta(std::move(meta));
}

} // namespace vdev
