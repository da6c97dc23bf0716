#include "python/Distributed.h"

#include "distributed/CollectiveBackend.h"

namespace vdev {

void bind_distributed(pybind11::module& module) {
  module.attr("collective_backend_name") = kCollectiveBackendName;
  // Takes and returns torch's own c10d Backend objects (torch_vdev._C shares torch's
  // pybind11 internals, see CMakeLists.txt).
  module.def(
      "make_collective_backend",
      [](c10::intrusive_ptr<c10d::Backend> transport) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<CollectiveBackend>(std::move(transport));
      },
      pybind11::arg("transport"),
      // Setting up the group's shared-memory board waits for gloo's threads.
      pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def(
      "compares_calls_in_shared_memory",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        auto* collective_backend = dynamic_cast<CollectiveBackend*>(backend.get());
        TORCH_CHECK(collective_backend != nullptr, "not a ", kCollectiveBackendName, " backend");
        return collective_backend->compares_calls_in_shared_memory();
      },
      pybind11::arg("backend"));
}

} // namespace vdev
