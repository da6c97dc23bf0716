// Python kernels: a Python function registered as vdev's kernel for one op.
//
// The kernel is a boxed C++ kernel at the PrivateUse1 key: below autograd, so the op's
// derivative formula still applies, and reached by vdev tensors only. The dispatcher
// keeps every kernel registered for a key in a list and runs the newest, so a Python
// kernel takes precedence over vdev's native kernel or the fallback, and deregistering
// it brings back whichever kernel it replaced.
//
// Two kinds of Python kernel:
//  - CPU-alias kernels (torch_vdev.kernel) run inside run_on_cpu_aliases: the function
//    receives CPU tensors aliasing device memory, its CPU allocations come from device
//    memory, and its results are adopted as vdev tensors without copying;
//  - device-tensor kernels (default decompositions) receive the vdev tensors themselves
//    and call ops on them.
// Either kind may return NotImplemented to hand the call to the op's CPU kernel. In-place
// and out= results are the written arguments; a result sharing an argument's memory is
// copied unless the op is a view.
// Arguments reach the function as torch.library passes them: positional arguments,
// keyword-only arguments as keywords, arguments left at their default omitted.
#include "python/PythonKernel.h"

#include "aten/Fallback.h"
#include "aten/Tensor.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SafePyObject.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <algorithm>
#include <optional>

namespace py = pybind11;

namespace vdev {
namespace {

enum class KernelInputs { CpuAliases, DeviceTensors };

// Dtypes, layouts and memory formats travel as integers in IValues but are torch
// objects in Python.
enum class PythonType { Plain, Dtype, Layout, MemoryFormat };

PythonType python_type_of(const c10::Argument& argument) {
  c10::TypePtr type = argument.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) {
    type = optional->getElementType();
  }
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return PythonType::Dtype;
    case c10::TypeKind::LayoutType:
      return PythonType::Layout;
    case c10::TypeKind::MemoryFormatType:
      return PythonType::MemoryFormat;
    default:
      return PythonType::Plain;
  }
}

