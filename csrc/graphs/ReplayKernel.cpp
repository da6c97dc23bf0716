#include "graphs/ReplayKernel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addcdiv_native.h>
#include <ATen/ops/addcmul_native.h>
#include <ATen/ops/clamp_max_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/gelu_backward_native.h>
#include <ATen/ops/gelu_native.h>
#include <ATen/ops/lerp_native.h>
#include <ATen/ops/maximum_native.h>
#include <ATen/ops/minimum_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_backward_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/silu_backward_native.h>
#include <ATen/ops/silu_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/tanh_backward_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>

#include <memory>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace vdev {
namespace {

// A structured op's class (at::native::structured_X) writing `output`, as ATen's
// generated CPU wrappers do, except that the output is never resized or proxied: the
// host sized it from the op's meta function at the launch.
template <class Native>
class WithOutput final : public Native {
 public:
  explicit WithOutput(at::Tensor output) : output_(std::move(output)) {}

  const at::Tensor& maybe_get_output(int64_t /*output_idx*/) override {
    return output_;
  }

  void set_output_raw_strided(
      int64_t output_idx, c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::TensorOptions options) override {
    TORCH_CHECK(output_.sizes() == sizes, "the launched output does not have the size the op computes");
    Native::set_output_raw_strided(output_idx, sizes, strides, options);
  }

  const at::Tensor& output() const {
    return output_;
  }

  // Whether the iterator's inputs are the op's own: on CPU it casts an input of another
  // dtype to the common one when it is built, a copy later replays would not update;
  // a Python number's (the kernel's own CPU tensor) never changes.
  bool reads_its_inputs() const {
    for (int i = this->noutputs(); i < this->ntensors(); ++i) {
      const at::TensorBase& original = this->operands_[i].original_tensor_base();
      if (original.defined() && !original.unsafeGetTensorImpl()->is_wrapped_number()) {
        return false;
      }
    }
    return true;
  }

  // Whether the op's CPU loop may change the iterator: ATen's CPU loops drop a scalar
  // operand (reduced floating types) and, having written an output through a
  // temporary of the common dtype, copy it out and put the original output back.
  bool changed_by_loop() const {
    for (int i = 0; i < this->ntensors(); ++i) {
      if (this->operands_[i].original_tensor_base().defined() || (i >= this->noutputs() && this->is_scalar(i))) {
        return true;
      }
    }
    return false;
  }

 private:
  at::Tensor output_;
};

template <class Method>
struct Parameters;
template <class Class, class... Args>
struct Parameters<void (Class::*)(Args...)> {
  static constexpr size_t count = sizeof...(Args);
};

// A meta/impl argument as the prepared kernel holds it, taken from the kernel's stack.
template <class Arg>
struct Held {
  using type = std::decay_t<Arg>;
  static type from(const c10::IValue& value) {
    return value.to<type>();
  }
};
// A view of the string in the kernel's own stack (which outlives the prepared kernel).
template <>
struct Held<c10::string_view> {
  using type = c10::string_view;
  static type from(const c10::IValue& value) {
    return value.toStringView();
  }
};

template <class Native, class Meta = decltype(&Native::meta)>
class PreparedStructured;

// A structured TensorIterator op with one output, its iterator built once; a run
// whose CPU loop may change the iterator works on a copy of it.
template <class Native, class Class, class... Args>
class PreparedStructured<Native, void (Class::*)(Args...)> final : public PreparedKernel {
 public:
  static_assert(Parameters<decltype(&Native::impl)>::count == sizeof...(Args) + 1, "one output");

  PreparedStructured(const std::vector<c10::IValue>& stack, const at::Tensor& output)
      : arguments_(held(stack, std::index_sequence_for<Args...>())), op_(output) {
    std::apply([this](const auto&... argument) { op_.meta(argument...); }, arguments_);
    TORCH_CHECK(op_.reads_its_inputs(), "an input is cast when the iterator is built");
    copied_per_run_ = op_.changed_by_loop();
  }

  void run() const override {
    if (copied_per_run_) {
      WithOutput<Native> op = op_;
      impl(op);
    } else {
      // Runs of other replays may use it at the same time: the loop only reads it.
      impl(const_cast<WithOutput<Native>&>(op_));
    }
  }

  static std::unique_ptr<PreparedKernel> make(const std::vector<c10::IValue>& stack, const at::Tensor& output) {
    TORCH_INTERNAL_ASSERT(stack.size() >= sizeof...(Args));
    return std::make_unique<PreparedStructured>(stack, output);
  }

 private:
  template <size_t... I>
  static std::tuple<typename Held<Args>::type...> held(
      const std::vector<c10::IValue>& stack, std::index_sequence<I...> /*indices*/) {
    return {Held<Args>::from(stack[I])...};
  }

  void impl(WithOutput<Native>& op) const {
    std::apply([&op](const auto&... argument) { op.impl(argument..., op.output()); }, arguments_);
  }

