// Autograd overrides: for one op of each native kernel family, vdev's own
// AutogradPrivateUse1 kernel replaces PyTorch's generated derivative code. Each is a
// torch::autograd::Function whose forward runs the vdev kernel below autograd and
// whose backward is written with vdev ops, so it runs on the device (and is itself
// differentiable: double backward works). Forward-mode AD, which C++ Functions do not
// support, is handled here: the Function runs on the primals and the tangent comes
// from the op's JVP formula. Under functorch transforms (torch.func), which C++
// Functions cannot take part in either, PyTorch's generated autograd kernel runs. This is the template a hardware team follows to supply
// fused or device-specific backward kernels. VDEV_AUTOGRAD_OVERRIDES=0 turns them off.
#include <torch_vdev/Backend.h>

#include <ATen/TensorOperators.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/native_dropout.h>
#include <ATen/ops/native_dropout_backward.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/_softmax_backward_data.h>

#include <cstdlib>
#include <cstring>

namespace vdev {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward-mode AD level used by ATen's generated code (functorch nests levels
// through wrapper tensors, so kernels only ever see level 0).
constexpr uint64_t kForwardLevel = 0;

bool has_tangent(const at::Tensor& tensor) {
  return tensor.defined() && tensor._fw_grad(kForwardLevel).defined();
}

// The tangent of `tensor`, or zeros when it has none.
at::Tensor tangent_or_zeros(const at::Tensor& tensor) {
  const at::Tensor& tangent = tensor._fw_grad(kForwardLevel);
  return tangent.defined() ? tangent : at::zeros_like(tensor);
}

at::Tensor primal(const at::Tensor& tensor) {
  return has_tangent(tensor) ? tensor._fw_primal(kForwardLevel) : tensor;
}

// Functions take optional tensors as std::optional: they cannot record undefined inputs.
std::optional<at::Tensor> optional_primal(const at::Tensor& tensor) {
  return tensor.defined() ? std::optional<at::Tensor>(primal(tensor)) : std::nullopt;
}

bool carries_autograd(const at::Tensor& tensor) {
  return tensor.defined() &&
      (has_tangent(tensor) || (tensor.requires_grad() && at::GradMode::is_enabled()));
}

bool carries_autograd(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && carries_autograd(*tensor);
}

// A Function builds a node and saves its inputs even when it records nothing. With no
// input that requires grad (in grad mode) or carries a tangent, an op runs below
// autograd directly, as PyTorch's generated kernels do: the ops of evaluation, of the
// optimizer and of the backward itself pay nothing for autograd.
template <class... Tensors>
bool records_nothing(const Tensors&... inputs) {
  return !(carries_autograd(inputs) || ...);
}

// functorch includes its dynamic-layer keys in this thread's dispatch keys for as long
// as any transform is active.
bool functorch_active() {
  return c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
}

// Runs PyTorch's generated autograd kernel for Op (registered for every backend's
// autograd key, overridden for vdev's) with the caller's dispatch keys, so it
// redispatches to vdev's kernels below autograd.
template <class Op, class... Args>
auto generated_autograd(c10::DispatchKeySet keys, const Args&... args) {
  using Result = typename c10::guts::function_traits<typename Op::schema>::return_type;
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
  static const auto kernel = op.getComputedKernelForDispatchKey(c10::DispatchKey::AutogradCPU);
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (torch::jit::push(stack, args), ...);
  kernel.callBoxed(op, keys, &stack);
  return c10::impl::PopResult<Result>::call(stack);
}

// Runs the op below autograd (on the vdev kernel) from inside a Function's forward.
template <class Op>
auto below_autograd(Op&& op) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op();
}

