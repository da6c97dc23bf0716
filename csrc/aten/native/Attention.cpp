// Scaled dot-product attention on vdev chooses its kernel as the CPU does, and runs
// the CPU's fused (flash) kernels on zero-copy aliases (CpuKernel.h). Without a
// choice registered for PrivateUse1, ATen falls back to the unfused math path:
// slower, and numerically different from the CPU.
#include "aten/CpuKernel.h"
#include "aten/DiscardingWarnings.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>

namespace vdev {

namespace {

// Whether CUDA's memory-efficient kernel takes these dense inputs on an SM80 GPU (whose
// dtypes vdev's fused attention claims): CUDA's conditions, from sdp_utils.
bool cudas_efficient_kernel_takes(const sdp::sdp_params& params) {
  const at::ScalarType dtype = params.query.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) {
    return false;
  }
  if (!sdp::has_only_dense_inputs(params) || !sdp::check_runtime_disabled_mem_efficient(params, false) ||
      !sdp::check_tensor_shapes(params, false) || !sdp::check_nonzero_sequence_lengths_dense(params, false) ||
      !sdp::check_last_dim_stride_equals_1_dense<true>(params, false) ||
      !sdp::check_batch_size_and_num_heads_dense<false>(params, false)) {
    return false;
  }
  // The head dimensions in whole 16-byte rows, as its GEMMs need on SM80 tensor cores.
  const int64_t alignment = dtype == at::kFloat ? 4 : 8;
  const int64_t head_dim = params.query.size(-1);
  const int64_t value_dim = params.value.size(-1);
  return head_dim == params.key.size(-1) && head_dim > 0 && head_dim % alignment == 0 && value_dim > 0 &&
      value_dim % alignment == 0;
}

} // namespace

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
  auto cpus_choice = [&] {
    return at::_ops::_fused_sdp_choice::redispatch(
        c10::DispatchKeySet(c10::DispatchKey::CPU), query, key, value, attn_mask, dropout_p, is_causal, scale,
        enable_gqa);
  };
  const sdp::sdp_params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  if (at::globalContext().userEnabledMathSDP() || !cudas_efficient_kernel_takes(params)) {
    return cpus_choice();
  }
  // CUDA tries flash, then its memory-efficient kernel, then math: with math disabled,
  // inputs the CPU's flash kernel does not take (or flash disabled) go to vdev's
  // memory-efficient kernel (FusedAttention.cpp), where the CPU finds no backend.
  try {
    const DiscardingWarnings quiet;  // the CPU's reasons for refusing
    return cpus_choice();
  } catch (const c10::Error&) {
    return static_cast<int64_t>(at::SDPBackend::efficient_attention);
  }
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
