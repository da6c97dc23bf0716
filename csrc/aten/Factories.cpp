// Tensor creation, copies between devices, and reading scalars back to the host.
#include "aten/CpuRedispatch.h"
#include "aten/Tensor.h"
#include "profiler/DeviceActivity.h"
#include "runtime/Device.h"
#include "runtime/HostAllocator.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/fill_ops.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace vdev {
namespace {

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(
      layout.value_or(c10::kStrided) == c10::kStrided, kBackendName,
      " supports only strided tensors, got layout ", *layout);
  TORCH_CHECK(
      !pin_memory.value_or(false), "Only CPU tensors can be pinned; ", kBackendName,
      " tensors cannot");
}

c10::DeviceIndex device_index_of(std::optional<c10::Device> device) {
  return resolve_device_index(device.has_value() ? device->index() : -1);
}

// What torch.use_deterministic_algorithms(True) fills new memory with: NaN, or the
// type's largest value where it has no NaN.
c10::Scalar deterministic_fill_value(c10::ScalarType type) {
  if (c10::isFloatingType(type) || c10::isComplexType(type)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  switch (type) {
#define VDEV_LARGEST_VALUE(ctype, name) \
  case c10::ScalarType::name:           \
    return c10::Scalar(std::numeric_limits<ctype>::max());
    AT_FORALL_INT_TYPES(VDEV_LARGEST_VALUE)
    VDEV_LARGEST_VALUE(uint16_t, UInt16)
    VDEV_LARGEST_VALUE(uint32_t, UInt32)
    VDEV_LARGEST_VALUE(uint64_t, UInt64)
#undef VDEV_LARGEST_VALUE
    case c10::ScalarType::Bool:
      return true;
    default:
      TORCH_CHECK(false, "no deterministic fill value for ", type);
  }
}

// Every new empty tensor gets what CPU and CUDA give theirs: the warning that complex32
// is experimental, and under torch.use_deterministic_algorithms(True) (with
// torch.utils.deterministic.fill_uninitialized_memory) defined contents.
at::Tensor like_cpu_and_cuda(at::Tensor tensor) {
  if (C10_UNLIKELY(tensor.scalar_type() == c10::ScalarType::ComplexHalf)) {
    TORCH_WARN_ONCE("ComplexHalf support is experimental and many operators don't support it yet.");
  }
  const at::Context& context = at::globalContext();
  if (C10_UNLIKELY(context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory())) {
    tensor.fill_(deterministic_fill_value(tensor.scalar_type()));
  }
  return tensor;
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  at::detail::check_size_nonnegative(size);
  return like_cpu_and_cuda(empty_tensor(
      size, dtype.value_or(c10::get_default_dtype_as_scalartype()), device_index_of(device),
      memory_format.value_or(c10::MemoryFormat::Contiguous)));
}

at::Tensor empty_strided(
    c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  at::detail::check_size_nonnegative(size);
  // The CPU's wording, which PyTorch's tests match.
  TORCH_CHECK(
      size.size() == stride.size(), "dimensionality of sizes (", size.size(),
      ") must match dimensionality of strides (", stride.size(), ")");
  const c10::ScalarType scalar_type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  const size_t nbytes =
      at::detail::computeStorageNbytes(size, stride, c10::elementSize(scalar_type));
  at::Tensor tensor = empty_tensor({0}, scalar_type, device_index_of(device));
  tensor.unsafeGetTensorImpl()->set_storage_keep_dtype(
      new_storage(nbytes, tensor.device().index()));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return like_cpu_and_cuda(std::move(tensor));
}

// CUDA's names of copies in profiler traces.
const char* copy_name(const at::Tensor& self, const at::Tensor& dst) {
  if (!is_vdev(self)) {
    return "Memcpy HtoD (Host -> Device)";
  }
  if (!is_vdev(dst)) {
    return "Memcpy DtoH (Device -> Host)";
  }
  return self.device() == dst.device() ? "Memcpy DtoD (Device -> Device)"
                                       : "Memcpy PtoP (Device -> Device)";
}

// A copy where either side is a vdev tensor: both sides are host memory, so ATen's
// CPU copy (dtype conversion, broadcasting, any strides) runs on aliases. As on CUDA,
// a copy between two tensors of one device, and a non_blocking copy between a device
// and pinned host memory, are queued on the device's current stream (the host goes on;
// reading the destination needs a synchronization); any other copy waits for that
// stream and is complete when it returns.
void copy_between(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  lazy_init();
  for (const at::Tensor* tensor : {&self, &dst}) {
    TORCH_CHECK(
        is_vdev(*tensor) || tensor->device().is_cpu(), "Copying between ", self.device(),
        " and ", dst.device(), " is not supported by ", kBackendName);
  }
  const at::Tensor& device_side = is_vdev(dst) ? dst : self;
  const at::Tensor& other_side = is_vdev(dst) ? self : dst;
  const c10::DeviceIndex device = device_side.device().index();
  const char* name = copy_name(self, dst);
  if (is_vdev(dst)) {
    end_copy_on_write(dst);
  }
  const bool queued = is_vdev(other_side)
      ? other_side.device() == device_side.device()
      : non_blocking && is_pinned_pointer(other_side.data_ptr());
  if (queued) {
    // The checks ATen's copy makes, made now so that they raise at the call. They read
    // geometry and storages only, which the tensors have as their aliases would.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
    // Shapes too (a source that does not broadcast to the destination), as CUDA's
    // TensorIterator does on the host before it launches; its error message is built
    // only for a source that does not broadcast.
    if (!at::is_expandable_to(self.sizes(), dst.sizes())) {
      CpuRedispatch call(at::_ops::copy_::name);
      at::TensorIteratorConfig()
          .add_output(call.alias(dst))
          .add_const_input(call.alias(self))
          .resize_outputs(false)
          .check_all_same_dtype(false)
          .check_all_same_device(false)
          .build();
    }
    // The kernel runs on aliases of the vdev sides as they are now, made when it runs
    // (LaunchedTensor: device memory is not kept alive, as on CUDA); a pinned host
    // tensor is held until the copy ran. Its profiler activity is the copy on the stream.
    struct Side {
      explicit Side(const at::Tensor& tensor)
          : launched(is_vdev(tensor) ? std::optional<LaunchedTensor>(tensor) : std::nullopt),
            host(is_vdev(tensor) ? at::Tensor() : tensor) {}
      at::Tensor on_cpu(LaunchAliases& aliases) const {
        return launched.has_value() ? aliases.alias(*launched) : host;
      }
      std::optional<LaunchedTensor> launched;
      at::Tensor host;
    };
    launch(
        current_stream(device), "aten::copy_", [to = Side(dst), from = Side(self), name, device]() {
          at::Tensor cpu_dst;
          at::Tensor cpu_src;
          {
            LaunchAliases aliases;
            cpu_dst = to.on_cpu(aliases);
            cpu_src = from.on_cpu(aliases);
          }
          {
            profiler::ActivityScope activity(profiler::ActivityKind::kMemcpy, name, device, cpu_dst.nbytes());
            at::_ops::copy_::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_dst, cpu_src, false);
          }
          for (auto [side, alias] : {std::pair{&to, &cpu_dst}, std::pair{&from, &cpu_src}}) {
            if (side->launched.has_value()) {
              LaunchAliases::recycle(std::move(*alias));
            }
          }
        });
    return;
  }
  // Aliases made by one call: ATen's copy then sees whether source and destination
  // share memory (and refuses a partial overlap, as on CPU and CUDA).
  CpuRedispatch call(at::_ops::copy_::name);
  at::Tensor cpu_dst = call.alias(dst);
  synchronize_for_host_op(device, name);
  if (is_vdev(other_side)) {
    synchronize_for_host_op(other_side.device().index(), name);
  }
  profiler::ActivityScope activity(profiler::ActivityKind::kMemcpy, name, device, dst.nbytes());
  cpu_dst.copy_(call.alias(self), non_blocking);
}

