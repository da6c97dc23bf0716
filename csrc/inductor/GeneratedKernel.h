#pragma once

// The run of a kernel Inductor generated for vdev (torch_vdev/_inductor.py), as
// torch.profiler sees it: a CPU operator named after the kernel, as Inductor's
// Triton launches are on CUDA, and the device activity it launched
// (vdev_kernel[<kernel>]), correlated with that operator.
//
// Python wrappers reach it through torch_vdev._C.launch_kernel, C++ wrappers
// (cpp_wrapper, AOTInductor) through the C functions below, which vdev's C shim
// looks up at run time (c_shim_vdev.h), so generated code links with libtorch alone.

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
}
