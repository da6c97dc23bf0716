#pragma once

#include <vdev_runtime.h>

#include <c10/macros/Macros.h>

namespace vdev {

// Turns a failed call of the device runtime into a c10::Error naming the call, the
// runtime's error and its message (for a launch failure, the failing kernel's own).
[[noreturn]] void throw_runtime_error(vdrtError_t error, const char* call);

inline void check_runtime(vdrtError_t error, const char* call) {
  if (C10_UNLIKELY(error != vdrtSuccess)) {
    throw_runtime_error(error, call);
  }
}

} // namespace vdev
