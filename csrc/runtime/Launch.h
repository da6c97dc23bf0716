#pragma once

#include "profiler/DeviceActivity.h"

#include <torch_vdev/Backend.h>

#include <c10/core/AutogradState.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace vdev {

namespace detail {
// A launched kernel: its body and what running it on a stream's worker needs.
class Kernel {
 public:
  virtual ~Kernel() = default;
  // `only_run`: no graph recorded the kernel, so this run is its last and may use up
  // what the body owns; a recorded kernel runs once per launch of its graph.
  virtual void run(bool only_run) = 0;

  const char* op_name = nullptr;
  // The launching thread's dispatch keys and autograd modes (the keys excluded below
  // autograd, inference mode, autocast): the CPU kernel runs in them as it would have
  // on that thread. Nothing Python-side (modes, torch-function state) is taken: the
  // worker never touches Python objects, so it never needs the GIL.
  c10::impl::LocalDispatchKeySet dispatch_keys{c10::impl::PODLocalDispatchKeySet{}};
  c10::AutogradState autograd{false, false, false, false};
  // Set while the profiler records: what the kernel's device activity is attributed to.
  profiler::LaunchOrigin origin;
  // Set by a launch that waits to learn whether the kernel supports its arguments'
  // dtypes: the kernel's c10::NotImplementedError goes here instead of to the stream.
  struct Unsupported {
    bool thrown = false;
    std::string message;
  };
  std::shared_ptr<Unsupported> unsupported;
};

template <class Body>
class KernelOf final : public Kernel {
 public:
  // Built from the launched callable itself: a body is moved once, into here.
  template <class Given>
  explicit KernelOf(Given&& body) : body_(std::forward<Given>(body)) {}

  void run(bool only_run) override {
    if constexpr (std::is_invocable_v<Body&, bool>) {
      body_(only_run);
    } else {
      body_();
    }
  }

 private:
  Body body_;
};

// Queues `kernel` (owned by the runtime from here) on `stream`; with `check_support`,
// as launch_checking_support. Returns whether it learned the kernel ran.
VDEV_API bool launch_kernel(
    const c10::Stream& stream, const char* op_name, std::unique_ptr<Kernel> kernel, bool check_support = false);
} // namespace detail

// The dispatch keys a launched kernel never reaches (Python's, functorch's layers): the
// launching thread handled them.
c10::DispatchKeySet keys_handled_on_host();

// Queues `body` on `stream`: it runs on the stream's worker thread after the
// stream's earlier work, and this returns once it is queued (with
// VDEV_LAUNCH_BLOCKING=1, once it has run, raising its error). An exception the
// body throws surfaces at the stream's next synchronization as a c10::Error naming
// `op_name`. The body must own what it uses (the host goes on meanwhile) but device
// memory, which, as on CUDA, it does not keep alive: the caching allocator orders a
// freed block's reuse after the work queued on its stream (record_stream for others).
// Every launch goes through here. On a stream capturing a graph the body is
// recorded instead (csrc/graphs/): it then runs once per replay, and is destroyed
// with the graph, so what it owns lives as long as the graph. A body callable with a
// bool is told whether its run is its only one (detail::Kernel::run).
//
// Work that runs on the calling thread instead (ops that read or write device memory
// from the host) first waits for the current stream of its device
// through synchronize_for_host_op (HostAccess.h), as CUDA's host-side accesses do.
template <class Body>
void launch(const c10::Stream& stream, const char* op_name, Body&& body) {
  detail::launch_kernel(
      stream, op_name,
      std::make_unique<detail::KernelOf<std::decay_t<Body>>>(std::forward<Body>(body)));
}

// As launch, for the first launch of a kernel with arguments of dtypes it has not run
// with (SupportedDtypes.h): unless the stream captures a graph, waits until the body
// ran. If the body threw c10::NotImplementedError (its CPU kernel's AT_DISPATCH does
// not cover a dtype), raises it here naming `op_name`, as CUDA raises an unsupported
// dtype at the call, and the stream never sees it; the body's other errors stay the
// stream's, raised at its next synchronization. Returns true if the body ran without
// that error (the dtypes are then known to run), false while capturing.
template <class Body>
bool launch_checking_support(const c10::Stream& stream, const char* op_name, Body&& body) {
  return detail::launch_kernel(
      stream, op_name,
      std::make_unique<detail::KernelOf<std::decay_t<Body>>>(std::forward<Body>(body)),
      /*check_support=*/true);
}

} // namespace vdev
