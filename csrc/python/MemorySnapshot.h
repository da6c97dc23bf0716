#pragma once

#include <torch/csrc/utils/pybind.h>

namespace vdev {

// torch_vdev._C's memory history and snapshot functions (torch.vdev.memory's
// _record_memory_history, _snapshot) and allocator settings.
void bind_memory_snapshot(pybind11::module& module);

} // namespace vdev
