// The kernels torch.optim's foreach and fused implementations call (and the other
// foreach users: clip_grad_norm_/clip_grad_value_, zero_grad, swa_utils), each one
// dispatch onto ATen's CPU kernel over aliases of all the tensors at once, instead
// of ATen's per-tensor composite kernels or the boxed fallback.
#include "aten/CpuKernel.h"

#include <type_traits>

#include <ATen/ops/_foreach_abs_ops.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_clamp_max_ops.h>
#include <ATen/ops/_foreach_clamp_min_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_neg_ops.h>
#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/_foreach_pow_ops.h>
#include <ATen/ops/_foreach_reciprocal_ops.h>
#include <ATen/ops/_foreach_sign_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>
#include <ATen/ops/_fused_adagrad_ops.h>
#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <ATen/ops/_fused_sgd_ops.h>

namespace vdev {
namespace {

// Like copy_, a foreach copy may read from another device or the host, so each pair
// goes through vdev's copy rather than a single CPU kernel for one device.
void foreach_copy(at::TensorList self, at::TensorList src, bool non_blocking) {
  TORCH_CHECK(
      self.size() == src.size(), "_foreach_copy_: expected the same number of tensors, got ",
      self.size(), " and ", src.size());
  for (size_t i = 0; i < self.size(); ++i) {
    const_cast<at::Tensor&>(self[i]).copy_(src[i], non_blocking);
  }
}

// Whether a foreach op returning new tensors takes CUDA's fast route: every list as long
// as the first, its tensors of the first list's sizes and strides (dense, not
// overlapping), all of one real floating dtype, and no complex scalar. Each result then
// has its first-list tensor's sizes, strides and dtype, so the host allocates it.
class FastRoute {
 public:
  explicit FastRoute(at::TensorList shapes) : shapes_(shapes) {
    taken_ = !shapes.empty();
    if (taken_) {
      dtype_ = shapes[0].scalar_type();
      taken_ = dtype_ == c10::kFloat || dtype_ == c10::kDouble || dtype_ == c10::kHalf || dtype_ == c10::kBFloat16;
    }
  }

  void check(at::TensorList tensors) {
    taken_ = taken_ && tensors.size() == shapes_.size();
    for (size_t i = 0; taken_ && i < tensors.size(); ++i) {
      const at::Tensor& tensor = tensors[i];
      taken_ = tensor.defined() && is_vdev(tensor) && tensor.layout() == c10::kStrided &&
          tensor.scalar_type() == dtype_ && tensor.sizes() == shapes_[i].sizes() &&
          tensor.strides() == shapes_[i].strides() && tensor.is_non_overlapping_and_dense();
    }
  }
  // The one tensor of _foreach_add.Tensor and the like: a 0-dim device tensor.
  void check(const at::Tensor& tensor) {
    taken_ = taken_ && is_vdev(tensor) && tensor.dim() == 0 && !tensor.is_complex();
  }
  void check(const at::Scalar& scalar) {
    taken_ = taken_ && !scalar.isComplex();
  }
  void check(at::ArrayRef<at::Scalar> scalars) {
    taken_ = taken_ && scalars.size() == shapes_.size();
    for (const at::Scalar& scalar : scalars) {
      check(scalar);
    }
  }
  template <class T>
  void check(const T& /*other*/) {}

  bool taken() const {
    return taken_;
  }

 private:
  at::TensorList shapes_;
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  bool taken_ = false;
};

// The first tensor list among the arguments.
template <class First, class... Rest>
at::TensorList first_list(const First& first, const Rest&... rest) {
  if constexpr (std::is_convertible_v<First, at::TensorList> && !std::is_convertible_v<First, at::Tensor>) {
    return first;
  } else {
    return first_list(rest...);
  }
}

// The kernel of a foreach op returning new tensors: on CUDA's fast route, launched on
// the stream with outputs from the caching allocator (capturable); else CUDA's slow
// route, ATen's per-tensor loop (the op's CPU kernel is that device-generic loop), whose
// per-tensor vdev ops launch on their own. The queued kernel runs the CPU kernel and
// copies its results into the outputs.
template <class Op, class Schema = typename Op::schema>
struct LaunchedForeach;

template <class Op, class... Args>
struct LaunchedForeach<Op, std::vector<at::Tensor>(Args...)> {
  static std::vector<at::Tensor> call(Args... args) {
    lazy_init();
    const at::TensorList shapes = first_list(args...);
    FastRoute route(shapes);
    (route.check(args), ...);
    if (!route.taken()) {
      return Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), args...);
    }
    c10::DeviceIndex device = -1;
    {
      CpuRedispatch checks(Op::name);
      (cpu_kernel::note(checks, args), ...);
      device = checks.device();
    }
    std::vector<at::Tensor> outputs;
    outputs.reserve(shapes.size());
    for (const at::Tensor& shape : shapes) {
      outputs.push_back(empty_strided_tensor(shape.sizes(), shape.strides(), shape.scalar_type(), device));
    }
    launch(
        current_stream(device), Op::name,
        [kept = std::make_tuple(cpu_kernel::Kept<Args>::keep(args)...),
         written = cpu_kernel::Kept<at::TensorList>::keep(outputs), device]() {
          profiler::ActivityScope activity(profiler::ActivityKind::kKernel, Op::name, device);
          const std::vector<at::Tensor> results = std::apply(
              [](const auto&... argument) {
                return Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), argument...);
              },
              kept);
          for (size_t i = 0; i < results.size(); ++i) {
            written[i].copy_(results[i]);
          }
        });
    return outputs;
  }
};

