// The `vdev` operator namespace: operators of our own, as a vendor adds for what aten
// lacks, registered like aten ops so that they dispatch by device, work with autograd,
// fake tensors and TorchScript, and are reachable from Python (torch.ops.vdev.*) and
// C++ (torch_vdev/CustomOps.h).
//
// vdev::scaled_add has one CPU loop; the vdev kernel runs it on zero-copy CPU aliases
// of device memory; the Meta kernel only computes the result's shape and dtype, with
// symbolic sizes so that fake tensors under dynamic shapes work too. Its autograd
// formula is C++ (an autograd::Function for the Autograd key), so the op is
// differentiable for C++ programs that never load Python.
#include <torch_vdev/CustomOps.h>

#include "aten/Tensor.h"
#include "runtime/HostAccess.h"
#include "runtime/Stream.h"

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/real.h>
#include <ATen/ops/result_type.h>

namespace vdev {
namespace {

constexpr char kScaledAddName[] = "vdev::scaled_add";

c10::ScalarType scaled_add_result_type(const at::Tensor& self, const at::Tensor& other) {
  const c10::ScalarType result = at::result_type(self, other);
  TORCH_CHECK(
      c10::isFloatingType(result) || c10::isComplexType(result), kScaledAddName,
      " computes floating-point or complex results; got tensors of ", self.scalar_type(),
      " and ", other.scalar_type());
  return result;
}

// out = self + alpha * other on CPU tensors; `out` has the broadcast shape and
// result dtype, inputs of another dtype are converted by the iterator.
void scaled_add_into(
    const at::Tensor& out, const at::Tensor& self, const at::Tensor& other, double alpha) {
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(out)
                                .add_const_input(self)
                                .add_const_input(other)
                                .promote_inputs_to_common_dtype(true)
                                .build();
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(
      at::kHalf, at::kBFloat16, iter.common_dtype(), kScaledAddName, [&] {
        using opmath_t = at::opmath_type<scalar_t>;
        const auto scale = static_cast<opmath_t>(alpha);
        iter.for_each([scale](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
          // strides[0..2]: inner-dimension strides of out, self, other; [3..5]: outer.
          for (int64_t outer = 0; outer < size1; ++outer) {
            char* out_ptr = data[0] + outer * strides[3];
            const char* self_ptr = data[1] + outer * strides[4];
            const char* other_ptr = data[2] + outer * strides[5];
            for (int64_t i = 0; i < size0; ++i) {
              const auto x = static_cast<opmath_t>(
                  *reinterpret_cast<const scalar_t*>(self_ptr + i * strides[1]));
              const auto y = static_cast<opmath_t>(
                  *reinterpret_cast<const scalar_t*>(other_ptr + i * strides[2]));
              *reinterpret_cast<scalar_t*>(out_ptr + i * strides[0]) =
                  static_cast<scalar_t>(x + scale * y);
            }
          }
        });
      });
}

at::Tensor scaled_add_cpu(const at::Tensor& self, const at::Tensor& other, double alpha) {
  const c10::ScalarType dtype = scaled_add_result_type(self, other);
  at::Tensor out = at::empty(
      at::infer_size_dimvector(self.sizes(), other.sizes()), self.options().dtype(dtype));
  scaled_add_into(out, self, other, alpha);
  return out;
}

// Both tensors on one vdev device, or one of them a 0-dim CPU tensor (a wrapped
// scalar), as aten ops allow.
c10::Device scaled_add_device(const at::Tensor& self, const at::Tensor& other) {
  const at::Tensor& on_device = is_vdev(self) ? self : other;
  const at::Tensor& second = is_vdev(self) ? other : self;
  TORCH_CHECK(
      second.device() == on_device.device() || is_cpu_scalar(second),
      "Expected all tensors to be on the same device, but found at least two devices, ",
      on_device.device(), " and ", second.device(), "! (in ", kScaledAddName, ")");
  return on_device.device();
}

at::Tensor scaled_add_vdev(const at::Tensor& self, const at::Tensor& other, double alpha) {
  const c10::Device device = scaled_add_device(self, other);
  const c10::ScalarType dtype = scaled_add_result_type(self, other);
  at::Tensor out =
      empty_tensor(at::infer_size_dimvector(self.sizes(), other.sizes()), dtype, device.index());
  synchronize_for_host_op(device.index(), kScaledAddName);
  scaled_add_into(cpu_alias(out), as_cpu(self), as_cpu(other), alpha);
  return out;
}

at::Tensor scaled_add_meta(const at::Tensor& self, const at::Tensor& other, double alpha) {
  const c10::ScalarType dtype = scaled_add_result_type(self, other);
  const at::Tensor& on_meta = self.is_meta() ? self : other;  // the other may be a CPU scalar
  return at::empty_symint(
      at::infer_size_symdimvector(self.sym_sizes(), other.sym_sizes()),
      on_meta.options().dtype(dtype));
}

// The gradient of an input: summed over the dimensions the input was broadcast along,
// and, for a real input of a complex result, its real part (as aten's formulas do).
at::Tensor gradient_for_input(
    at::Tensor grad, const c10::IValue& sizes, const c10::IValue& is_complex) {
  if (grad.is_complex() && !is_complex.toBool()) {
    grad = at::real(grad);
  }
  return at::sum_to(std::move(grad), sizes.toSymIntVector());
}

// d(self + alpha * other) = d self + alpha * d other. The formula is made of
// differentiable aten ops, so double backward works.
class ScaledAddFunction : public torch::autograd::Function<ScaledAddFunction> {
 public:
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx, const at::Tensor& self, const at::Tensor& other,
      double alpha) {
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["self_sizes"] = self.sym_sizes();
    ctx->saved_data["other_sizes"] = other.sym_sizes();
    ctx->saved_data["self_is_complex"] = self.is_complex();
    ctx->saved_data["other_is_complex"] = other.is_complex();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return scaled_add(self, other, alpha);
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad_outputs) {
    const at::Tensor& grad = grad_outputs[0];
    auto& saved = ctx->saved_data;
    at::Tensor grad_self;
    at::Tensor grad_other;
    if (ctx->needs_input_grad(0)) {
      grad_self = gradient_for_input(grad, saved["self_sizes"], saved["self_is_complex"]);
    }
    if (ctx->needs_input_grad(1)) {
      grad_other = gradient_for_input(
          grad.mul(saved["alpha"].toDouble()), saved["other_sizes"], saved["other_is_complex"]);
    }
    return {grad_self, grad_other, at::Tensor()};
  }
};

at::Tensor scaled_add_autograd(const at::Tensor& self, const at::Tensor& other, double alpha) {
  return ScaledAddFunction::apply(self, other, alpha);
}

} // namespace

at::Tensor scaled_add(const at::Tensor& self, const at::Tensor& other, double alpha) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(kScaledAddName, "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(self, other, alpha);
}

// The one TORCH_LIBRARY block of the namespace; other files add operators to it with
// TORCH_LIBRARY_FRAGMENT(vdev, m).
TORCH_LIBRARY(vdev, m) {
  m.def("scaled_add(Tensor self, Tensor other, *, float alpha=1) -> Tensor");
}

TORCH_LIBRARY_IMPL(vdev, CPU, m) {
  m.impl("scaled_add", TORCH_FN(scaled_add_cpu));
}

TORCH_LIBRARY_IMPL(vdev, PrivateUse1, m) {
  m.impl("scaled_add", TORCH_FN(scaled_add_vdev));
}

TORCH_LIBRARY_IMPL(vdev, Meta, m) {
  m.impl("scaled_add", TORCH_FN(scaled_add_meta));
}

TORCH_LIBRARY_IMPL(vdev, Autograd, m) {
  m.impl("scaled_add", TORCH_FN(scaled_add_autograd));
}

} // namespace vdev