// ---- linear algebra: mm
struct MmFunction : public torch::autograd::Function<MmFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, const at::Tensor& mat2) {
    ctx->save_for_backward({self, mat2});
    return below_autograd([&] { return at::mm(self, mat2); });
  }

  // As PyTorch's formulas, a column-major input gets a column-major gradient: a weight
  // used transposed (x @ w.t(), as by Linear on batched input) then gets a gradient laid
  // out as the weight, which AccumulateGrad takes without a copy, and the products are
  // the ones CPU computes.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& self = saved[0];
    const at::Tensor& mat2 = saved[1];
    const at::Tensor& grad = grads[0];
    at::Tensor self_grad;
    at::Tensor mat2_grad;
    if (ctx->needs_input_grad(0)) {
      self_grad = is_column_major(self) ? mat2.conj().mm(grad.t()).t() : grad.mm(mat2.t().conj());
    }
    if (ctx->needs_input_grad(1)) {
      mat2_grad = is_column_major(mat2) ? grad.t().mm(self.conj()).t() : self.t().conj().mm(grad);
    }
    return {self_grad, mat2_grad};
  }

 private:
  static bool is_column_major(const at::Tensor& matrix) {
    return matrix.stride(0) == 1 && matrix.stride(1) == matrix.size(0);
  }
};

at::Tensor mm(c10::DispatchKeySet keys, const at::Tensor& self, const at::Tensor& mat2) {
  // Sparse operands take PyTorch's formulas, which know their layouts.
  if (functorch_active() || self.layout() != c10::kStrided || mat2.layout() != c10::kStrided) {
    return generated_autograd<at::_ops::mm>(keys, self, mat2);
  }
  if (records_nothing(self, mat2)) {
    return below_autograd([&] { return at::mm(self, mat2); });
  }
  if (!has_tangent(self) && !has_tangent(mat2)) {
    return MmFunction::apply(self, mat2);
  }
  at::Tensor result = MmFunction::apply(primal(self), primal(mat2));
  result._set_fw_grad(
      tangent_or_zeros(self).mm(primal(mat2)) + primal(self).mm(tangent_or_zeros(mat2)),
      kForwardLevel, /*is_inplace_op=*/false);
  return result;
}

// ---- pointwise: gelu
struct GeluFunction : public torch::autograd::Function<GeluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, c10::string_view approximate) {
    ctx->save_for_backward({self});
    ctx->saved_data["approximate"] = std::string(approximate);
    return below_autograd([&] { return at::gelu(self, approximate); });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor self = ctx->get_saved_variables()[0];
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    return {at::gelu_backward(grads[0], self, approximate), at::Tensor()};
  }
};

at::Tensor gelu(c10::DispatchKeySet keys, const at::Tensor& self, c10::string_view approximate) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::gelu>(keys, self, std::string(approximate));
  }
  if (records_nothing(self)) {
    return below_autograd([&] { return at::gelu(self, approximate); });
  }
  if (!has_tangent(self)) {
    return GeluFunction::apply(self, approximate);
  }
  at::Tensor result = GeluFunction::apply(primal(self), approximate);
  result._set_fw_grad(
      at::gelu_backward(tangent_or_zeros(self), primal(self), approximate), kForwardLevel, false);
  return result;
}

// ---- reductions: sum over dimensions
struct SumFunction : public torch::autograd::Function<SumFunction> {
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
      std::optional<at::ScalarType> dtype) {
    ctx->saved_data["sizes"] = self.sizes();
    ctx->saved_data["dims"] = dims.has_value() ? c10::IValue(dims->vec()) : c10::IValue();
    ctx->saved_data["keepdim"] = keepdim;
    ctx->saved_data["dtype"] = self.scalar_type();
    return below_autograd([&] { return at::sum(self, dims, keepdim, dtype); });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const c10::IValue dims_value = ctx->saved_data["dims"];
    const auto dims = dims_value.isNone() ? std::vector<int64_t>() : dims_value.toIntVector();
    at::Tensor grad = grads[0];
    // Put back the summed dimensions, so the gradient broadcasts over them (a 0-dim
    // input, which dim 0 or -1 also names, has none).
    if (!ctx->saved_data["keepdim"].toBool() && !sizes.empty()) {
      std::vector<bool> reduced(sizes.size(), dims.empty());
      for (int64_t dim : dims) {
        reduced[c10::maybe_wrap_dim(dim, static_cast<int64_t>(sizes.size()))] = true;
      }
      for (size_t dim = 0; dim < sizes.size(); ++dim) {
        if (reduced[dim]) {
          grad = grad.unsqueeze(static_cast<int64_t>(dim));
        }
      }
    }
    return {grad.expand(sizes).to(ctx->saved_data["dtype"].toScalarType()), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor sum(
    c10::DispatchKeySet keys, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
    std::optional<at::ScalarType> dtype) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::sum_dim_IntList>(keys, self, dims, keepdim, dtype);
  }
  if (records_nothing(self)) {
    return below_autograd([&] { return at::sum(self, dims, keepdim, dtype); });
  }
  if (!has_tangent(self)) {
    return SumFunction::apply(self, dims, keepdim, dtype);
  }
  at::Tensor result = SumFunction::apply(primal(self), dims, keepdim, dtype);
  result._set_fw_grad(at::sum(tangent_or_zeros(self), dims, keepdim, dtype), kForwardLevel, false);
  return result;
}