template <class... Ops>
void register_launched_foreach(torch::Library& library) {
  (cpu_kernel::register_kernel(library, Ops::name, Ops::overload_name, TORCH_FN(LaunchedForeach<Ops>::call)), ...);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_foreach_copy_", TORCH_FN(foreach_copy));
  // Not _foreach_addcmul_/_foreach_addcdiv_.Tensor: their `scalars` is a 1-D CPU
  // tensor, which ATen's composite kernels read on the host as CUDA's do.
  register_launched_foreach<
      at::_ops::_foreach_add_Scalar,
      at::_ops::_foreach_add_List,
      at::_ops::_foreach_add_ScalarList,
      at::_ops::_foreach_add_Tensor,
      at::_ops::_foreach_sub_Scalar,
      at::_ops::_foreach_sub_List,
      at::_ops::_foreach_sub_ScalarList,
      at::_ops::_foreach_mul_Scalar,
      at::_ops::_foreach_mul_List,
      at::_ops::_foreach_mul_ScalarList,
      at::_ops::_foreach_mul_Tensor,
      at::_ops::_foreach_div_Scalar,
      at::_ops::_foreach_div_List,
      at::_ops::_foreach_div_ScalarList,
      at::_ops::_foreach_div_Tensor,
      at::_ops::_foreach_addcmul_Scalar,
      at::_ops::_foreach_addcmul_ScalarList,
      at::_ops::_foreach_addcdiv_Scalar,
      at::_ops::_foreach_addcdiv_ScalarList,
      at::_ops::_foreach_lerp_Scalar,
      at::_ops::_foreach_lerp_List,
      at::_ops::_foreach_lerp_ScalarList,
      at::_ops::_foreach_maximum_Scalar,
      at::_ops::_foreach_maximum_List,
      at::_ops::_foreach_maximum_ScalarList,
      at::_ops::_foreach_clamp_min_Scalar,
      at::_ops::_foreach_clamp_min_List,
      at::_ops::_foreach_clamp_min_ScalarList,
      at::_ops::_foreach_clamp_max_Scalar,
      at::_ops::_foreach_clamp_max_List,
      at::_ops::_foreach_clamp_max_ScalarList,
      at::_ops::_foreach_pow_Scalar,
      at::_ops::_foreach_pow_List,
      at::_ops::_foreach_pow_ScalarList,
      at::_ops::_foreach_pow_ScalarAndTensor,
      at::_ops::_foreach_abs,
      at::_ops::_foreach_neg,
      at::_ops::_foreach_sign,
      at::_ops::_foreach_sqrt,
      at::_ops::_foreach_reciprocal>(m);
  // A 0-dim result per tensor: on the calling thread.
  register_cpu_kernels<at::_ops::_foreach_norm_Scalar>(m);
  // Ops that write only their arguments are queued on the stream.
  register_queued_cpu_kernels<
      at::_ops::_foreach_add__Scalar,
      at::_ops::_foreach_add__List,
      at::_ops::_foreach_add__ScalarList,
      at::_ops::_foreach_add__Tensor,
      at::_ops::_foreach_sub__Scalar,
      at::_ops::_foreach_sub__List,
      at::_ops::_foreach_sub__ScalarList,
      at::_ops::_foreach_mul__Scalar,
      at::_ops::_foreach_mul__List,
      at::_ops::_foreach_mul__ScalarList,
      at::_ops::_foreach_mul__Tensor,
      at::_ops::_foreach_div__Scalar,
      at::_ops::_foreach_div__List,
      at::_ops::_foreach_div__ScalarList,
      at::_ops::_foreach_div__Tensor,
      at::_ops::_foreach_addcmul__Scalar,
      at::_ops::_foreach_addcmul__ScalarList,
      at::_ops::_foreach_addcdiv__Scalar,
      at::_ops::_foreach_addcdiv__ScalarList,
      at::_ops::_foreach_lerp__Scalar,
      at::_ops::_foreach_lerp__List,
      at::_ops::_foreach_lerp__ScalarList,
      at::_ops::_foreach_maximum__Scalar,
      at::_ops::_foreach_maximum__List,
      at::_ops::_foreach_maximum__ScalarList,
      at::_ops::_foreach_clamp_min__Scalar,
      at::_ops::_foreach_clamp_min__List,
      at::_ops::_foreach_clamp_min__ScalarList,
      at::_ops::_foreach_clamp_max__Scalar,
      at::_ops::_foreach_clamp_max__List,
      at::_ops::_foreach_clamp_max__ScalarList,
      at::_ops::_foreach_pow__Scalar,
      at::_ops::_foreach_pow__List,
      at::_ops::_foreach_pow__ScalarList,
      at::_ops::_foreach_abs_,
      at::_ops::_foreach_neg_,
      at::_ops::_foreach_sign_,
      at::_ops::_foreach_sqrt_,
      at::_ops::_foreach_reciprocal_,
      at::_ops::_foreach_zero_,
      at::_ops::_fused_adam_,
      at::_ops::_fused_adam__tensor_lr,
      at::_ops::_fused_adamw_,
      at::_ops::_fused_adamw__tensor_lr,
      at::_ops::_fused_sgd_,
      at::_ops::_fused_sgd__tensor_lr,
      at::_ops::_fused_adagrad_,
      at::_ops::_fused_adagrad__tensor_lr>(m);
}

} // namespace vdev
