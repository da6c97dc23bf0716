#pragma once

// The run of a kernel Inductor generated for vdev (torch_vdev/_inductor.py), as
// torch.profiler sees it: a CPU operator named after the kernel, as Inductor's
// Triton launches are on CUDA, and the device activity it launched
// (vdev_kernel[<kernel>]), correlated with that operator.
//
// Kernels of Python wrappers are launched on the device's current stream, as every
// queued op is (so graph captures record them): their Python bindings, compiled with
// each kernel, call torch_vdev_launch_generated_kernel. C++ wrappers (cpp_wrapper,
// AOTInductor) run their kernels on the calling thread in the stream's order, inside
// the begin/end pair below. vdev's C shim and the bindings look these C functions up
// at run time (c_shim_vdev.h), so generated code links with libtorch at most.

#include "profiler/DeviceActivity.h"

#include <ATen/record_function.h>
#include <c10/core/Device.h>

#include <optional>

namespace vdev {

class GeneratedKernelScope {
 public:
  // `name` may be temporary: it is copied when profiling.
  VDEV_API GeneratedKernelScope(const char* name, c10::DeviceIndex device);
  GeneratedKernelScope(const GeneratedKernelScope&) = delete;
  GeneratedKernelScope& operator=(const GeneratedKernelScope&) = delete;

  // False when no profiler observes the run (nothing was recorded).
  bool profiled() const {
    return operator_.has_value() || activity_.has_value();
  }

 private:
  std::optional<at::RecordFunction> operator_;
  std::optional<profiler::ActivityScope> activity_;
};

} // namespace vdev

extern "C" {
// A GeneratedKernelScope for the kernel about to run, or null when nothing profiles it.
VDEV_API void* torch_vdev_generated_kernel_begin(const char* name, int device);
VDEV_API void torch_vdev_generated_kernel_end(void* scope);

// The name of a generated kernel as a string that lives as long as the process (the
// name its launches are reported under).
VDEV_API const char* torch_vdev_generated_kernel_name(const char* name);
// Launches `run(arguments)` on `device`'s current stream, under a CPU operator named
// `name` (from torch_vdev_generated_kernel_name); `destroy(arguments)` runs once the
// launch is done with them (with the graph, if a capture recorded it). Null once
// launched, else the error (valid until this thread's next launch).
VDEV_API const char* torch_vdev_launch_generated_kernel(
    const char* name, int device, void (*run)(void*), void* arguments, void (*destroy)(void*));
}
