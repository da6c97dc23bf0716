#include "python/Inductor.h"

#include "inductor/GeneratedKernel.h"
#include "runtime/Device.h"
#include "runtime/Stream.h"

#include <ATen/ops/empty_strided.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>

namespace vdev {
namespace {

// Generated kernels run on the calling thread, each once the work queued before it
// on the device's current stream is complete; the GIL is let go only to wait.
void wait_for_current_stream(c10::DeviceIndex device) {
  if (!query_stream(current_stream(device))) {
    pybind11::gil_scoped_release no_gil;
    synchronize_current_stream(device);
  }
}

// launch_kernel(name, device, kernel, *args): runs a generated kernel on `device`'s
// current stream's order, as the profiler sees a kernel run (GeneratedKernel.h). A
// vectorcall function: generated wrappers call it once per kernel.
PyObject* launch_kernel(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(nargs >= 3, "launch_kernel(name, device, kernel, *args) takes at least 3 arguments");
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) {
    return nullptr;
  }
  const long device = PyLong_AsLong(args[1]);
  if (device == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  wait_for_current_stream(static_cast<c10::DeviceIndex>(device));
  GeneratedKernelScope scope(name, static_cast<c10::DeviceIndex>(device));
  return PyObject_Vectorcall(args[2], args + 3, static_cast<size_t>(nargs - 3), nullptr);
  END_HANDLE_TH_ERRORS
}

PyMethodDef launch_kernel_def{
    "launch_kernel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&launch_kernel)),
    METH_FASTCALL, "Runs a kernel Inductor generated for vdev: launch_kernel(name, device, kernel, *args)."};

} // namespace

void bind_inductor(pybind11::module& module) {
  module.add_object(
      "launch_kernel",
      pybind11::reinterpret_steal<pybind11::object>(PyCFunction_NewEx(&launch_kernel_def, nullptr, nullptr)));
  // The allocations of Inductor's generated Python wrappers: torch.empty_strided on a
  // vdev device without torch's Python argument parsing, like torch's
  // _empty_strided_cpu for CPU buffers.
  module.def("empty_strided", [](c10::IntArrayRef sizes, c10::IntArrayRef strides, pybind11::handle dtype, int index) {
    TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "dtype must be a torch.dtype");
    const auto options = at::TensorOptions()
                             .dtype(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type)
                             .device(make_device(static_cast<c10::DeviceIndex>(index)));
    return at::empty_strided(sizes, strides, options);
  });
}

} // namespace vdev
