// torch_vdev._C: the Python face of libtorch_vdev. Loading it loads the backend
// library, whose static initialisers register everything with PyTorch.
#include "amp/Autocast.h"
#include "aten/Tensor.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native core of the vdev PyTorch backend";
  m.attr("backend_name") = vdev::kBackendName;
#ifdef NDEBUG
  m.attr("build_type") = "Release";
#else
  m.attr("build_type") = "Debug";
#endif

  m.def("init", [] { vdev::lazy_init(); });
  m.def("is_initialized", [] { return vdev::is_initialized(); });
  m.def("is_in_bad_fork", [] { return vdev::is_in_bad_fork(); });
  m.def("device_count", [] { return static_cast<int>(vdev::device_count()); });
  m.def("current_device", [] { return static_cast<int>(vdev::current_device()); });
  m.def("set_device", [](int index) { vdev::set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("exchange_device", [](int index) {
    return static_cast<int>(vdev::exchange_device(static_cast<c10::DeviceIndex>(index)));
  });
  m.def("check_device_index", [](int index) {
    vdev::check_device_index(static_cast<c10::DeviceIndex>(index));
  });
  m.def("memory_capacity", [](int index) {
    return vdev::memory_capacity(static_cast<c10::DeviceIndex>(index));
  });
  m.def("default_generators", [] {
    py::tuple generators(vdev::device_count());
    for (c10::DeviceIndex index = 0; index < vdev::device_count(); ++index) {
      generators[index] = py::reinterpret_steal<py::object>(
          THPGenerator_initDefaultGenerator(vdev::default_generator(index)));
    }
    return generators;
  });
  m.def("autocast_ops", [] {
    py::list ops;
    for (const vdev::AutocastOp& op : vdev::autocast_ops()) {
      ops.append(py::make_tuple(op.name, op.policy));
    }
    return ops;
  });
  m.def("is_vdev_tensor_impl", [](const at::Tensor& tensor) {
    return dynamic_cast<vdev::TensorImpl*>(tensor.unsafeGetTensorImpl()) != nullptr;
  });
}
