// Scaled dot-product attention on vdev chooses its kernel as the CPU does, and runs
// the CPU's fused (flash) kernels on zero-copy aliases (CpuKernel.h). Without a
// choice registered for PrivateUse1, ATen falls back to the unfused math path:
// slower, and numerically different from the CPU.
#include "aten/CpuKernel.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>

namespace vdev {

// The CPU's choice, which reads only the inputs' metadata (dtype, sizes, strides,
// grad mode, the backends torch.nn.attention.sdpa_kernel enables), made for the vdev
// tensors themselves; except in float64, where CUDA's fused kernels take no input and it
// computes the math path, whose backward is differentiable again (the CPU's flash
// backward has no derivative, so double backward through attention failed where CUDA's
// works). scaled_dot_product_attention asks the stub, torch._fused_sdp_choice the op:
// both answer this.
static int64_t fused_sdp_choice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  if (query.scalar_type() == at::kDouble) {
    // CUDA's error when the backends enabled take none of the inputs.
    TORCH_CHECK(
        at::globalContext().userEnabledMathSDP(),
        "No available kernel. Aborting execution. (vdev's fused attention kernels, as CUDA's, take no "
        "float64 inputs, and torch.nn.attention.sdpa_kernel disabled the math backend)");
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  return at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), query, key, value, attn_mask, dropout_p, is_causal, scale,
      enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  register_cpu_kernels<
      at::_ops::_scaled_dot_product_flash_attention_for_cpu,
      at::_ops::_scaled_dot_product_flash_attention_for_cpu_backward>(m);
}

} // namespace vdev

namespace at::native {
// The registration macro names the stub's type unqualified.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &vdev::fused_sdp_choice)
} // namespace at::native
