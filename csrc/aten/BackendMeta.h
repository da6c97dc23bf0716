#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <map>
#include <string>

namespace vdev {

// Backend-private state of a vdev TensorImpl, kept where a real accelerator keeps
// e.g. a tensor's internal memory layout: vdev's is a set of named flags. It is
// immutable (setting flags installs a new one), so detached and shallow copies share
// it safely; torch.save / torch.load round-trip it through the tensor's serialized
// metadata.
class VDEV_API BackendMeta final : public c10::BackendMeta {
 public:
  explicit BackendMeta(std::map<std::string, bool> flags) : flags_(std::move(flags)) {}

  const std::map<std::string, bool>& flags() const {
    return flags_;
  }

 private:
  std::map<std::string, bool> flags_;
};

// The flags of a vdev tensor's BackendMeta (empty if it has none).
VDEV_API std::map<std::string, bool> backend_flags(const at::Tensor& tensor);
// Replaces them; an empty map removes the BackendMeta.
VDEV_API void set_backend_flags(const at::Tensor& tensor, std::map<std::string, bool> flags);

} // namespace vdev
