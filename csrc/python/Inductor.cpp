#include "python/Inductor.h"

#include "runtime/Device.h"

#include <ATen/ops/empty_strided.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <c10/util/SmallVector.h>

namespace vdev {
namespace {

// A tuple of ints (sizes or strides) as int64s; false with a Python error set if not.
bool int_tuple(PyObject* tuple, c10::SmallVector<int64_t, 8>& values) {
  if (!PyTuple_Check(tuple)) {
    PyErr_SetString(PyExc_TypeError, "empty_strided: sizes and strides must be tuples of ints");
    return false;
  }
  const Py_ssize_t length = PyTuple_GET_SIZE(tuple);
  values.resize(static_cast<size_t>(length));
  for (Py_ssize_t i = 0; i < length; ++i) {
    values[static_cast<size_t>(i)] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (values[static_cast<size_t>(i)] == -1 && PyErr_Occurred()) {
      return false;
    }
  }
  return true;
}

// empty_strided(sizes, strides, dtype, device): the allocation of a buffer by a
// generated wrapper, torch.empty_strided on a vdev device without torch's argument
// parsing, as torch's _empty_strided_cpu is for CPU buffers.
PyObject* empty_strided(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(nargs == 4, "empty_strided(sizes, strides, dtype, device) takes 4 arguments");
  c10::SmallVector<int64_t, 8> sizes;
  c10::SmallVector<int64_t, 8> strides;
  if (!int_tuple(args[0], sizes) || !int_tuple(args[1], strides)) {
    return nullptr;
  }
  TORCH_CHECK_TYPE(THPDtype_Check(args[2]), "empty_strided: dtype must be a torch.dtype");
  const long device = PyLong_AsLong(args[3]);
  if (device == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  const auto options = at::TensorOptions()
                           .dtype(reinterpret_cast<THPDtype*>(args[2])->scalar_type)
                           .device(make_device(static_cast<c10::DeviceIndex>(device)));
  return THPVariable_Wrap(at::empty_strided(sizes, strides, options));
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"empty_strided", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&empty_strided)),
     METH_FASTCALL, "A vdev buffer of a generated wrapper: empty_strided(sizes, strides, dtype, device)."},
};

} // namespace

void bind_inductor(pybind11::module& module) {
  for (PyMethodDef& method : methods) {
    module.add_object(
        method.ml_name,
        pybind11::reinterpret_steal<pybind11::object>(PyCFunction_NewEx(&method, nullptr, nullptr)));
  }
}

} // namespace vdev