bool is_written(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

bool is_default(const c10::Argument& argument, const c10::IValue& value) {
  const auto& default_value = argument.default_value();
  return default_value.has_value() && !value.isTensor() && *default_value == value;
}

class PythonKernel final : public c10::OperatorKernel {
 public:
  PythonKernel(const c10::OperatorHandle& op, py::object function, KernelInputs inputs)
      : name_(c10::toString(op.operator_name())),
        function_(function.release().ptr(), getPyInterpreter()),
        inputs_(inputs) {
    const auto& arguments = op.schema().arguments();
    keyword_only_start_ = arguments.size();
    while (keyword_only_start_ > 0 && arguments[keyword_only_start_ - 1].kwarg_only()) {
      --keyword_only_start_;
    }
    for (const c10::Argument& argument : arguments) {
      python_types_.push_back(python_type_of(argument));
    }
    for (const c10::Argument& result : op.schema().returns()) {
      std::optional<size_t> written;
      for (size_t i = 0; i < arguments.size() && is_written(result); ++i) {
        if (is_written(arguments[i]) &&
            arguments[i].alias_info()->beforeSets() == result.alias_info()->beforeSets()) {
          written = i;
        }
      }
      written_argument_of_result_.push_back(written);
    }
  }

  void operator()(
      const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
    if (inputs_ == KernelInputs::CpuAliases) {
      run_on_cpu_aliases(op, stack, [this, &op](torch::jit::Stack* cpu_stack) {
        if (!call(op, cpu_stack)) {
          op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu_stack);
        }
      });
    } else if (!call(op, stack)) {
      cpu_fallback(op, stack);
    }
  }

 private:
  // Replaces the op's arguments at the top of `stack` with the Python function's
  // results; returns false, leaving the stack as it was, if the function returned
  // NotImplemented.
  bool call(const c10::OperatorHandle& op, torch::jit::Stack* stack) const {
    const c10::FunctionSchema& schema = op.schema();
    const size_t first = stack->size() - schema.arguments().size();
    py::gil_scoped_acquire gil;
    py::object result = call_function(schema, *stack, first);
    if (result.is(py::handle(Py_NotImplemented))) {
      return false;
    }
    std::vector<c10::IValue> results = to_results(schema, *stack, first, result);
    stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
    for (c10::IValue& value : results) {
      stack->push_back(std::move(value));
    }
    return true;
  }

  py::object call_function(
      const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) const {
    const auto& arguments = schema.arguments();
    size_t positional_end = keyword_only_start_;
    while (positional_end > 0 &&
           is_default(arguments[positional_end - 1], stack[first + positional_end - 1])) {
      --positional_end;
    }
    py::tuple args(positional_end);
    for (size_t i = 0; i < positional_end; ++i) {
      args[i] = to_python(i, stack[first + i]);
    }
    py::dict kwargs;
    for (size_t i = keyword_only_start_; i < arguments.size(); ++i) {
      if (!is_default(arguments[i], stack[first + i])) {
        kwargs[py::str(arguments[i].name())] = to_python(i, stack[first + i]);
      }
    }
    PyObject* result = PyObject_Call(function_.ptr(getPyInterpreter()), args.ptr(), kwargs.ptr());
    if (result == nullptr) {
      py::error_already_set error;
      name_op_in(error);
      throw error;
    }
    return py::reinterpret_steal<py::object>(result);
  }

  py::object to_python(size_t argument_index, const c10::IValue& value) const {
    if (value.isNone()) {
      return py::none();
    }
    switch (python_types_[argument_index]) {
      case PythonType::Dtype:
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPDtype(value.toScalarType())));
      case PythonType::Layout:
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPLayout(value.toLayout())));
      case PythonType::MemoryFormat:
        return py::reinterpret_borrow<py::object>(
            torch::utils::getTHPMemoryFormat(value.toMemoryFormat()));
      case PythonType::Plain:
        break;
    }
    return torch::jit::toPyObject(value);
  }

  // The exception keeps its type and message; a note (PEP 678, shown with the
  // traceback) names the op whose kernel raised it.
  void name_op_in(py::error_already_set& error) const {
    py::object exception = error.value();
    py::object notes = py::getattr(exception, "__notes__", py::none());
    if (notes.is_none()) {
      notes = py::list();
      exception.attr("__notes__") = notes;
    }
    if (py::isinstance<py::list>(notes)) {
      notes.cast<py::list>().append(
          py::str("raised by the Python kernel for " + name_ + " on " + kBackendName));
    }
  }

  std::vector<c10::IValue> to_results(
      const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first,
      const py::object& result) const {
    const auto& returns = schema.returns();
    const bool all_written = std::all_of(
        written_argument_of_result_.begin(), written_argument_of_result_.end(),
        [](const std::optional<size_t>& index) { return index.has_value(); });
    std::vector<py::handle> values;
    if (returns.size() == 1 || (all_written && result.is_none())) {
      values.assign(returns.size(), result);
    } else {
      TORCH_CHECK_TYPE(
          returns.size() > 1 && py::isinstance<py::tuple>(result) &&
              py::len(result) == returns.size(),
          "The Python kernel for ", name_, " returned ", describe(result), "; its schema ",
          schema, " returns ",
          returns.empty() ? std::string("nothing, so it must return None")
                          : "a tuple of " + std::to_string(returns.size()));
      for (py::handle value : result.cast<py::tuple>()) {
        values.push_back(value);
      }
    }
    std::vector<c10::IValue> results;
    for (size_t i = 0; i < returns.size(); ++i) {
      if (const auto& written = written_argument_of_result_[i]) {
        // In-place and out= results are the written arguments themselves.
        const c10::IValue& argument = stack[first + *written];
        TORCH_CHECK(
            values[i].is_none() || is_same_tensor(values[i], argument), "The Python kernel for ",
            name_, " returned a new tensor for its in-place or out= argument '",
            schema.arguments()[*written].name(),
            "': write into that argument and return it (or None)");
        results.push_back(argument);
      } else {
        results.push_back(to_result(
            returns[i], values[i],
            c10::ArrayRef<c10::IValue>(stack).slice(first, schema.arguments().size())));
      }
    }
    return results;
  }

  c10::IValue to_result(
      const c10::Argument& declared, py::handle value,
      c10::ArrayRef<c10::IValue> arguments) const {
    c10::IValue result;
    try {
      result = torch::jit::toIValue(value, declared.real_type());
    } catch (const std::exception&) {
      TORCH_CHECK_TYPE(
          false, "The Python kernel for ", name_, " returned ", describe(value),
          " where its schema returns ", declared.real_type()->str(),
          " (torch.from_numpy turns a numpy array into a tensor)");
    }
    // Only view ops may return an argument's memory: a result of any other op is a
    // new tensor, which autograd and in-place ops rely on.
    const bool may_alias = declared.alias_info() != nullptr;
    if (result.isTensor()) {
      result = checked_tensor(result.toTensor(), may_alias, arguments);
    } else if (result.isList()) {
      c10::impl::GenericList list = result.toList();
      for (size_t i = 0; i < list.size(); ++i) {
        if (list.get(i).isTensor()) {
          list.set(i, checked_tensor(list.get(i).toTensor(), may_alias, arguments));
        }
      }
    }
    return result;
  }

  at::Tensor checked_tensor(
      const at::Tensor& tensor, bool may_alias, c10::ArrayRef<c10::IValue> arguments) const {
    if (!tensor.defined()) {
      return tensor;
    }
    check_device(tensor);
    return !may_alias && aliases_any(tensor, arguments) ? tensor.clone() : tensor;
  }

  static bool aliases_any(const at::Tensor& tensor, c10::ArrayRef<c10::IValue> arguments) {
    auto aliases = [&tensor](const c10::IValue& value) {
      return value.isTensor() && value.toTensor().defined() && tensor.is_alias_of(value.toTensor());
    };
    for (const c10::IValue& argument : arguments) {
      if (aliases(argument)) {
        return true;
      }
      if (argument.isList()) {
        const auto& elements = argument.toListRef();
        if (std::any_of(elements.begin(), elements.end(), aliases)) {
          return true;
        }
      }
    }
    return false;
  }

  void check_device(const at::Tensor& tensor) const {
    if (inputs_ == KernelInputs::CpuAliases) {
      TORCH_CHECK(
          tensor.device().is_cpu(), "The Python kernel for ", name_, " returned a tensor on ",
          tensor.device(), ": it receives CPU tensors and must return CPU tensors");
    } else {
      TORCH_CHECK(
          is_vdev(tensor), "The Python kernel for ", name_, " returned a tensor on ",
          tensor.device(), " where a ", kBackendName, " tensor was expected");
    }
  }

  static bool is_same_tensor(py::handle value, const c10::IValue& argument) {
    return argument.isTensor() && THPVariable_Check(value.ptr()) &&
        THPVariable_Unpack(value.ptr()).is_same(argument.toTensor());
  }

  static std::string describe(py::handle value) {
    return "a value of type " +
        py::str(py::type::handle_of(value).attr("__qualname__")).cast<std::string>();
  }

  std::string name_;
  c10::SafePyObject function_;
  KernelInputs inputs_;
  size_t keyword_only_start_;
  std::vector<PythonType> python_types_;
  std::vector<std::optional<size_t>> written_argument_of_result_;
};