// ---- indexing: index_select
struct IndexSelectFunction : public torch::autograd::Function<IndexSelectFunction> {
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
    ctx->save_for_backward({index});
    ctx->saved_data["sizes"] = self.sizes();
    ctx->saved_data["dim"] = dim;
    return below_autograd([&] { return at::index_select(self, dim, index); });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor index = ctx->get_saved_variables()[0];
    const at::Tensor& grad = grads[0];
    at::Tensor grad_self = at::zeros(ctx->saved_data["sizes"].toIntVector(), grad.options());
    return {grad_self.index_add(ctx->saved_data["dim"].toInt(), index, grad), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor index_select(c10::DispatchKeySet keys, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::index_select>(keys, self, dim, index);
  }
  if (records_nothing(self)) {
    return below_autograd([&] { return at::index_select(self, dim, index); });
  }
  if (!has_tangent(self)) {
    return IndexSelectFunction::apply(self, dim, index);
  }
  at::Tensor result = IndexSelectFunction::apply(primal(self), dim, index);
  result._set_fw_grad(at::index_select(tangent_or_zeros(self), dim, index), kForwardLevel, false);
  return result;
}

// ---- softmax
struct SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, int64_t dim, bool half_to_float) {
    at::Tensor result = below_autograd([&] { return at::_softmax(self, dim, half_to_float); });
    ctx->save_for_backward({result});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["dtype"] = self.scalar_type();
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor result = ctx->get_saved_variables()[0];
    return {at::_softmax_backward_data(
                grads[0], result, ctx->saved_data["dim"].toInt(),
                ctx->saved_data["dtype"].toScalarType()),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor softmax(c10::DispatchKeySet keys, const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::_softmax>(keys, self, dim, half_to_float);
  }
  if (records_nothing(self)) {
    return below_autograd([&] { return at::_softmax(self, dim, half_to_float); });
  }
  if (!has_tangent(self)) {
    return SoftmaxFunction::apply(self, dim, half_to_float);
  }
  at::Tensor result = SoftmaxFunction::apply(primal(self), dim, half_to_float);
  const at::Tensor tangent = tangent_or_zeros(self);
  const at::Tensor value = primal(result);
  result._set_fw_grad(
      value * (tangent - (tangent * value).sum(dim, /*keepdim=*/true)), kForwardLevel, false);
  return result;
}

// ---- normalization: layer norm
struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static variable_list forward(
      AutogradContext* ctx, const at::Tensor& input, c10::IntArrayRef normalized_shape,
      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
    auto [output, mean, rstd] = below_autograd([&] {
      return at::native_layer_norm(input, normalized_shape, weight, bias, eps);
    });
    ctx->save_for_backward(
        {input, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()), mean, rstd});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    ctx->mark_non_differentiable({mean, rstd});
    return {output, mean, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    // needs_input_grad counts tensor inputs only: absent weight or bias have no slot.
    const bool has_weight = saved[1].defined();
    const bool has_bias = saved[2].defined();
    const std::array<bool, 3> mask = {
        ctx->needs_input_grad(0), has_weight && ctx->needs_input_grad(1),
        has_bias && ctx->needs_input_grad(has_weight ? 2 : 1)};
    auto [grad_input, grad_weight, grad_bias] = at::native_layer_norm_backward(
        grads[0], saved[0], ctx->saved_data["normalized_shape"].toIntVector(), saved[3],
        saved[4], saved[1], saved[2], mask);
    return {grad_input, at::Tensor(), grad_weight, grad_bias, at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    c10::DispatchKeySet keys, const at::Tensor& input, c10::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    double eps) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::native_layer_norm>(
        keys, input, normalized_shape, weight_opt, bias_opt, eps);
  }
  if (records_nothing(input, weight_opt, bias_opt)) {
    return below_autograd(
        [&] { return at::native_layer_norm(input, normalized_shape, weight_opt, bias_opt, eps); });
  }
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const bool forward_ad = has_tangent(input) || has_tangent(weight) || has_tangent(bias);
  auto outputs = LayerNormFunction::apply(
      primal(input), normalized_shape, optional_primal(weight), optional_primal(bias), eps);
  if (forward_ad) {
    // y = x̂ * w + b with x̂ = (x - mean) * rstd over the normalized dimensions:
    // dy = rstd * (dx - mean(dx) - x̂ * mean(dx * x̂)) * w + x̂ * dw + db.
    std::vector<int64_t> dims;
    for (int64_t dim = input.dim() - static_cast<int64_t>(normalized_shape.size());
         dim < input.dim(); ++dim) {
      dims.push_back(dim);
    }
    const at::Tensor x = primal(input);
    const at::Tensor rstd = outputs[2];
    const at::Tensor normalized = (x - outputs[1]) * rstd;
    const at::Tensor dx = tangent_or_zeros(input);
    at::Tensor tangent = rstd *
        (dx - dx.mean(dims, true) - normalized * (dx * normalized).mean(dims, true));
    if (weight.defined()) {
      tangent = tangent * primal(weight) + normalized * tangent_or_zeros(weight);
    }
    if (bias.defined()) {
      tangent = tangent + tangent_or_zeros(bias);
    }
    outputs[0]._set_fw_grad(tangent, kForwardLevel, false);
  }
  return {outputs[0], outputs[1], outputs[2]};
}

