#include "aten/QueuedOp.h"

#include "aten/CpuRedispatch.h"
#include "aten/MetaKernels.h"
#include "aten/MetaResultCache.h"
#include "aten/SupportedDtypes.h"
#include "aten/Tensor.h"
#include "graphs/ReplayKernel.h"
#include "profiler/DeviceActivity.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/StorageImpl.h>

#include <atomic>
#include <exception>
#include <optional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vdev {
namespace {

bool is_written(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

bool is_plain_tensor(const c10::Argument& argument) {
  return argument.type()->kind() == c10::TypeKind::TensorType;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The aten overloads of each operator name, indexed once.
const std::vector<c10::OperatorName>& overloads_of(const std::string& name) {
  static const auto* const index = [] {
    auto* overloads = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
      if (starts_with(op.name, "aten::")) {
        (*overloads)[op.name].push_back(op);
      }
    }
    return overloads;
  }();
  static const std::vector<c10::OperatorName> none;
  auto found = index->find(name);
  return found == index->end() ? none : found->second;
}

// The out= overload of a functional op: its arguments, then one written tensor per
// result; with a CPU kernel of its own.
std::optional<c10::OperatorHandle> out_overload(const c10::FunctionSchema& functional) {
  const auto& arguments = functional.arguments();
  const size_t outputs = functional.returns().size();
  for (const c10::OperatorName& name : overloads_of(functional.name())) {
    std::optional<c10::OperatorHandle> candidate = c10::Dispatcher::singleton().findOp(name);
    if (!candidate.has_value() || !candidate->hasSchema()) {
      continue;
    }
    const c10::FunctionSchema& schema = candidate->schema();
    if (schema.arguments().size() != arguments.size() + outputs ||
        schema.returns().size() != outputs) {
      continue;
    }
    bool matches = true;
    for (size_t i = 0; i < schema.arguments().size() && matches; ++i) {
      const c10::Argument& argument = schema.arguments()[i];
      matches = i < arguments.size()
          ? argument.name() == arguments[i].name() && *argument.type() == *arguments[i].type() &&
              is_written(argument) == is_written(arguments[i])
          : argument.kwarg_only() && is_written(argument) && is_plain_tensor(argument);
    }
    if (matches && candidate->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
      return candidate;
    }
  }
  return std::nullopt;
}

// Ops whose out= CPU kernel changes the output it is given, so neither they nor their
// functional variant (through its out= overload) can be launched: a reduced loss is first
// written unreduced (resized, with a deprecation warning); linalg_lu_solve's and
// triangular_solve's out= kernels leave their outputs a lazy conjugate or restrided,
// which their meta kernels do not.
bool out_overload_differs(const std::string& name) {
  return name == "aten::mse_loss" || name == "aten::smooth_l1_loss" || name == "aten::linalg_lu_solve" ||
      name == "aten::triangular_solve";
}

// Ops that change their written arguments' storage or geometry rather than their values.
bool changes_metadata(const std::string& name) {
  for (std::string_view prefix : {"aten::resize", "aten::_resize", "aten::set_", "aten::sparse_resize"}) {
    if (starts_with(name, prefix)) {
      return true;
    }
  }
  return false;
}

// A meta tensor over `storage` with `tensor`'s sizes, strides, offset, dtype and math bits.
// Its key set is the Meta key alone (the meta kernel runs below autograd anyway), so it
// gets no version counter: nothing ever writes it, and that allocation was a good part
// of making it.
at::Tensor meta_like(const at::Tensor& tensor, c10::Storage storage) {
  auto meta = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, std::move(storage), c10::DispatchKeySet(c10::DispatchKey::Meta), tensor.dtype());
  c10::TensorImpl* impl = meta.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  impl->_set_conj(tensor.is_conj());
  impl->_set_neg(tensor.is_neg());
  // A Python number passed as a tensor promotes like a scalar.
  if (tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
    impl->set_wrapped_number(true);
  }
  return meta;
}

// The arguments as meta tensors, one per argument tensor (a tensor passed twice is one
// meta tensor). Tensors over one storage get meta tensors over one meta storage, whose
// data pointer is the storage's own (never read): the meta kernels' overlap checks
// then see what the CPU kernel would, and raise at the call.
class MetaArguments {
 public:
  const at::Tensor& meta(const at::Tensor& tensor) {
    for (const auto& [original, meta] : metas_) {
      if (original == tensor.unsafeGetTensorImpl()) {
        return meta;
      }
    }
    return metas_.emplace_back(tensor.unsafeGetTensorImpl(), meta_like(tensor, meta_storage(tensor))).second;
  }

