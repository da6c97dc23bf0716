#include "runtime/Launch.h"
#include "runtime/LaunchWithoutThreadState.h"

#include "profiler/DeviceActivity.h"
#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <exception>
#include <optional>
#include <string>

namespace vdev {
namespace {

struct Kernel {
  const char* op_name;
  std::function<void()> body;
  // The launching thread's state (dispatch keys excluded below autograd, inference
  // mode, ...): the kernel runs as it would have on that thread, as the autograd
  // engine's threads run their work. Empty for kernels that do not dispatch.
  std::optional<at::ThreadLocalState> launching_thread;
  // Taken while the profiler records (else empty): what the kernel's device activity
  // is attributed to.
  profiler::LaunchOrigin origin;
};

// A kernel may run many times: once per launch of a graph that recorded it.
void run_kernel(void* data) {
  auto* kernel = static_cast<Kernel*>(data);
  // A stream's worker is a thread of the runtime: its kernels use as many intra-op
  // threads as torch.set_num_threads asked for (OpenMP's count is per thread), as
  // the autograd engine's threads do.
  thread_local const bool intra_op_threads_set = (at::init_num_threads(), true);
  (void)intra_op_threads_set;
  try {
    std::optional<at::ThreadLocalStateGuard> state;
    if (kernel->launching_thread) {
      state.emplace(*kernel->launching_thread);
    }
    std::optional<profiler::LaunchedWork> launched;
    if (C10_UNLIKELY(kernel->origin.thread_id != 0)) {
      launched.emplace(kernel->origin);
    }
    kernel->body();
  } catch (const c10::Error& error) {
    vdrtReportLaunchFailure(
        (std::string(kernel->op_name) + ": " + error.what_without_backtrace()).c_str());
  } catch (const std::exception& error) {
    vdrtReportLaunchFailure((std::string(kernel->op_name) + ": " + error.what()).c_str());
  }
}

void destroy_kernel(void* data) {
  delete static_cast<Kernel*>(data);
}

void queue(const c10::Stream& stream, const char* op_name, std::function<void()> kernel,
           std::optional<at::ThreadLocalState> launching_thread) {
  auto* queued = new Kernel{
      op_name, std::move(kernel), std::move(launching_thread),
      profiler::recording() ? profiler::launch_origin(stream) : profiler::LaunchOrigin()};
  // The runtime owns the kernel from here (destroying it if the launch fails).
  check_runtime(
      vdrtLaunchHostFuncOwned(runtime_stream(stream), &run_kernel, queued, &destroy_kernel, op_name),
      op_name);
}

} // namespace

void launch(const c10::Stream& stream, const char* op_name, std::function<void()> kernel) {
  queue(stream, op_name, std::move(kernel), at::ThreadLocalState());
}

void launch_without_thread_state(const c10::Stream& stream, const char* op_name, std::function<void()> kernel) {
  queue(stream, op_name, std::move(kernel), std::nullopt);
}

} // namespace vdev
