// torch_vdev._C: the Python face of libtorch_vdev. Loading it loads the backend
// library, whose static initialisers register everything with PyTorch.
#include "amp/Autocast.h"
#include "aten/BackendMeta.h"
#include "aten/Fallback.h"
#include "aten/SharedMemory.h"
#include "aten/Tensor.h"
#include "graphs/Graph.h"
#include "python/Distributed.h"
#include "python/Inductor.h"
#include "python/MemorySnapshot.h"
#include "python/PythonKernel.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/HostAccess.h"
#include "runtime/Generator.h"
#include "runtime/HostAllocator.h"
#include "runtime/KernelTemporaryCache.h"
#include "runtime/Launch.h"
#include "runtime/Stream.h"

#include <torch/csrc/Event.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/Exceptions.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <thread>

namespace py = pybind11;

namespace {

c10::DeviceIndex to_index(int index) {
  return static_cast<c10::DeviceIndex>(index);
}

py::dict host_memory_stats() {
  const at::HostStats stats = vdev::pinned_host_allocator()->get_stats();
  py::dict result;
  auto add = [&result](const std::string& name, const c10::CachingAllocator::Stat& stat) {
    result[py::str(name + ".current")] = stat.current;
    result[py::str(name + ".peak")] = stat.peak;
    result[py::str(name + ".allocated")] = stat.allocated;
    result[py::str(name + ".freed")] = stat.freed;
  };
  add("allocations", stats.allocations);
  add("allocated_bytes", stats.allocated_bytes);
  add("active_requests", stats.active_requests);
  add("active_bytes", stats.active_bytes);
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  return result;
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native core of the vdev PyTorch backend";
  // c10 errors become the Python exceptions torch raises for them (RuntimeError,
  // ValueError, TypeError, torch.OutOfMemoryError...), without C++ backtraces.
  py::register_local_exception_translator(
      [](std::exception_ptr error) { torch::translate_exception_to_python(error); });
  m.attr("backend_name") = vdev::kBackendName;
#ifdef NDEBUG
  m.attr("build_type") = "Release";
#else
  m.attr("build_type") = "Debug";
#endif

  m.def("init", [] {
    // A forked child must also reset torch's "vdev is initialised" cache, or tensor
    // creation from Python would skip torch.vdev._lazy_init and its error.
    torch::utils::register_fork_handler_for_device_init(vdev::kDeviceType);
    vdev::lazy_init();
  });
  // Python must not start finalizing while an autograd device thread still holds a
  // finished graph task whose release needs the GIL (results with Python objects): the
  // thread would take the GIL during finalization, which aborts the process (an open
  // PyTorch race for every device with autograd threads). A backward on each device,
  // run with the GIL released, returns once that thread is past any earlier graph
  // task; its own graph holds no Python objects.
  m.def("drain_autograd_device_threads", [] {
    pybind11::gil_scoped_release no_gil;
    at::AutoGradMode enable_grad(true);
    for (c10::DeviceIndex index = 0; index < vdev::device_count(); ++index) {
      at::Tensor leaf = at::zeros({1}, at::TensorOptions().device(vdev::make_device(index))).requires_grad_();
      torch::autograd::backward({leaf.sum()});
    }
  });
  m.def("is_initialized", [] { return vdev::is_initialized(); });
  m.def("is_in_bad_fork", [] { return vdev::is_in_bad_fork(); });
  m.def("device_count", [] { return static_cast<int>(vdev::device_count()); });
  // Functions that use the device runtime initialise it first (vdev::lazy_init), so
  // that, as with CUDA, they raise in a process forked after the parent initialised vdev.
  m.def("current_device", [] {
    vdev::lazy_init();
    return static_cast<int>(vdev::current_device());
  });
  m.def("set_device", [](int index) {
    vdev::lazy_init();
    vdev::set_device(to_index(index));
  });
  m.def("exchange_device", [](int index) {
    vdev::lazy_init();
    return static_cast<int>(vdev::exchange_device(to_index(index)));
  });
  m.def("check_device_index", [](int index) { vdev::check_device_index(to_index(index)); });
  m.def("synchronize", [](int index) {
    vdev::lazy_init();
    vdev::synchronize_device(to_index(index));
  });
  // Graphs: torch.accelerator.Graph is vdev::Graph (csrc/graphs/); these serve
  // torch.vdev's mirror of torch.cuda's graph API.
  m.def("_graph_pool_handle", [] { return vdev::graph_pool_handle(); });
  m.def("_is_current_stream_capturing", [] {
    vdev::lazy_init();
    return vdev::is_stream_capturing(vdev::current_stream(vdev::current_device()));
  });
  // torch.cuda._sleep's counterpart: a kernel that keeps the current stream busy, so
  // tests can observe work still queued.
  m.def("_sleep", [](double milliseconds) {
    vdev::lazy_init();
    const c10::DeviceIndex device = vdev::current_device();
    vdev::launch(vdev::current_stream(device), "vdev::_sleep", [milliseconds] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(milliseconds));
    });
  });
  // A kernel that fails on the current stream with `message` (as an index out of range
  // would): tests of how queued failures surface.
  m.def("_fail_in_kernel", [](const std::string& message) {
    vdev::lazy_init();
    vdev::launch(vdev::current_stream(vdev::current_device()), "vdev::_fail_in_kernel", [message] {
      TORCH_CHECK_INDEX(false, message);
    });
  });
  m.def("memory_capacity", [](int index) { return vdev::memory_capacity(to_index(index)); });
  // A host thread waiting for a stream must not hold the GIL: the stream's work may be
  // waiting for a thread that needs it (gloo's threads run Python future callbacks).
  // Not once the interpreter is finalizing: no other thread may take the GIL then.
  vdev::set_host_wait_hook([](void (*wait)(void*), void* context) {
    if (Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0 && PyGILState_Check() != 0) {
      py::gil_scoped_release no_gil;
      wait(context);
    } else {
      wait(context);
    }
  });
  m.def("default_generators", [] {
    py::tuple generators(vdev::device_count());
    for (c10::DeviceIndex index = 0; index < vdev::device_count(); ++index) {
      generators[index] = py::reinterpret_steal<py::object>(
          THPGenerator_initDefaultGenerator(vdev::default_generator(index)));
    }
    return generators;
  });
  vdev::register_direct_fallbacks();
  m.def(
      "has_vdev_kernel",
      [](const std::string& name, const std::string& overload) {
        return vdev::has_vdev_kernel(
            c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str()));
      },
      "True if name.overload has a vdev kernel of its own, not the CPU fallback");
  m.def("fallback_stats", [] { return vdev::fallback_stats(); });
  m.def("reset_fallback_stats", [] { vdev::reset_fallback_stats(); });
  m.def("host_op_stats", [] { return vdev::host_op_stats(); });
  m.def("reset_host_op_stats", [] { vdev::reset_host_op_stats(); });
  // For tests: a CPU tensor a kernel allocated on the current stream's worker, handed
  // to the calling thread (which frees it there).
  m.def("cpu_tensor_made_on_worker", [](int64_t numel) {
    const c10::Stream stream = vdev::current_stream(vdev::current_device());
    auto made = std::make_shared<at::Tensor>();
    vdev::launch(stream, "cpu_tensor_made_on_worker", [made, numel] {
      *made = at::arange(numel, at::TensorOptions().dtype(at::kFloat));
    });
    vdev::synchronize_stream(stream);
    return *made;
  });
  m.def("kernel_temporary_cache_stats", [] {
    const vdev::KernelTemporaryCache::Stats stats = vdev::kernel_temporary_cache().stats();
    return std::map<std::string, int64_t>{
        {"allocations", stats.allocations}, {"reuses", stats.reuses}, {"in_use_blocks", stats.in_use_blocks},
        {"cached_blocks", stats.cached_blocks}, {"cached_bytes", stats.cached_bytes}};
  });

  m.def("current_stream", [](int index) {
    vdev::lazy_init();
    return vdev::current_stream(to_index(index));
  });
  m.def("default_stream", [](int index) {
    vdev::lazy_init();
    return vdev::default_stream(to_index(index));
  });
  // As torch.cuda.set_stream: the stream's device becomes the current device too.
  m.def("set_stream", [](c10::Stream stream) {
    vdev::lazy_init();
    vdev::check_stream(stream);
    vdev::set_device(stream.device_index());
    vdev::exchange_stream(stream);
  });
  // torch.Event.elapsed_time accepts exact torch.Event objects only, not subclasses.
  m.def("elapsed_time", [](py::handle start, py::handle end) {
    TORCH_CHECK_TYPE(
        THPEvent_Check(start.ptr()) && THPEvent_Check(end.ptr()),
        "elapsed_time expects two torch.Event objects");
    const c10::Event& first = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const c10::Event& second = reinterpret_cast<THPEvent*>(end.ptr())->event;
    TORCH_CHECK(
        first.device_type() == vdev::kDeviceType && second.device_type() == vdev::kDeviceType,
        "elapsed_time expects two ", vdev::kBackendName, " events");
    return first.elapsedTime(second);
  });
  m.def("stream_priority", [](c10::Stream stream) { return vdev::stream_priority(stream); });
  m.attr("stream_priority_range") =
      py::make_tuple(vdev::kLowestStreamPriority, vdev::kHighestStreamPriority);

  m.def("host_memory_stats", &host_memory_stats);
  m.def("backend_meta", &vdev::backend_flags);
  m.def("set_backend_meta", &vdev::set_backend_flags);
  m.def("autocast_ops", [] {
    py::list ops;
    for (const vdev::AutocastOp& op : vdev::autocast_ops()) {
      ops.append(py::make_tuple(op.name, op.policy));
    }
    return ops;
  });
  vdev::bind_inductor(m);
  m.def("is_vdev_tensor_impl", &vdev::has_vdev_tensor_impl);
  m.def("share_device_memory", &vdev::share_device_memory);
  m.def("tensor_from_shared_memory", [](int fd, size_t nbytes, int device) {
    return vdev::tensor_from_shared_memory(fd, nbytes, to_index(device));
  });
  vdev::bind_python_kernels(m);
  vdev::bind_distributed(m);
  vdev::bind_memory_snapshot(m);
}