  c10::IValue convert(const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      return tensor.defined() ? c10::IValue(meta(tensor)) : value;
    }
    if (value.isList()) {
      c10::impl::GenericList converted(value.toList().elementType());
      const c10::ArrayRef<c10::IValue> elements = value.toListRef();
      converted.reserve(elements.size());
      for (const c10::IValue& element : elements) {
        converted.push_back(convert(element));
      }
      return converted;
    }
    if (value.isDevice() && value.toDevice().type() == kDeviceType) {
      return c10::Device(c10::kMeta);
    }
    return value;
  }

 private:
  c10::Storage meta_storage(const at::Tensor& tensor) {
    const c10::StorageImpl* storage = tensor.has_storage() ? tensor.storage().unsafeGetStorageImpl() : nullptr;
    for (const auto& [shown, meta] : storages_) {
      if (storage != nullptr && shown == storage) {
        return meta;
      }
    }
    c10::Storage meta(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), storage == nullptr ? 0 : storage->nbytes(),
        c10::DataPtr(storage == nullptr ? nullptr : const_cast<void*>(storage->data()), c10::Device(c10::kMeta)),
        c10::GetAllocator(c10::kMeta), /*resizable=*/true));
    storages_.emplace_back(storage, meta);
    return meta;
  }

  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> metas_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> storages_;
};

// Whether the CPU kernel can take `tensor` as it is: strided, and not of an
// accelerator dtype it computes in a wider one.
bool launchable_argument(const at::Tensor& tensor, const AcceleratorDtypes* accelerator_dtypes) {
  if (!tensor.defined()) {
    return true;
  }
  if (tensor.layout() != c10::kStrided || tensor.is_nested()) {
    return false;
  }
  return accelerator_dtypes == nullptr || !is_vdev(tensor) ||
      accelerator_dtypes->compute_type(tensor.scalar_type()) == c10::ScalarType::Undefined;
}

// A written out= argument takes the geometry and math bits the meta kernel gave it. Its values are
// all overwritten, so new memory, if it grows, is not filled from the old (work queued
// earlier may still be writing that).
void take_geometry(const at::Tensor& original, const at::Tensor& meta, c10::DeviceIndex device) {
  c10::TensorImpl* impl = original.unsafeGetTensorImpl();
  impl->_set_conj(meta.is_conj());
  impl->_set_neg(meta.is_neg());
  if (same_geometry(*impl, *meta.unsafeGetTensorImpl())) {
    return;
  }
  const size_t nbytes = at::detail::computeStorageNbytes(
      meta.sizes(), meta.strides(), meta.itemsize(), meta.storage_offset());
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (nbytes > storage->nbytes()) {
    TORCH_CHECK(
        storage->resizable(), "Trying to resize storage that is not resizable (out= argument of ",
        kBackendName, " op)");
    storage->set_data_ptr_noswap(allocate_device_memory(device, nbytes, make_device(device)));
    storage->set_nbytes(nbytes);
  }
  impl->set_sizes_and_strides(meta.sizes(), meta.strides(), meta.storage_offset());
}

// What a launched kernel's output must keep (KernelArguments::keep_outputs_as_sized).
struct OutputShape {
  const void* data;
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  int64_t offset;
  bool conj;
  bool neg;

