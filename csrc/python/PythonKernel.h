#pragma once

#include <torch/csrc/utils/pybind.h>

namespace vdev {

// Adds the Python kernel registration functions to torch_vdev._C (see PythonKernel.cpp).
void bind_python_kernels(pybind11::module& module);

} // namespace vdev
