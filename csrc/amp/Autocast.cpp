// Autocast for vdev: the AutocastPrivateUse1 key gets CUDA's policy, built from the
// same op lists (ATen/autocast_mode.h) and the same cast wrappers, with vdev's
// autocast dtype (torch.autocast('vdev', dtype=...), float16 or bfloat16). Every
// registration is also recorded, so the tests check each op that was registered.
#include "amp/Autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace vdev {
namespace {

// The lists' redispatch signatures name these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

std::vector<AutocastOp>& recorded_ops() {
  static std::vector<AutocastOp> ops;
  return ops;
}

// As on CUDA: binary cross entropy is unsafe in lower precision, so autocast refuses it.
Tensor binary_cross_entropy_refused(
    const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
      "on ", kBackendName, ": use torch.nn.functional.binary_cross_entropy_with_logits or "
      "torch.nn.BCEWithLogitsLoss, which combine the sigmoid with the loss and are safe "
      "to autocast");
}

#define VDEV_OP_NAME_1(OP) #OP
#define VDEV_OP_NAME_2(OP, OVERLOAD) #OP "." #OVERLOAD
#define VDEV_OP_NAME_SELECT(_1, _2, NAME, ...) NAME
#define VDEV_OP_NAME(...) \
  VDEV_OP_NAME_SELECT(__VA_ARGS__, VDEV_OP_NAME_2, VDEV_OP_NAME_1)(__VA_ARGS__)

// (OP) or (OP, OVERLOAD) with a policy.
#define VDEV_AUTOCAST(POLICY, ...)              \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, POLICY)     \
  recorded_ops().push_back({VDEV_OP_NAME(__VA_ARGS__), #POLICY});

#define VDEV_AUTOCAST_LOWER_PRECISION_FP(...) VDEV_AUTOCAST(lower_precision_fp, __VA_ARGS__)
#define VDEV_AUTOCAST_FP32(...) VDEV_AUTOCAST(fp32, __VA_ARGS__)
#define VDEV_AUTOCAST_FP32_SET_OPT_DTYPE(...) VDEV_AUTOCAST(fp32_set_opt_dtype, __VA_ARGS__)
#define VDEV_AUTOCAST_PROMOTE(...) VDEV_AUTOCAST(promote, __VA_ARGS__)

// Ops registered under one signature and redispatched to another (norm gets a dtype).
#define VDEV_AUTOCAST_REDISPATCH(FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(                               \
      FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY)                           \
  recorded_ops().push_back({NAME, #POLICY});

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(VDEV_AUTOCAST_LOWER_PRECISION_FP)
  AT_FORALL_FP32(VDEV_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(VDEV_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(VDEV_AUTOCAST_REDISPATCH)
  AT_FORALL_PROMOTE(VDEV_AUTOCAST_PROMOTE)
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
}

} // namespace

const std::vector<AutocastOp>& autocast_ops() {
  return recorded_ops();
}

} // namespace vdev