  static OutputShape of(const at::Tensor& tensor) {
    return OutputShape{
        tensor.storage().data(), c10::SmallVector<int64_t, 5>(tensor.sizes().begin(), tensor.sizes().end()),
        c10::SmallVector<int64_t, 5>(tensor.strides().begin(), tensor.strides().end()), tensor.storage_offset(),
        tensor.is_conj(), tensor.is_neg()};
  }

  bool operator==(const OutputShape& other) const {
    return data == other.data && sizes == other.sizes && strides == other.strides && offset == other.offset &&
        conj == other.conj && neg == other.neg;
  }

  // Whether `other` is this output with only its strides changed, in the same memory.
  bool restrided_from(const OutputShape& other) const {
    return data == other.data && sizes == other.sizes && offset == other.offset && conj == other.conj &&
        neg == other.neg;
  }
};

// Some CPU kernels restride their output to the input's memory format (replication and
// reflection padding make it channels-last) where CUDA's kernels and the meta kernel keep
// it contiguous: the values the kernel wrote move into the layout the host gave `output`.
void restore_layout(at::Tensor& output, const OutputShape& intended) {
  const at::Tensor written = output.clone(at::MemoryFormat::Preserve);
  output.unsafeGetTensorImpl()->set_sizes_and_strides(intended.sizes, intended.strides, intended.offset);
  output.copy_(written);
}


// A launched kernel's stack: its arguments as captured at the launch, with CPU aliases
// (LaunchAliases) for its vdev tensors. The launching thread only notes those tensors
// (LaunchedTensor); their aliases are made when the kernel first runs, on the stream's
// worker. A graph's recorded kernel runs once per replay, and replays may run at once:
// the first makes the aliases, under a lock, and every replay runs on them.
class KernelArguments {
 public:
  KernelArguments() = default;
  // Moved only before any run (into the kernel that launches it).
  KernelArguments(KernelArguments&& other) noexcept
      : stack_(std::move(other.stack_)), noted_(std::move(other.noted_)) {}
  KernelArguments& operator=(KernelArguments&&) = delete;
  KernelArguments(const KernelArguments&) = delete;
  KernelArguments& operator=(const KernelArguments&) = delete;

  // The stack, without aliases, while the launch fills it with `size` values.
  std::vector<c10::IValue>& stack(size_t size) {
    stack_.reserve(size);
    noted_.reserve(size);
    return stack_;
  }

  // `tensor`, a vdev tensor as it is now, goes at `position` of the stack (element
  // `element` of the list there, or -1); `written` if the kernel writes it.
  void note(const at::Tensor& tensor, size_t position, int element, bool written) {
    noted_.emplace_back(tensor, position, element, written);
  }

  // The stack with the aliases in place, made at the first run. `only_run`: no other
  // run may come at once (no graph recorded the kernel).
  std::vector<c10::IValue>& with_aliases(bool only_run) {
    if (only_run) {
      make_aliases();
    } else if (!made_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(making_);
      if (!made_.load(std::memory_order_relaxed)) {
        make_aliases();
        made_.store(true, std::memory_order_release);
      }
    }
    return stack_;
  }

