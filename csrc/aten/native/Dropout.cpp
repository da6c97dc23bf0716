// Native vdev kernels for dropout. ATen's CPU native_dropout multiplies its input by
// a bool mask, which TensorIterator first copies to the input's dtype, then scales in
// a second pass (the backward does the same). CPU tensors take another path (dropout
// is only "fused" for accelerators), so on vdev those extra passes showed in training
// steps. Here the mask is drawn as ATen's CPU kernel draws it (bernoulli_ on a bool
// tensor, from the CPU generator) and, for contiguous float and double tensors, applied
// and scaled in one pass with the same arithmetic per element: (x * mask) * scale,
// rounded in the input's dtype after each multiplication.
#include "aten/CpuKernel.h"
#include "aten/native/Random.h"
#include "runtime/Generator.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>

namespace vdev {
namespace {

bool fused_applies(const at::Tensor& values) {
  const c10::ScalarType dtype = values.scalar_type();
  return (dtype == c10::kFloat || dtype == c10::kDouble) && values.numel() > 0 &&
      values.is_contiguous() && !values.is_neg();
}

bool fused_applies(const at::Tensor& values, const at::Tensor& mask) {
  return fused_applies(values) && mask.device() == values.device() && mask.is_contiguous() &&
      mask.scalar_type() == c10::kBool && mask.sizes() == values.sizes();
}

// result = (values * mask) * scale, element by element in the values' dtype, split
// across threads as TensorIterator splits elementwise ops. On CPU aliases, in a kernel.
void apply_mask_and_scale(const at::Tensor& values, const at::Tensor& mask, const at::Tensor& result, double scale) {
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "vdev_masked_scale", [&] {
    const scalar_t* in = values.const_data_ptr<scalar_t>();
    // The mask's bools read as bytes (0 or 1): GCC vectorizes no loop that loads bool.
    const auto* keep = reinterpret_cast<const uint8_t*>(mask.const_data_ptr<bool>());
    scalar_t* out = result.mutable_data_ptr<scalar_t>();
    const auto factor = static_cast<scalar_t>(scale);
    at::parallel_for(0, values.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const scalar_t kept = in[i] * static_cast<scalar_t>(keep[i]);
        out[i] = kept * factor;
      }
    });
  });
}

// apply_mask_and_scale, launched on the stream.
at::Tensor masked_scale(const at::Tensor& values, const at::Tensor& mask, double scale) {
  at::Tensor result = at::empty_like(values, c10::MemoryFormat::Contiguous);
  const c10::DeviceIndex device = values.device().index();
  LaunchAliases aliases;
  launch(
      current_stream(device), "vdev::masked_scale",
      [values = aliases.alias(values), mask = aliases.alias(mask), result = aliases.alias(result), scale,
       device]() {
        profiler::ActivityScope activity(profiler::ActivityKind::kKernel, "vdev::masked_scale", device);
        apply_mask_and_scale(values, mask, result, scale);
      });
  return result;
}

// Launched: the mask is drawn when the kernel runs, from the vdev generator's CPU state,
// as ATen's CPU kernel draws it (bernoulli_ on a bool tensor); the output is then
// (input * mask) * scale, fused for contiguous float and double inputs, else as the CPU
// kernel computes it. Evaluation (train=False) and empty inputs run ATen's CPU kernel.
std::tuple<at::Tensor, at::Tensor> native_dropout(
    const at::Tensor& input, double p, std::optional<bool> train) {
  lazy_init();
  const bool training = !train.has_value() || *train;
  if (!training || input.numel() == 0 || input.layout() != c10::kStrided || input.is_nested()) {
    return CpuKernel<at::_ops::native_dropout>::call(input, p, train);
  }
  c10::DeviceIndex device = -1;
  {
    CpuRedispatch checks(at::_ops::native_dropout::name);
    checks.note_tensor(input);
    device = checks.device();
  }
  const double keep_probability = 1. - p;
  const double scale = keep_probability == 0 ? 0. : 1. / keep_probability;
  // CUDA's kernel (and so this one) drops floating-point values only; ATen's CPU kernel
  // would also take complex ones.
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, input.scalar_type(), "native_dropout", [] {});
  // The CPU kernel's check of p's range in bernoulli_, at the call, on a one-element mask.
  {
    at::Tensor stand_in_mask = at::empty({1}, input.options().device(c10::kCPU).dtype(c10::kBool));
    stand_in_mask.bernoulli_(keep_probability, scratch_generator());
  }
  const bool fused = fused_applies(input);
  // In the input's memory format, as the CPU kernel makes them.
  at::Tensor mask = at::empty_like(input, input.options().dtype(c10::kBool));
  at::Tensor output = at::empty_like(input);
  LaunchAliases aliases;
  launch(
      current_stream(device), at::_ops::native_dropout::name,
      [input = aliases.alias(input), mask = aliases.alias(mask), output = aliases.alias(output),
       cpu_generator = cpu_generator_for_launch(std::nullopt, device), keep_probability, scale, fused, device]() {
        profiler::ActivityScope activity(profiler::ActivityKind::kKernel, at::_ops::native_dropout::name, device);
        at::Tensor drawn = mask;
        drawn.bernoulli_(keep_probability, cpu_generator);
        if (fused) {
          apply_mask_and_scale(input, mask, output, scale);
        } else {
          at::Tensor written = output;
          at::mul_out(written, input, mask).mul_(scale);
        }
      });
  return {output, mask};
}

at::Tensor native_dropout_backward(
    const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  if (!fused_applies(grad_output, mask)) {
    return CpuKernel<at::_ops::native_dropout_backward>::call(grad_output, mask, scale);
  }
  return masked_scale(grad_output, mask, scale);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}

} // namespace vdev