// Overriding a kernel on purpose: the dispatcher's warning about it is noise.
class IgnoreWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

// A registered Python kernel; remove() brings back the kernel it replaced. While it
// lasts, its op family's direct fallbacks step aside (see DirectFallbacksWithdrawn).
class KernelRegistration {
 public:
  KernelRegistration(
      std::unique_ptr<vdev::DirectFallbacksWithdrawn> withdrawn, c10::RegistrationHandleRAII handle)
      : withdrawn_(std::move(withdrawn)), handle_(std::move(handle)) {}

  // The kernel goes first: the direct fallbacks come back below no other vdev kernel.
  void remove() {
    handle_.reset();
    withdrawn_.reset();
  }

 private:
  std::unique_ptr<vdev::DirectFallbacksWithdrawn> withdrawn_;
  std::optional<c10::RegistrationHandleRAII> handle_;
};

std::unique_ptr<KernelRegistration> register_kernel(
    const std::string& name, const std::string& overload, py::object function,
    KernelInputs inputs) {
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  c10::OperatorHandle op = dispatcher.findSchemaOrThrow(name.c_str(), overload.c_str());
  IgnoreWarnings ignore_warnings;
  c10::WarningUtils::WarningHandlerGuard guard(&ignore_warnings);
  auto withdrawn = std::make_unique<vdev::DirectFallbacksWithdrawn>(op);
  return std::make_unique<KernelRegistration>(std::move(withdrawn), dispatcher.registerImpl(
      op.operator_name(), c10::DispatchKey::PrivateUse1,
      c10::KernelFunction::makeFromBoxedFunctor(
          std::make_unique<PythonKernel>(op, std::move(function), inputs)),
      std::nullopt, nullptr, "Python kernel registered by torch_vdev"));
}

} // namespace

void bind_python_kernels(py::module& module) {
  py::class_<KernelRegistration>(module, "KernelRegistration")
      .def("remove", &KernelRegistration::remove);
  module.def(
      "register_cpu_alias_kernel",
      [](const std::string& name, const std::string& overload, py::object function) {
        return register_kernel(name, overload, std::move(function), KernelInputs::CpuAliases);
      },
      "Registers `function` as vdev's kernel for name.overload; it receives CPU aliases");
  module.def(
      "register_device_kernel",
      [](const std::string& name, const std::string& overload, py::object function) {
        return register_kernel(name, overload, std::move(function), KernelInputs::DeviceTensors);
      },
      "Registers `function` as vdev's kernel for name.overload; it receives vdev tensors");
}

} // namespace vdev