// ---- random: dropout
struct DropoutFunction : public torch::autograd::Function<DropoutFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, double p, std::optional<bool> train) {
    auto [output, mask] = below_autograd([&] { return at::native_dropout(input, p, train); });
    ctx->save_for_backward({mask});
    ctx->saved_data["scale"] = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
    ctx->mark_non_differentiable({mask});
    return {output, mask};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor mask = ctx->get_saved_variables()[0];
    return {at::native_dropout_backward(grads[0], mask, ctx->saved_data["scale"].toDouble()),
            at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> native_dropout(c10::DispatchKeySet keys, const at::Tensor& input, double p, std::optional<bool> train) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::native_dropout>(keys, input, p, train);
  }
  if (records_nothing(input)) {
    return below_autograd([&] { return at::native_dropout(input, p, train); });
  }
  auto outputs = DropoutFunction::apply(primal(input), p, train);
  if (has_tangent(input)) {
    const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
    outputs[0]._set_fw_grad(
        at::native_dropout_backward(tangent_or_zeros(input), outputs[1], scale), kForwardLevel, false);
  }
  return {outputs[0], outputs[1]};
}

// ---- convolution
struct ConvolutionFunction : public torch::autograd::Function<ConvolutionFunction> {
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
      const std::optional<at::Tensor>& bias, c10::IntArrayRef stride, c10::IntArrayRef padding,
      c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["output_padding"] = output_padding;
    ctx->saved_data["groups"] = groups;
    return below_autograd([&] {
      return at::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
    });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::vector<int64_t> bias_sizes = {grads[0].size(1)};
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
        grads[0], saved[0], saved[1],
        has_bias ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(),
        ctx->saved_data["stride"].toIntVector(), ctx->saved_data["padding"].toIntVector(),
        ctx->saved_data["dilation"].toIntVector(), ctx->saved_data["transposed"].toBool(),
        ctx->saved_data["output_padding"].toIntVector(), ctx->saved_data["groups"].toInt(),
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1), has_bias && ctx->needs_input_grad(2)});
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor convolution(
    c10::DispatchKeySet keys, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt, c10::IntArrayRef stride, c10::IntArrayRef padding,
    c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::convolution>(
        keys, input, weight, bias_opt, stride, padding, dilation, transposed, output_padding,
        groups);
  }
  if (records_nothing(input, weight, bias_opt)) {
    return below_autograd([&] {
      return at::convolution(
          input, weight, bias_opt, stride, padding, dilation, transposed, output_padding, groups);
    });
  }
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  at::Tensor result = ConvolutionFunction::apply(
      primal(input), primal(weight), optional_primal(bias), stride, padding, dilation, transposed,
      output_padding, groups);
  if (has_tangent(input) || has_tangent(weight) || has_tangent(bias)) {
    // Convolution is linear in each of input, weight and bias.
    auto convolve = [&](const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
      return at::convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups);
    };
    at::Tensor tangent = convolve(tangent_or_zeros(input), primal(weight), std::nullopt) +
        convolve(primal(input), tangent_or_zeros(weight), std::nullopt);
    if (bias.defined()) {
      std::vector<int64_t> bias_shape(static_cast<size_t>(tangent.dim()), 1);
      bias_shape[1] = -1;
      tangent = tangent + tangent_or_zeros(bias).view(bias_shape);
    }
    result._set_fw_grad(tangent, kForwardLevel, false);
  }
  return result;
}

