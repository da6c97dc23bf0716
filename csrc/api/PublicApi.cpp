// The parts of the public API (torch_vdev/vdev.h) that are thin views of the
// runtime; device_count, current_device and set_device live in runtime/Device.cpp.
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>

namespace vdev {
namespace {

const c10::CachingAllocator::Stat& allocated_bytes(
    const c10::CachingDeviceAllocator::DeviceStats& stats) {
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}

} // namespace

void synchronize(c10::DeviceIndex device) {
  c10::impl::getDeviceGuardImpl(kDeviceType)->synchronizeDevice(resolve_device_index(device));
}

void manual_seed(uint64_t seed) {
  at::Generator generator = default_generator(current_device());
  // See Note [Acquire lock when using random generators] (ATen/core/Generator.h).
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

size_t memory_allocated(c10::DeviceIndex device) {
  auto stats = caching_allocator().getDeviceStats(resolve_device_index(device));
  return static_cast<size_t>(allocated_bytes(stats).current);
}

size_t max_memory_allocated(c10::DeviceIndex device) {
  auto stats = caching_allocator().getDeviceStats(resolve_device_index(device));
  return static_cast<size_t>(allocated_bytes(stats).peak);
}

void empty_cache() {
  caching_allocator().emptyCache();
}

} // namespace vdev