  // After the kernel ran: its outputs must be as the host sized them. A kernel that
  // changes one (resizes an out= argument, leaves it a lazy conjugate) would leave the
  // host's tensor wrong.
  void keep_outputs_as_sized() {
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const OutputShape written = OutputShape::of(outputs_[i]);
      if (written == shapes_[i]) {
        continue;
      }
      TORCH_CHECK(
          written.restrided_from(shapes_[i]), "the CPU kernel changed the shape, memory or math bits ",
          "of an output its meta kernel sized (", kBackendName, " cannot launch this op)");
      restore_layout(outputs_[i], shapes_[i]);
    }
  }

  // After the only run, once the kernel's stack is gone: the aliases go back to be
  // re-pointed by this thread's next kernels (LaunchAliases::recycle).
  void recycle_aliases() {
    outputs_.clear();
    for (at::Tensor& alias : aliases_) {
      LaunchAliases::recycle(std::move(alias));
    }
    aliases_.clear();
  }

 private:
  void make_aliases() {
    LaunchAliases aliases;
    aliases_.reserve(noted_.size());
    for (const Noted& noted : noted_) {
      at::Tensor alias = aliases_.emplace_back(aliases.alias(noted.tensor));
      if (noted.written) {
        shapes_.push_back(OutputShape::of(alias));
        outputs_.push_back(alias);
      }
      if (noted.element < 0) {
        stack_[noted.position] = std::move(alias);
      } else {
        stack_[noted.position].toList().set(noted.element, std::move(alias));
      }
    }
  }

  struct Noted {
    Noted(const at::Tensor& tensor, size_t position, int element, bool written)
        : tensor(tensor), position(static_cast<uint32_t>(position)), element(element), written(written) {}

    LaunchedTensor tensor;
    uint32_t position;
    int element;
    bool written;
  };
  std::vector<c10::IValue> stack_;
  // A std::vector: the kernel's body is moved a few times on its way to the stream,
  // and moving inline elements (each with its sizes and strides) cost more than the
  // allocation.
  std::vector<Noted> noted_;
  c10::SmallVector<at::Tensor, 2> outputs_;
  c10::SmallVector<OutputShape, 2> shapes_;
  c10::SmallVector<at::Tensor, 4> aliases_;
  std::atomic<bool> made_{false};
  std::mutex making_;
};

} // namespace

OperatorFacts::Launch plan_launch(const c10::FunctionSchema& schema, const OperatorFacts& facts) {
  OperatorFacts::Launch plan;
  if (!starts_with(schema.name(), "aten::") || changes_metadata(schema.name()) ||
      out_overload_differs(schema.name())) {
    return plan;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    if (facts.optional_generator[i] || argument.type()->kind() == c10::TypeKind::GeneratorType ||
        (facts.written[i] && !is_plain_tensor(argument))) {
      return plan;
    }
  }
  bool all_written = true;
  bool all_fresh = !schema.returns().empty();
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const c10::Argument& result = schema.returns()[i];
    if (!is_plain_tensor(result)) {
      return plan;
    }
    all_written = all_written && facts.written_argument_of_result[i] >= 0;
    all_fresh = all_fresh && result.alias_info() == nullptr;
  }
  bool writes = false;
  for (bool written : facts.written) {
    writes = writes || written;
  }
  const c10::KernelFunction* meta = meta_kernel(schema.operator_name());
  const HandwrittenLaunch* handwritten = meta == nullptr ? handwritten_launch(schema.operator_name()) : nullptr;
  if (handwritten != nullptr) {
    meta = &handwritten->meta;
  }
  if (meta == nullptr) {
    return plan;
  }
  if (handwritten != nullptr && handwritten->cpu.isValid() && (all_fresh && !writes)) {
    plan.cpu_op = c10::Dispatcher::singleton().findOp(schema.operator_name());
    plan.cpu_kernel = &handwritten->cpu;
    plan.fresh_outputs = schema.returns().size();
  } else if (all_written && writes) {
    std::optional<c10::OperatorHandle> self = c10::Dispatcher::singleton().findOp(schema.operator_name());
    if (!self.has_value() || !self->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
      return plan;
    }
    plan.cpu_op = self;
  } else if (all_fresh && !writes) {
    plan.cpu_op = out_overload(schema);
    if (!plan.cpu_op.has_value()) {
      return plan;
    }
    plan.fresh_outputs = schema.returns().size();
  } else {
    return plan;
  }
  plan.meta = meta;
  return plan;
}

