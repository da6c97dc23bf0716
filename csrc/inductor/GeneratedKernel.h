#pragma once

// The run of a kernel Inductor generated for vdev (torch_vdev/_inductor.py), as
// torch.profiler sees it: a CPU operator named after the kernel, as Inductor's
// Triton launches are on CUDA, and the device activity it launched
// (vdev_kernel[<kernel>]), correlated with that operator.
//
// Kernels of Python wrappers and of C++ wrappers (cpp_wrapper, AOTInductor) are launched
// on the device's current stream, as every queued op is (so graph captures record
// them): their Python bindings, compiled with each kernel, and vdev's C shim
// (c_shim_vdev.h) look up and call torch_vdev_launch_generated_kernel at run time, so
// generated code links with libtorch at most.

#include <torch_vdev/Backend.h>

extern "C" {
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
