#pragma once

// What Inductor's generated Python wrappers call on vdev (torch_vdev/_inductor.py).

#include <torch/csrc/utils/pybind.h>

namespace vdev {

void bind_inductor(pybind11::module& module);

} // namespace vdev
