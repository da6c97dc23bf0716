#pragma once

#include <vdev_runtime.h>

#include <c10/macros/Macros.h>

namespace vdev {

// Turns a failed call of the device runtime into a c10::Error naming the call, the
// runtime's error and its message (for a launch failure, the failing kernel's own).
[[noreturn]] void throw_runtime_error(vdrtError_t error, const char* call);

// The errors of operations a graph capture does not permit (see vdev_runtime.h).
bool is_capture_error(vdrtError_t error);
// For such an error raised by `op_name`, which runs on the calling thread and so must
// wait for its stream: says so in CUDA's words and how to proceed.
[[noreturn]] void throw_capture_error(vdrtError_t error, const char* op_name);

inline void check_runtime(vdrtError_t error, const char* call) {
  if (C10_UNLIKELY(error != vdrtSuccess)) {
    throw_runtime_error(error, call);
  }
}

} // namespace vdev