namespace {

// A written argument on the host: CUDA raises what the op's meta function raises of it
// (TensorIterator's "Expected all tensors to be on the same device", a structured out=
// kernel's "Expected out tensor to have device ..."), before any kernel runs; so does
// vdev, running the meta function on the arguments as given.
void raise_as_meta_for_host_output(
    const c10::OperatorHandle& op,
    const OperatorFacts& facts,
    c10::ArrayRef<c10::IValue> arguments) {
  bool host_output = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    host_output = host_output ||
        (facts.written[i] && value.isTensor() && value.toTensor().defined() && value.toTensor().is_cpu());
  }
  if (host_output) {
    torch::jit::Stack stack(arguments.begin(), arguments.end());
    facts.launch.meta->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  }
}


// Passes warnings on, noting that there were some.
class WarningRecorder : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    warned = true;
    next_->process(warning);
  }
  bool warned = false;

 private:
  c10::WarningHandler* next_ = c10::WarningUtils::get_warning_handler();
};

struct MetaRun {
  MetaResult result;
  // Whether later calls with the same signature may take `result` (MetaResultCache.h):
  // the meta kernel warned nothing and changed no written argument.
  bool rememberable = true;
};

// The op on meta tensors: its fresh outputs' metadata, and the written arguments take
// the geometry it gave them. nullopt if it raised: invalid arguments, or sizes that
// depend on data after all (indexing with a bool mask calls nonzero); the CPU kernel, on
// the calling thread, then raises or decides.
std::optional<MetaRun> run_meta_kernel(
    const c10::OperatorHandle& op, const OperatorFacts& facts, c10::ArrayRef<c10::IValue> arguments,
    c10::DeviceIndex device) {
  MetaArguments metas;
  torch::jit::Stack meta_stack;
  meta_stack.reserve(arguments.size());
  for (const c10::IValue& value : arguments) {
    meta_stack.push_back(metas.convert(value));
  }
  MetaRun run;
  {
    WarningRecorder warnings;
    c10::WarningUtils::WarningHandlerGuard recording(&warnings);
    try {
      facts.launch.meta->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    run.rememberable = !warnings.warned;
  }
  for (size_t i = 0; i < facts.launch.fresh_outputs; ++i) {
    const at::Tensor& meta = meta_stack[i].toTensor();
    MetaResult::Output& output = run.result.fresh.emplace_back();
    if (meta.defined()) {
      output.defined = true;
      output.dtype = meta.scalar_type();
      output.conj = meta.is_conj();
      output.neg = meta.is_neg();
      output.sizes.assign(meta.sizes().begin(), meta.sizes().end());
      output.strides.assign(meta.strides().begin(), meta.strides().end());
    }
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (facts.written[i] && arguments[i].isTensor() && arguments[i].toTensor().defined()) {
      const at::Tensor& original = arguments[i].toTensor();
      const at::Tensor& meta = metas.meta(original);
      run.rememberable = run.rememberable && original.is_conj() == meta.is_conj() &&
          original.is_neg() == meta.is_neg() &&
          same_geometry(*original.unsafeGetTensorImpl(), *meta.unsafeGetTensorImpl());
      take_geometry(original, meta, device);
    }
  }
  return run;
}
} // namespace

