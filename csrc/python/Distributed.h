#pragma once

#include <torch/csrc/utils/pybind.h>

namespace vdev {

// Adds the c10d backend's constructor and name to torch_vdev._C (see Distributed.cpp).
void bind_distributed(pybind11::module& module);

} // namespace vdev