// ---- pooling: max pool 2d
struct MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
  static variable_list forward(
      AutogradContext* ctx, const at::Tensor& input, c10::IntArrayRef kernel_size,
      c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
    auto [output, indices] = below_autograd([&] {
      return at::max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode);
    });
    ctx->save_for_backward({input, indices});
    ctx->saved_data["kernel_size"] = kernel_size;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["ceil_mode"] = ceil_mode;
    ctx->mark_non_differentiable({indices});
    return {output, indices};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {at::max_pool2d_with_indices_backward(
                grads[0], saved[0], ctx->saved_data["kernel_size"].toIntVector(),
                ctx->saved_data["stride"].toIntVector(), ctx->saved_data["padding"].toIntVector(),
                ctx->saved_data["dilation"].toIntVector(), ctx->saved_data["ceil_mode"].toBool(),
                saved[1]),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(
    c10::DispatchKeySet keys, const at::Tensor& input, c10::IntArrayRef kernel_size,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  if (functorch_active()) {
    return generated_autograd<at::_ops::max_pool2d_with_indices>(
        keys, input, kernel_size, stride, padding, dilation, ceil_mode);
  }
  if (records_nothing(input)) {
    return below_autograd([&] {
      return at::max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode);
    });
  }
  auto outputs = MaxPoolFunction::apply(primal(input), kernel_size, stride, padding, dilation, ceil_mode);
  if (has_tangent(input)) {
    // Each output takes the tangent of the input element it selected.
    const at::Tensor& indices = outputs[1];
    at::Tensor tangent = tangent_or_zeros(input).flatten(-2).gather(-1, indices.flatten(-2));
    outputs[0]._set_fw_grad(tangent.view_as(indices), kForwardLevel, false);
  }
  return {outputs[0], outputs[1]};
}

bool overrides_enabled() {
  const char* setting = std::getenv("VDEV_AUTOGRAD_OVERRIDES");
  return setting == nullptr || std::strcmp(setting, "0") != 0;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  if (!overrides_enabled()) {
    return;
  }
  m.impl("mm", TORCH_FN(mm));
  m.impl("gelu", TORCH_FN(gelu));
  m.impl("sum.dim_IntList", TORCH_FN(sum));
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("convolution", TORCH_FN(convolution));
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
}

} // namespace vdev
