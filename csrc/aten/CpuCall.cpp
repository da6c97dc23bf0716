#include "aten/CpuCall.h"

#include "aten/Tensor.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <ATen/ops/empty_strided.h>

namespace vdev {

CpuCall::CpuCall(std::string_view op_name, DeviceRule rule) : op_name_(op_name), rule_(rule) {
  lazy_init();
}

void CpuCall::note_tensor(const at::Tensor& tensor, bool cpu_allowed) {
  if (!tensor.defined()) {
    return;
  }
  if (is_vdev(tensor)) {
    note_device(tensor.device());
  } else if (!cpu_allowed && tensor.device().is_cpu() && tensor.dim() > 0) {
    saw_cpu_tensor_ = true;
  }
}

void CpuCall::note_device_argument(c10::Device device) {
  if (device.type() == kDeviceType && device_ < 0) {
    device_ = resolve_device_index(device.index());
  }
}

void CpuCall::note_device(c10::Device device) {
  if (device_ < 0) {
    device_ = device.index();
    return;
  }
  TORCH_CHECK(
      device_ == device.index() || rule_ == DeviceRule::kAnyDevice,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      make_device(device_), " and ", device, "! (in ", op_name_, ")");
}

c10::DeviceIndex CpuCall::device() {
  if (device_ < 0) {
    device_ = current_device();
  }
  TORCH_CHECK(
      !saw_cpu_tensor_ || rule_ == DeviceRule::kAnyDevice,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      make_device(device_), " and cpu! (in ", op_name_, ")");
  return device_;
}

at::Tensor CpuCall::alias(const at::Tensor& tensor, bool written) {
  if (!is_vdev(tensor)) {
    return tensor;
  }
  at::Tensor cpu = cpu_alias(tensor);
  aliased_.push_back(AliasedArgument{
      written ? tensor : at::Tensor(), cpu, cpu.storage().unsafeGetStorageImpl(),
      cpu.storage().data(), tensor.storage()});
  return cpu;
}

at::Generator CpuCall::cpu_generator(const std::optional<at::Generator>& generator) {
  return cpu_generator_for(generator, device());
}

CpuCall::KernelScope::KernelScope(CpuCall& call)
    : device_guard_(make_device(call.device())), route_allocations_(call.device()) {}

// A kernel may resize an in-place or out= argument: its CPU alias then holds new
// device memory (allocated through the alias storage's allocator) and new geometry,
// which the device tensor takes over.
void CpuCall::update_written_arguments() {
  for (AliasedArgument& argument : aliased_) {
    if (!argument.device_tensor.defined()) {
      continue;
    }
    c10::StorageImpl* cpu_storage = argument.cpu_storage;
    c10::StorageImpl* device_storage = argument.device_tensor.storage().unsafeGetStorageImpl();
    if (cpu_storage->data() != argument.original_data) {
      c10::DataPtr data = cpu_storage->set_data_ptr(c10::DataPtr());
      adopt_device_memory(data, argument.device_tensor.device().index());
      device_storage->set_data_ptr_noswap(std::move(data));
      device_storage->set_nbytes(cpu_storage->nbytes());
    }
    const at::Tensor& cpu = argument.cpu_tensor;
    auto* impl = argument.device_tensor.unsafeGetTensorImpl();
    if (cpu.sizes() != argument.device_tensor.sizes() ||
        cpu.strides() != argument.device_tensor.strides() ||
        cpu.storage_offset() != argument.device_tensor.storage_offset()) {
      impl->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
  }
}

at::Tensor CpuCall::to_device(const at::Tensor& cpu) {
  if (!cpu.defined() || !cpu.device().is_cpu()) {
    return cpu;
  }
  c10::StorageImpl* storage = cpu.storage().unsafeGetStorageImpl();
  for (const AliasedArgument& argument : aliased_) {
    if (argument.cpu_storage == storage) {
      return view_of_storage(
          argument.device_storage, cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
  }
  for (auto& [cpu_storage, device_storage] : adopted_) {
    if (cpu_storage == storage) {
      return view_of_storage(
          device_storage, cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
  }
  if (owns_device_memory(storage->data_ptr())) {
    c10::DataPtr data = storage->set_data_ptr(c10::DataPtr());
    adopt_device_memory(data, device_);
    c10::Storage device_storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), storage->nbytes(), std::move(data),
        &caching_allocator(), /*resizable=*/true));
    adopted_.emplace_back(storage, device_storage);
    return view_of_storage(device_storage, cpu, cpu.sizes(), cpu.strides(), cpu.storage_offset());
  }
  // Memory the kernel did not allocate through the CPU allocator (a constant, a
  // CPU argument returned as is): the one case that needs a copy.
  at::Tensor result = at::empty_strided(
      cpu.sizes(), cpu.strides(), cpu.options().device(make_device(device_)));
  cpu_alias(result).copy_(cpu);
  return result;
}

} // namespace vdev
