#pragma once

#include <c10/core/Allocator.h>

namespace vdev {

// Page-locked ("pinned") host memory. vdev's device memory is host RAM already, so
// pinning changes no copy speed; the allocator keeps track of its blocks so that
// is_pinned() and pin_memory() behave as they do with CUDA.
c10::Allocator* pinned_host_allocator();
bool is_pinned_pointer(const void* ptr);

} // namespace vdev
