// Convolution. ATen routes convolutions of backends it does not know to the
// *_overrideable ops; vdev serves them with ATen's CPU convolution on zero-copy
// CPU aliases (CpuKernel.h, CpuRedispatch.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_backward_overrideable_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/convolution_overrideable_ops.h>

namespace vdev {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  lazy_init();
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      at::_ops::convolution_backward_overrideable::name, at::_ops::convolution_backward_overrideable::overload_name);
  static const OperatorFacts& facts = operator_facts(op);
  torch::jit::Stack stack = c10::impl::boxArgs(
      grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask);
  if (launch_op(op, facts, &stack)) {
    return {std::move(stack[0]).toTensor(), std::move(stack[1]).toTensor(), std::move(stack[2]).toTensor()};
  }
  CpuRedispatch call(at::_ops::convolution_backward_overrideable::name);
  for (const at::Tensor* tensor : {&grad_output, &input, &weight}) {
    call.note_tensor(*tensor);
  }
  const c10::DeviceIndex device = call.device();
  at::Tensor cpu_grad_output = call.alias(grad_output);
  at::Tensor cpu_input = call.alias(input);
  at::Tensor cpu_weight = call.alias(weight);
  // The bias gradient has one entry per output channel.
  const c10::SymInt bias_size = grad_output.sym_size(1);
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  {
    CpuRedispatch::Scope scope(device, at::_ops::convolution_backward_overrideable::name);
    grads = at::_ops::convolution_backward::redispatch(
        c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_grad_output, cpu_input, cpu_weight,
        c10::SymIntArrayRef(&bias_size, 1), stride, padding, dilation, transposed,
        output_padding, std::move(groups), output_mask);
  }
  return {
      call.to_device(std::get<0>(grads)), call.to_device(std::get<1>(grads)),
      call.to_device(std::get<2>(grads))};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl(
      "convolution_overrideable",
      TORCH_FN((CpuKernel<at::_ops::convolution_overrideable, at::_ops::convolution>::call)));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

} // namespace vdev