bool launch_op(const c10::OperatorHandle& op, const OperatorFacts& facts, torch::jit::Stack* stack) {
  const OperatorFacts::Launch& plan = facts.launch;
  if (plan.meta == nullptr) {
    return false;
  }
  const size_t argument_count = facts.written.size();
  const size_t first = stack->size() - argument_count;
  const c10::ArrayRef<c10::IValue> arguments(stack->data() + first, argument_count);
  for (size_t i = 0; i < argument_count; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor() && !launchable_argument(value.toTensor(), facts.accelerator_dtypes)) {
      return false;
    }
    // An accelerator dtype argument (prod of float32 into complex32) widens the call.
    if (facts.dtype[i] && value.isInt() && facts.accelerator_dtypes != nullptr &&
        facts.accelerator_dtypes->compute_type(static_cast<c10::ScalarType>(value.toInt())) !=
            c10::ScalarType::Undefined) {
      return false;
    }
    // A written tensor whose elements share memory (expanded) is refused by most CPU
    // kernels, which CUDA's refuse on the host; not every meta kernel checks it
    // (linspace's out=). On the calling thread the CPU kernel raises at the call.
    if (facts.written[i] && value.isTensor() && value.toTensor().defined() &&
        at::has_internal_overlap(value.toTensor()) == at::MemOverlap::Yes) {
      return false;
    }
    if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor() && !launchable_argument(element.toTensor(), facts.accelerator_dtypes)) {
          return false;
        }
      }
    }
  }

  raise_as_meta_for_host_output(op, facts, arguments);
  const char* name = op.schema().name().c_str();
  c10::DeviceIndex device = -1;
  {
    CpuRedispatch checks(name);
    using CpuTensors = CpuRedispatch::CpuTensors;
    for (size_t i = 0; i < argument_count; ++i) {
      const CpuTensors cpu = facts.written[i] ? CpuTensors::Rejected
          : facts.index_list[i]               ? CpuTensors::Allowed
                                              : CpuTensors::ScalarsAllowed;
      const c10::IValue& value = arguments[i];
      if (value.isTensor()) {
        checks.note_tensor(value.toTensor(), cpu);
      } else if (value.isList()) {
        for (const c10::IValue& element : value.toListRef()) {
          if (element.isTensor()) {
            checks.note_tensor(element.toTensor(), cpu);
          }
        }
      } else if (value.isDevice()) {
        checks.note_device(value.toDevice());
      }
    }
    device = checks.device();
  }

  LaunchSignature signature;
  const bool describable = signature.describe(facts, arguments);
  const MetaResult* remembered = describable ? remembered_meta_result(signature) : nullptr;
  std::optional<MetaRun> computed;
  if (remembered == nullptr) {
    computed = run_meta_kernel(op, facts, arguments, device);
    if (!computed.has_value()) {
      // The CPU kernel on the calling thread raises or decides; an error it raises
      // before reading data (arange's unsupported dtype) raises now, as CUDA's host
      // checks do, not after waiting for the stream. (An op with fresh outputs has no
      // sizes for them: its CPU kernel raises after the wait.)
      if (plan.fresh_outputs == 0) {
        raise_metadata_errors(name, *plan.cpu_op, plan.cpu_kernel, arguments, {});
      }
      return false;
    }
  }
  const MetaResult& meta_result = remembered != nullptr ? *remembered : computed->result;

  c10::SmallVector<at::Tensor, 2> fresh;
  for (const MetaResult::Output& meta : meta_result.fresh) {
    if (!meta.defined) {
      if (plan.cpu_kernel == nullptr) {
        return false;  // an optional output (a backward's unneeded gradient)
      }
      fresh.emplace_back();
      continue;
    }
    at::Tensor& output = fresh.emplace_back(empty_strided_tensor(meta.sizes, meta.strides, meta.dtype, device));
    // Some kernels leave their result a lazy conjugate (linalg_lu_solve with left=False).
    output.unsafeGetTensorImpl()->_set_conj(meta.conj);
    output.unsafeGetTensorImpl()->_set_neg(meta.neg);
  }
  // A remembered signature's dtypes ran: it was remembered after its kernel ran below.
  std::optional<DtypeSignature> unproven_dtypes;
  if (remembered == nullptr) {
    unproven_dtypes.emplace(op, arguments);
    for (const at::Tensor& output : fresh) {
      unproven_dtypes->add(output);  // their size class: linspace's steps
    }
    if (unproven_dtypes->known_to_run()) {
      unproven_dtypes.reset();
    } else {
      raise_metadata_errors(name, *plan.cpu_op, plan.cpu_kernel, arguments, fresh);
    }
  }

  // The kernel's arguments, captured now. CPU tensors (scalars, index lists) are
  // copied, as CUDA stages host memory at the launch.
  KernelArguments kernel_arguments;
  std::vector<c10::IValue>& kernel_stack = kernel_arguments.stack(argument_count + fresh.size());
  // `tensor` for the kernel's stack at `position` (element `element` of the list there).
  auto launched = [&kernel_arguments](const at::Tensor& tensor, size_t position, int element,
                                      bool written) -> at::Tensor {
    if (!tensor.defined()) {
      return tensor;
    }
    if (is_vdev(tensor)) {
      kernel_arguments.note(tensor, position, element, written);
      return at::Tensor();
    }
    // A Python number passed as a tensor is made for this call alone and never
    // written, so the kernel may hold it as it is.
    if (tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
      return tensor;
    }
    return tensor.clone();
  };
  for (size_t i = 0; i < argument_count; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      kernel_stack.emplace_back(launched(value.toTensor(), i, -1, facts.written[i]));
    } else if (value.isList()) {
      c10::impl::GenericList converted(value.toList().elementType());
      const c10::ArrayRef<c10::IValue> elements = value.toListRef();
      converted.reserve(elements.size());
      for (size_t j = 0; j < elements.size(); ++j) {
        const c10::IValue& element = elements[j];
        converted.push_back(
            element.isTensor() ? c10::IValue(launched(element.toTensor(), i, static_cast<int>(j), false))
                               : element);
      }
      kernel_stack.emplace_back(std::move(converted));
    } else if (value.isDevice() && value.toDevice().type() == kDeviceType) {
      kernel_stack.emplace_back(c10::Device(c10::kCPU));
    } else {
      kernel_stack.push_back(value);
    }
  }
  for (const at::Tensor& output : fresh) {
    kernel_stack.emplace_back(launched(output, kernel_stack.size(), -1, true));
  }

  auto kernel =
      [cpu_op = *plan.cpu_op, cpu_kernel = plan.cpu_kernel, kernel_arguments = std::move(kernel_arguments), name,
       device, replay = ReplayKernel()](bool only_run) mutable {
        profiler::ActivityScope activity(profiler::ActivityKind::kKernel, name, device);
        std::vector<c10::IValue>& prepared = kernel_arguments.with_aliases(only_run);
        if (!only_run && cpu_kernel == nullptr && replay.run(cpu_op, prepared)) {
          return;
        }
        // A graph's recorded kernel runs again at each replay: it redispatches a copy.
        torch::jit::Stack kernel_stack = only_run ? std::move(prepared) : prepared;
        constexpr c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);
        if (cpu_kernel != nullptr) {
          cpu_kernel->callBoxed(cpu_op, kCpu, &kernel_stack);
        } else {
          cpu_op.redispatchBoxed(kCpu, &kernel_stack);
        }
        kernel_arguments.keep_outputs_as_sized();
        if (only_run) {
          kernel_stack.clear();
          kernel_arguments.recycle_aliases();
        }
      };
  bool dtypes_run = !unproven_dtypes.has_value();
  if (dtypes_run) {
    launch(current_stream(device), name, std::move(kernel));
  } else if (launch_checking_support(current_stream(device), name, std::move(kernel))) {
    unproven_dtypes->note_runs();
    dtypes_run = true;
  }
  if (computed.has_value() && describable && computed->rememberable && dtypes_run) {
    remember_meta_result(signature, computed->result);
  }

  c10::SmallVector<c10::IValue, 2> results;
  if (plan.fresh_outputs > 0) {
    for (at::Tensor& output : fresh) {
      results.emplace_back(std::move(output));
    }
  } else {
    for (int written_argument : facts.written_argument_of_result) {
      results.push_back(arguments[written_argument]);
    }
  }
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  for (c10::IValue& result : results) {
    stack->push_back(std::move(result));
  }
  return true;
}

} // namespace vdev