  // Before op_: the iterator borrows them.
  const std::tuple<typename Held<Args>::type...> arguments_;
  WithOutput<Native> op_;
  bool copied_per_run_ = true;
};

using Prepare = std::unique_ptr<PreparedKernel> (*)(const std::vector<c10::IValue>&, const at::Tensor&);

// The in-place and out= overloads (the CPU ops launches run) of structured pointwise
// ops whose CPU impl runs the op's loop on the iterator its meta function built.
const std::unordered_map<c10::OperatorName, Prepare>& prepared_ops() {
  static const auto* const ops = [] {
    auto* ops = new std::unordered_map<c10::OperatorName, Prepare>();
    auto add = [ops](const char* name, const char* in_place_overload, Prepare prepare) {
      ops->emplace(c10::OperatorName(std::string("aten::") + name + "_", in_place_overload), prepare);
      ops->emplace(c10::OperatorName(std::string("aten::") + name, "out"), prepare);
    };
    add("add", "Tensor", &PreparedStructured<at::native::structured_ufunc_add_CPU>::make);
    add("sub", "Tensor", &PreparedStructured<at::native::structured_sub_out>::make);
    add("mul", "Tensor", &PreparedStructured<at::native::structured_mul_out>::make);
    add("div", "Tensor", &PreparedStructured<at::native::structured_div_out>::make);
    add("addcmul", "", &PreparedStructured<at::native::structured_addcmul_out>::make);
    add("addcdiv", "", &PreparedStructured<at::native::structured_addcdiv_out>::make);
    add("clamp_max", "", &PreparedStructured<at::native::structured_clamp_max_out>::make);
    add("clamp_min", "", &PreparedStructured<at::native::structured_clamp_min_out>::make);
    add("maximum", "", &PreparedStructured<at::native::structured_maximum_out>::make);
    add("minimum", "", &PreparedStructured<at::native::structured_minimum_out>::make);
    add("lerp", "Scalar", &PreparedStructured<at::native::structured_lerp_Scalar>::make);
    add("exp", "", &PreparedStructured<at::native::structured_exp_out>::make);
    add("sqrt", "", &PreparedStructured<at::native::structured_sqrt_out>::make);
    add("rsqrt", "", &PreparedStructured<at::native::structured_rsqrt_out>::make);
    add("neg", "", &PreparedStructured<at::native::structured_neg_out>::make);
    add("sigmoid", "", &PreparedStructured<at::native::structured_sigmoid_out>::make);
    add("tanh", "", &PreparedStructured<at::native::structured_tanh_out>::make);
    add("silu", "", &PreparedStructured<at::native::structured_silu_out>::make);
    add("gelu", "", &PreparedStructured<at::native::structured_gelu_out_cpu>::make);
    // Backward ops have out= overloads only ("grad_input").
    auto add_backward = [ops](const char* name, Prepare prepare) {
      ops->emplace(c10::OperatorName(std::string("aten::") + name, "grad_input"), prepare);
    };
    add_backward("threshold_backward", &PreparedStructured<at::native::structured_threshold_backward_out>::make);
    add_backward("silu_backward", &PreparedStructured<at::native::structured_silu_backward_out>::make);
    add_backward("gelu_backward", &PreparedStructured<at::native::structured_gelu_backward_out_cpu>::make);
    add_backward("sigmoid_backward", &PreparedStructured<at::native::structured_sigmoid_backward_out>::make);
    add_backward("tanh_backward", &PreparedStructured<at::native::structured_tanh_backward_out>::make);
    return ops;
  }();
  return *ops;
}

// Stands for "no prepared form": the kernel runs as at launch on every replay.
class Unprepared final : public PreparedKernel {
 public:
  void run() const override {}
};
const Unprepared unprepared;

std::unique_ptr<PreparedKernel> prepare(const c10::OperatorHandle& cpu_op, const std::vector<c10::IValue>& stack) {
  const auto& ops = prepared_ops();
  auto found = ops.find(cpu_op.operator_name());
  if (found == ops.end()) {
    return nullptr;
  }
  // The one written argument (self of an in-place op, out of an out= op) is the output.
  const std::vector<c10::Argument>& arguments = cpu_op.schema().arguments();
  std::optional<at::Tensor> output;
  for (size_t i = 0; i < arguments.size() && i < stack.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      if (output.has_value() || !stack[i].isTensor()) {
        return nullptr;
      }
      output = stack[i].toTensor();
    }
  }
  if (!output.has_value() || !output->defined()) {
    return nullptr;
  }
  try {
    return found->second(stack, *output);
  } catch (const std::exception&) {
    return nullptr;
  }
}

} // namespace

ReplayKernel::ReplayKernel(ReplayKernel&& other) noexcept
    : prepared_(other.prepared_.exchange(nullptr, std::memory_order_relaxed)) {}

ReplayKernel::~ReplayKernel() {
  const PreparedKernel* prepared = prepared_.load(std::memory_order_relaxed);
  if (prepared != &unprepared) {
    delete prepared;
  }
}

bool ReplayKernel::run(const c10::OperatorHandle& cpu_op, const std::vector<c10::IValue>& arguments) {
  const PreparedKernel* prepared = prepared_.load(std::memory_order_acquire);
  if (C10_UNLIKELY(prepared == nullptr)) {
    std::unique_ptr<PreparedKernel> made = prepare(cpu_op, arguments);
    const PreparedKernel* mine = made != nullptr ? made.get() : &unprepared;
    if (prepared_.compare_exchange_strong(prepared, mine, std::memory_order_acq_rel)) {
      made.release();
      prepared = mine;
    }
  }
  if (prepared == &unprepared) {
    return false;
  }
  prepared->run();
  return true;
}

} // namespace vdev