// copy_ lands here when either side is a vdev tensor (ATen's copy_ reaches _copy_from
// for devices it does not know).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  copy_between(self, dst, non_blocking);
  return dst;
}

// copy_ itself, ahead of ATen's composite one, which reaches _copy_from after its own
// checks and takes the destination back by value: a reference-count increment of a
// tensor Python holds, which takes the GIL the binding released (about a third of a
// small copy's host cost). Zero tensors take ATen's way.
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (!self.defined() || !src.defined() || self._is_zerotensor() || src._is_zerotensor()) {
    return at::native::copy_(self, src, non_blocking);
  }
  if (!self.is_same(src)) {
    copy_between(src, self, non_blocking);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, /*non_blocking=*/false);
}

// Reading a value synchronizes the host with the device's current stream, as with CUDA.
// CPU's kernel only reads the element through data_ptr (math bits are resolved above
// it, as on CPU), so it runs on the vdev tensor itself: no alias, no second dispatch.
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  lazy_init();
  synchronize_for_host_op(self.device().index(), "aten::_local_scalar_dense");
  profiler::ActivityScope activity(
      profiler::ActivityKind::kMemcpy, "Memcpy DtoH (Device -> Host)", self.device().index(),
      static_cast<int64_t>(self.element_size()));
  return at::native::_local_scalar_dense_cpu(self);
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  lazy_init();
  end_copy_on_write(self);
  const c10::DeviceIndex device = self.device().index();
  // Filling with zeros is a memset on CUDA too (cudaMemsetAsync), other values a kernel.
  const bool memset = value.equal(0) && self.is_contiguous();
  launch(
      current_stream(device), "aten::fill_",
      [cpu_self = LaunchAliases().alias(self), value, memset, device]() mutable {
        profiler::ActivityScope activity(
            memset ? profiler::ActivityKind::kMemset : profiler::ActivityKind::kKernel,
            memset ? "Memset (Device)" : "aten::fill_", device, cpu_self.nbytes());
        at::_ops::fill__Scalar::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_self, value);
      });
  return self;
}

// Whether `self` may take `from`'s data in place (`self.data = from`), which is how
// Module.to / torch::nn::Module::to move parameters. As between CPU and CUDA, dense
// CPU and vdev tensors may, so a moved module keeps its parameters (and the optimizer
// holding them); C++ modules have no other way to move. A vdev TensorImpl stays vdev.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (has_vdev_tensor_impl(self)) {
    return is_vdev(from);
  }
  auto dense_cpu_or_vdev = [](const at::Tensor& tensor) {
    return tensor.key_set().has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
        (tensor.is_cpu() || is_vdev(tensor));
  };
  return dense_cpu_or_vdev(self) && dense_cpu_or_vdev(from);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

// Our copies take conjugate and negative bits into account (the CPU aliases carry
// them into ATen's copy), so the math-bit fallbacks must not materialise them first:
// that would clone, which copies, which lands here again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace vdev
