#include "runtime/Launch.h"

#include "runtime/Allocator.h"
#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <ATen/Parallel.h>

#include <exception>
#include <optional>
#include <string>

namespace vdev {
namespace {

// Dispatch keys whose kernels reach Python or functorch's per-thread layer stack: a
// kernel never dispatches to them (they were handled on the launching thread).
const c10::DispatchKeySet kHandledOnHost = c10::python_ks |
    c10::DispatchKeySet(
        {c10::DispatchKey::PythonDispatcher, c10::DispatchKey::PreDispatch,
         c10::DispatchKey::FuncTorchDynamicLayerFrontMode, c10::DispatchKey::FuncTorchDynamicLayerBackMode,
         c10::DispatchKey::FuncTorchVmapMode});

// Puts the launching thread's dispatch keys and autograd modes in place while a kernel
// runs. A stream's worker runs nothing but kernels, each of which puts its own state in
// place, so there the state stays for the next kernel, which mostly needs the same (a
// graph's kernels all do); a launch-blocking kernel runs on the launching thread
// itself, so its state is restored.
class LaunchingThreadState {
 public:
  LaunchingThreadState(const detail::Kernel& kernel, bool on_worker)
      : dispatch_keys_(c10::impl::tls_local_dispatch_key_set()),
        autograd_(c10::AutogradState::get_tls_state()),
        restore_(!on_worker) {
    if (!(dispatch_keys_.included_ == kernel.dispatch_keys.included_ &&
          dispatch_keys_.excluded_ == kernel.dispatch_keys.excluded_)) {
      c10::impl::_force_tls_local_dispatch_key_set(kernel.dispatch_keys);
    }
    if (!same(autograd_, kernel.autograd)) {
      c10::AutogradState::set_tls_state(kernel.autograd);
    }
  }
  ~LaunchingThreadState() {
    if (restore_) {
      c10::impl::_force_tls_local_dispatch_key_set(dispatch_keys_);
      c10::AutogradState::set_tls_state(autograd_);
    }
  }
  LaunchingThreadState(const LaunchingThreadState&) = delete;
  LaunchingThreadState& operator=(const LaunchingThreadState&) = delete;

 private:
  static bool same(const c10::AutogradState& a, const c10::AutogradState& b) {
    return a.get_grad_mode() == b.get_grad_mode() && a.get_fw_grad_mode() == b.get_fw_grad_mode() &&
        a.get_inference_mode() == b.get_inference_mode() &&
        a.get_multithreading_enabled() == b.get_multithreading_enabled() &&
        a.get_view_replay_enabled() == b.get_view_replay_enabled();
  }

  const c10::impl::LocalDispatchKeySet dispatch_keys_;
  const c10::AutogradState autograd_;
  const bool restore_;
};

bool on_worker() {
  int on_worker = 0;
  check_runtime(vdrtHostFuncOnWorker(&on_worker), "vdrtHostFuncOnWorker");
  return on_worker != 0;
}

bool only_run() {
  int runs_again = 1;
  check_runtime(vdrtHostFuncRunsAgain(&runs_again), "vdrtHostFuncRunsAgain");
  return runs_again == 0;
}

// A kernel may run many times: once per launch of a graph that recorded it.
void run_kernel(void* data) {
  auto* kernel = static_cast<detail::Kernel*>(data);
  // A stream's worker is a thread of the runtime: its kernels use as many intra-op
  // threads as torch.set_num_threads asked for (OpenMP's count is per thread), as
  // the autograd engine's threads do.
  thread_local const bool intra_op_threads_set = (at::init_num_threads(), true);
  (void)intra_op_threads_set;
  try {
    const bool worker = on_worker();
    if (worker) {
      serve_cpu_allocations_from_kernel_temporary_cache();
    }
    LaunchingThreadState state(*kernel, worker);
    std::optional<profiler::LaunchedWork> launched;
    if (C10_UNLIKELY(kernel->origin.thread_id != 0)) {
      launched.emplace(kernel->origin);
    }
    kernel->run(only_run());
  } catch (const c10::NotImplementedError& error) {
    if (kernel->unsupported != nullptr) {
      kernel->unsupported->thrown = true;
      kernel->unsupported->message = error.what_without_backtrace();
    } else {
      vdrtReportLaunchFailure((std::string(kernel->op_name) + ": " + error.what_without_backtrace()).c_str());
    }
  } catch (const c10::Error& error) {
    vdrtReportLaunchFailure(
        (std::string(kernel->op_name) + ": " + error.what_without_backtrace()).c_str());
  } catch (const std::exception& error) {
    vdrtReportLaunchFailure((std::string(kernel->op_name) + ": " + error.what()).c_str());
  }
}

void destroy_kernel(void* data) {
  delete static_cast<detail::Kernel*>(data);
}

} // namespace

c10::DispatchKeySet keys_handled_on_host() {
  return kHandledOnHost;
}

namespace detail {
bool launch_kernel(const c10::Stream& stream, const char* op_name, std::unique_ptr<Kernel> kernel, bool check_support) {
  kernel->op_name = op_name;
  c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();
  keys.excluded_ = keys.excluded_ | kHandledOnHost;
  kernel->dispatch_keys = keys;
  kernel->autograd = c10::AutogradState::get_tls_state();
  if (profiler::recording()) {
    kernel->origin = profiler::launch_origin(stream);
  }
  std::shared_ptr<Kernel::Unsupported> unsupported;
  if (check_support && !is_stream_capturing(stream)) {
    unsupported = std::make_shared<Kernel::Unsupported>();
    kernel->unsupported = unsupported;
  }
  vdrtStream_t queue = runtime_stream(stream);
  // The runtime owns the kernel from here (destroying it if the launch fails).
  check_runtime(vdrtLaunchHostFuncOwned(queue, &run_kernel, kernel.release(), &destroy_kernel, op_name), op_name);
  if (unsupported == nullptr) {
    return false;
  }
  // The worker wrote `unsupported` before the wait saw the kernel complete.
  check_runtime(vdrtStreamWaitQueued(queue), op_name);
  TORCH_CHECK_NOT_IMPLEMENTED(!unsupported->thrown, op_name, ": ", unsupported->message);
  return true;
}
} // namespace detail

} // namespace vdev
