#include "distributed/CollectiveBackend.h"

#include "aten/Tensor.h"
#include "distributed/ArgumentChecks.h"
#include "runtime/Stream.h"

#include <torch_vdev/vdev.h>

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string_view>
#include <tuple>

namespace vdev {

namespace {

// One collective, as its kernel on the communication stream leaves it: gloo's work
// once gloo finished it (and AVG's and PREMUL_SUM's scaling ran), or the error that
// stopped it (calls that differ between ranks, a peer that left, exited or timed
// out, gloo's own errors).
class CollectiveState {
 public:
  void finish(c10::intrusive_ptr<c10d::Work> transport_work, std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      transport_work_ = std::move(transport_work);
      error_ = std::move(error);
      finished_.store(true, std::memory_order_release);
    }
    finished_changed_.notify_all();
  }

  bool finished() const {
    return finished_.load(std::memory_order_acquire);
  }
  // Blocks the host; false if it has not finished within `timeout` (kNoTimeout: no
  // limit; the collective's own waits time out).
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto done = [this] { return finished(); };
    if (timeout == kNoTimeout) {
      finished_changed_.wait(lock, done);
      return true;
    }
    return finished_changed_.wait_for(lock, timeout, done);
  }
  // The check of the events recorded after the collective's kernel: by then it finished.
  void raise_if_failed() const {
    TORCH_INTERNAL_ASSERT(finished());
    if (error_) {
      std::rethrow_exception(error_);
    }
  }

  // Only once finished():
  const c10::intrusive_ptr<c10d::Work>& transport_work() const {
    return transport_work_;
  }
  const std::exception_ptr& error() const {
    return error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable finished_changed_;
  std::atomic<bool> finished_{false};
  c10::intrusive_ptr<c10d::Work> transport_work_;
  std::exception_ptr error_;
};

// gloo's `error` as "vccl all_reduce failed: <gloo's message>" (the collective's own
// errors, CallAgreement's and SharedBoard's, name the collective already).
std::exception_ptr failure_of(const char* op, const std::exception_ptr& error) {
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    return error;
  }
  return std::make_exception_ptr(c10::Error(
      c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      c10::str(kCollectiveBackendName, " ", op, " failed: ", message)));
}

// The work of one collective, as ProcessGroupNCCL's: its future is a vdev future
// marked complete at the launch, with an event recorded on the communication stream
// after the collective, so waiting for it (the future's wait() and `then`, Work.wait())
// makes the current stream wait and the host goes on. The event carries the
// collective's check (EventCheckScope): a stream that waits for a failed collective
// fails with its error, raised at that stream's next synchronization.
class CollectiveWork final : public c10d::Work {
 public:
  CollectiveWork(
      const char* op, c10d::OpType type, std::shared_ptr<CollectiveState> state,
      std::vector<at::Tensor> results, const c10::Stream& stream, int rank)
      : c10d::Work(rank, type),
        op_(op),
        state_(std::move(state)),
        results_(std::move(results)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::ofTensors(), std::vector<c10::Device>{stream.device()})) {
    c10::StreamGuard on_stream(stream);
    EventCheckScope check("Work.wait", [state = state_] { state->raise_if_failed(); });
    future_->markCompleted(c10::IValue(results_));
  }

  bool isCompleted() override {
    return state_->finished();
  }
  bool isSuccess() const override {
    return state_->finished() && !state_->error();
  }
  std::exception_ptr exception() const override {
    return state_->finished() ? state_->error() : nullptr;
  }
  // The rank a receive from any source got its message from, once it has: the host
  // asks right after wait(), which no longer waits for it.
  int sourceRank() const override {
    wait_on_host(kNoTimeout);
    return state_->transport_work()->sourceRank();
  }
  std::vector<at::Tensor> result() override {
    return results_;
  }
  void synchronize() override {
    blockCurrentStream();
  }
  // As NCCL's: the current stream's later work runs after the collective, and the host
  // returns at once (a barrier's wait, as NCCL's, blocks the host). A collective that
  // has already failed raises here; one that fails later raises at the stream's next
  // synchronization (`.item()`, `torch.vdev.synchronize()`, ...).
  bool wait(std::chrono::milliseconds timeout) override {
    if (retrieveOpType() == c10d::OpType::BARRIER || state_->finished()) {
      return wait_on_host(timeout);
    }
    blockCurrentStream();
    return true;
  }
  void blockCurrentStream() override {
    future_->wait();
  }
  void abort() override {
    if (state_->finished() && state_->transport_work()) {
      state_->transport_work()->abort();
    }
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

 private:
  bool wait_on_host(std::chrono::milliseconds timeout) const {
    TORCH_CHECK(
        state_->wait(timeout), kCollectiveBackendName, " ", op_, ": timed out after ",
        timeout.count(), " ms waiting for the collective");
    if (state_->error()) {
      std::rethrow_exception(state_->error());
    }
    return true;
  }

  const char* op_;
  std::shared_ptr<CollectiveState> state_;
  std::vector<at::Tensor> results_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

std::vector<at::Tensor> aliases(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> result;
  result.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    result.push_back(cpu_alias(tensor));
  }
  return result;
}

std::vector<std::vector<at::Tensor>> aliases(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> result;
  result.reserve(lists.size());
  for (const std::vector<at::Tensor>& list : lists) {
    result.push_back(aliases(list));
  }
  return result;
}

std::vector<at::Tensor> flattened(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> result;
  for (const std::vector<at::Tensor>& list : lists) {
    result.insert(result.end(), list.begin(), list.end());
  }
  return result;
}

// An argument of a collective as gloo gets it: tensors as their CPU aliases, the
// rest (options, ranks, split sizes) as they are.
at::Tensor on_cpu(const at::Tensor& tensor) {
  return cpu_alias(tensor);
}
std::vector<at::Tensor> on_cpu(const std::vector<at::Tensor>& tensors) {
  return aliases(tensors);
}
std::vector<std::vector<at::Tensor>> on_cpu(const std::vector<std::vector<at::Tensor>>& lists) {
  return aliases(lists);
}
template <typename Other>
Other on_cpu(const Other& other) {
  return other;
}

CollectiveCall point_to_point(const char* op, c10::ArrayRef<at::Tensor> tensors) {
  CollectiveCall call{op, tensors};
  call.point_to_point = true;
  return call;
}

bool scaled_sum(const c10d::ReduceOp& op) {
  return op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PREMUL_SUM;
}

// gloo has no AVG or PREMUL_SUM: they run as a SUM whose result `scaling` then scales.
template <typename Options>
Options as_gloo_options(const Options& opts) {
  Options result = opts;
  if (scaled_sum(opts.reduceOp)) {
    result.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return result;
}

// What turns the SUM gloo leaves in `results` into `op`'s result, or nothing if gloo
// ran `op` itself.
std::function<void()> scaling(
    const c10d::ReduceOp& op, int group_size, const std::vector<at::Tensor>& results) {
  if (!scaled_sum(op)) {
    return nullptr;
  }
  std::vector<at::Tensor> aliases = vdev::aliases(results);
  if (op == c10d::ReduceOp::AVG) {
    return [group_size, aliases = std::move(aliases)]() mutable {
      for (at::Tensor& alias : aliases) {
        if (c10::isIntegralType(alias.scalar_type(), /*includeBool=*/true)) {
          alias.div_(group_size, "trunc");  // integer division, as NCCL's average
        } else {
          alias.div_(group_size);
        }
      }
    };
  }
  // PREMUL_SUM
  const auto* factor = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(
      factor != nullptr, kCollectiveBackendName,
      ": PREMUL_SUM needs a factor (torch.distributed._make_nccl_premul_sum)");
  at::Tensor tensor_factor =
      factor->tensor_factor.defined() ? as_cpu(factor->tensor_factor) : at::Tensor();
  double double_factor = factor->double_factor;
  return [tensor_factor, double_factor, aliases = std::move(aliases)]() mutable {
    for (at::Tensor& alias : aliases) {
      if (tensor_factor.defined()) {
        alias.mul_(tensor_factor);
      } else {
        alias.mul_(double_factor);
      }
    }
  };
}

} // namespace

CollectiveBackend::CollectiveBackend(c10::intrusive_ptr<c10d::Backend> transport)
    : c10d::Backend(transport->getRank(), transport->getSize()),
      transport_(std::move(transport)) {
  const char* shared_memory = std::getenv("VDEV_VCCL_SHARED_MEMORY");
  if (size_ > 1 && (shared_memory == nullptr || std::string_view(shared_memory) != "0")) {
    board_ = SharedBoard::connect(*transport_);
  }
  init();
}

const std::string CollectiveBackend::getBackendName() const {
  return kCollectiveBackendName;
}

c10::intrusive_ptr<c10d::Backend::Options> CollectiveBackend::getBackendOptions() {
  return transport_->getBackendOptions();
}

void CollectiveBackend::setTimeout(std::chrono::milliseconds timeout) {
  transport_->setTimeout(timeout);
}

void CollectiveBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  transport_->setGroupUid(pg_uid);
}

void CollectiveBackend::setSequenceNumberForGroup() {
  transport_->setSequenceNumberForGroup();
}

uint64_t CollectiveBackend::getSequenceNumberForGroup() {
  return transport_->getSequenceNumberForGroup();
}

void CollectiveBackend::abort() {
  if (board_) {
    board_->leave();
  }
  transport_->abort();
}

void CollectiveBackend::shutdown() {
  streams_.drain();  // the collectives called before run (or fail)
  if (board_) {
    board_->leave();
  }
  transport_->shutdown();
}

template <typename Method, typename... Args>
std::function<c10::intrusive_ptr<c10d::Work>()> CollectiveBackend::on_gloo(
    Method method, const Args&... args) {
  return [transport = transport_, method, cpu_args = std::make_tuple(on_cpu(args)...)]() mutable {
    return std::apply([&](auto&... cpu) { return (transport.get()->*method)(cpu...); }, cpu_args);
  };
}

c10::DeviceIndex CollectiveBackend::call_device(
    const char* op, std::vector<c10::ArrayRef<at::Tensor>> groups) const {
  std::optional<c10::Device> device;
  for (c10::ArrayRef<at::Tensor> group : groups) {
    for (const at::Tensor& tensor : group) {
      TORCH_CHECK(tensor.defined(), kCollectiveBackendName, " ", op, ": got an undefined tensor");
      TORCH_CHECK(
          is_vdev(tensor), kCollectiveBackendName, " ", op, ": expected ", kBackendName, " tensors but got a tensor on ",
          tensor.device(), "; communicate CPU tensors with a CPU backend (for example "
          "init_process_group(\"cpu:gloo,", kBackendName, ":", kCollectiveBackendName, "\"))");
      if (!device) {
        device = tensor.device();
      }
      TORCH_CHECK(
          tensor.device() == *device, kCollectiveBackendName, " ", op, ": expected all tensors on one device, but found ",
          *device, " and ", tensor.device());
    }
  }
  TORCH_CHECK(device.has_value(), kCollectiveBackendName, " ", op, ": got no tensors");
  std::optional<at::Device> bound = getBoundDeviceId();
  TORCH_CHECK(
      !bound.has_value() || bound->type() != kDeviceType || !bound->has_index() ||
          *bound == *device,
      kCollectiveBackendName, " ", op, ": tensor on ", *device, " but this process group is bound to ", *bound);
  return device->index();
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::run(
    c10::DeviceIndex device, c10d::OpType type, const CollectiveCall& call,
    std::vector<at::Tensor> results, std::function<c10::intrusive_ptr<c10d::Work>()> launch,
    std::function<void()> on_completion) {
  // A captured collective would run once, its graph's replays never.
  TORCH_CHECK(
      !is_stream_capturing(current_stream(device)), kCollectiveBackendName, " ", call.op,
      ": cannot run a collective on a stream that is capturing a graph (", kBackendName,
      " graphs do not capture collectives)");
  // The comparison of the ranks' calls starts before the stream waits for the inputs,
  // so a busy stream hides the exchange.
  struct Agreement {
    explicit Agreement(const CollectiveCall& call) : calls(call) {}
    CallAgreement calls;
    std::exception_ptr error;  // of start()
  };
  std::shared_ptr<Agreement> agreement;
  std::function<void()> start_agreement;
  if (size_ > 1 && !call.point_to_point) {
    agreement = std::make_shared<Agreement>(call);
    start_agreement = [agreement, transport = transport_, board = board_.get()] {
      try {
        agreement->calls.start(*transport, board);
      } catch (...) {
        agreement->error = std::current_exception();
      }
    };
  }
  // Hands the collective to gloo once the calls match; then `complete` waits for gloo.
  struct Launched {
    c10::intrusive_ptr<c10d::Work> transport_work;
    std::exception_ptr error;
  };
  auto launched = std::make_shared<Launched>();
  auto hand_to_gloo = [op = call.op, agreement, transport = transport_, launch = std::move(launch), launched] {
    launched->error = agreement ? agreement->error : nullptr;
    try {
      if (agreement && !launched->error) {
        agreement->calls.verify(transport->getBackendOptions()->timeout);
      }
    } catch (...) {
      launched->error = std::current_exception();
    }
    if (!launched->error) {
      try {
        launched->transport_work = launch();
      } catch (...) {
        launched->error = failure_of(op, std::current_exception());
      }
    }
  };
  auto state = std::make_shared<CollectiveState>();
  auto complete = [op = call.op, launched, on_completion = std::move(on_completion), state] {
    std::exception_ptr error = launched->error;
    if (!error) {
      try {
        launched->transport_work->wait();  // gloo's work times out after the group's timeout itself
        if (on_completion) {
          on_completion();
        }
      } catch (...) {
        error = failure_of(op, std::current_exception());
      }
    }
    state->finish(std::move(launched->transport_work), std::move(error));
  };
  c10::Stream stream = call.point_to_point
      ? streams_.launch_point_to_point(device, call.op, std::move(hand_to_gloo), std::move(complete))
      : streams_.launch(device, call.op, std::move(start_agreement), [hand_to_gloo, complete] {
          hand_to_gloo();
          complete();
        });
  return c10::make_intrusive<CollectiveWork>(call.op, type, std::move(state), std::move(results), stream, rank_);
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const c10::DeviceIndex device = call_device("broadcast", {tensors});
  ArgumentChecks("broadcast", rank_, size_).root(opts.rootRank).length("tensor list", 1, tensors.size()).dtypes(tensors);
  return run(device, c10d::OpType::BROADCAST,
             {"broadcast", tensors, opts.rootRank}, tensors,
             on_gloo(&c10d::Backend::broadcast, tensors, opts));
}

// Reductions run gloo's reduction with `as_gloo_options` and scale their results
// (aliases of the same memory) for AVG and PREMUL_SUM.
c10::intrusive_ptr<c10d::Work> CollectiveBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const c10::DeviceIndex device = call_device("all_reduce", {tensors});
  ArgumentChecks("all_reduce", rank_, size_)
      .dtypes(tensors)
      .reduction(opts.reduceOp, tensors)
      .like(tensors.front(), tensors);
  return run(
      device, c10d::OpType::ALLREDUCE,
      {"all_reduce", tensors, std::nullopt, opts.reduceOp.op_}, tensors,
      on_gloo(&c10d::Backend::allreduce, tensors, as_gloo_options(opts)),
      scaling(opts.reduceOp, size_, tensors));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const c10::DeviceIndex device = call_device("all_reduce_coalesced", {tensors});
  ArgumentChecks("all_reduce_coalesced", rank_, size_)
      .dtypes(tensors)
      .reduction(opts.reduceOp, tensors)
      .same_dtype(tensors.front(), tensors);
  return run(
      device, c10d::OpType::ALLREDUCE_COALESCED,
      {"all_reduce_coalesced", tensors, std::nullopt, opts.reduceOp.op_}, tensors,
      on_gloo(&c10d::Backend::allreduce_coalesced, tensors, as_gloo_options(opts)),
      scaling(opts.reduceOp, size_, tensors));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const c10::DeviceIndex device = call_device("reduce", {tensors});
  ArgumentChecks("reduce", rank_, size_)
      .root(opts.rootRank)
      .length("tensor list", 1, tensors.size())
      .dtypes(tensors)
      .reduction(opts.reduceOp, tensors);
  // Only the root's tensors hold the result.
  return run(
      device, c10d::OpType::REDUCE,
      {"reduce", tensors, opts.rootRank, opts.reduceOp.op_}, tensors,
      on_gloo(&c10d::Backend::reduce, tensors, as_gloo_options(opts)),
      rank_ == opts.rootRank ? scaling(opts.reduceOp, size_, tensors) : nullptr);
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results = flattened(outputs);
  c10::DeviceIndex device = call_device("all_gather", {inputs, results});
  ArgumentChecks check("all_gather", rank_, size_);
  check.not_empty("input tensor list", inputs)
      .length("output tensor list", inputs.size(), outputs.size())
      .dtypes(inputs)
      .like(inputs.front(), inputs);
  for (const std::vector<at::Tensor>& output : outputs) {
    check.length("output tensor list", inputs.size() * size_, output.size()).like(inputs.front(), output);
  }
  return run(device, c10d::OpType::ALLGATHER, {"all_gather", inputs}, std::move(results),
             on_gloo(&c10d::Backend::allgather, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const c10::DeviceIndex device = call_device("all_gather_into_tensor", {output, input});
  ArgumentChecks("all_gather_into_tensor", rank_, size_).dtypes({input}).elements_of(output, "output", input, "input", size_);
  return run(device, c10d::OpType::_ALLGATHER_BASE,
             {"all_gather_into_tensor", input}, {output},
             on_gloo(&c10d::Backend::_allgather_base, output, input, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results = flattened(outputs);
  c10::DeviceIndex device = call_device("all_gather_coalesced", {inputs, results});
  ArgumentChecks check("all_gather_coalesced", rank_, size_);
  check.not_empty("input tensor list", inputs).length("output tensor lists", size_, outputs.size()).dtypes(inputs);
  for (const std::vector<at::Tensor>& output : outputs) {
    check.length("output tensor list", inputs.size(), output.size());
    for (size_t i = 0; i < output.size(); ++i) {
      check.like(inputs[i], {output[i]});
    }
  }
  return run(device, c10d::OpType::ALLGATHER_COALESCED, {"all_gather_coalesced", inputs}, std::move(results),
             on_gloo(&c10d::Backend::allgather_coalesced, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const c10::DeviceIndex device = call_device("all_gather_into_tensor_coalesced", {outputs, inputs});
  ArgumentChecks check("all_gather_into_tensor_coalesced", rank_, size_);
  check.length("output tensor list", inputs.size(), outputs.size()).dtypes(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check.elements_of(outputs[i], "output", inputs[i], "input", size_);
  }
  return run(device, c10d::OpType::COALESCED,
             {"all_gather_into_tensor_coalesced", inputs}, outputs, on_gloo(&c10d::Backend::allgather_into_tensor_coalesced, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> results = flattened(outputs);
  c10::DeviceIndex device = call_device("gather", {inputs, results});
  ArgumentChecks check("gather", rank_, size_);
  check.root(opts.rootRank).length("input tensor list", 1, inputs.size()).dtypes(inputs);
  if (rank_ == opts.rootRank) {
    check.length("output tensor lists", 1, outputs.size())
        .length("output tensor list", size_, outputs.front().size())
        .like(inputs.front(), outputs.front());
  } else {
    check.length("output tensor lists on a rank that is not the root", 0, outputs.size());
  }
  return run(device, c10d::OpType::GATHER, {"gather", inputs, opts.rootRank}, std::move(results),
             on_gloo(&c10d::Backend::gather, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const c10::DeviceIndex device = call_device("scatter", {outputs, flattened(inputs)});
  ArgumentChecks check("scatter", rank_, size_);
  check.root(opts.rootRank).length("output tensor list", 1, outputs.size()).dtypes(outputs);
  if (rank_ == opts.rootRank) {
    check.length("input tensor lists", 1, inputs.size())
        .length("input tensor list", size_, inputs.front().size())
        .like(outputs.front(), inputs.front());
  } else {
    check.length("input tensor lists on a rank that is not the root", 0, inputs.size());
  }
  return run(device, c10d::OpType::SCATTER,
             {"scatter", outputs, opts.rootRank}, outputs,
             on_gloo(&c10d::Backend::scatter, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const c10::DeviceIndex device = call_device("reduce_scatter", {outputs, flattened(inputs)});
  ArgumentChecks("reduce_scatter", rank_, size_)
      .length("output tensor list", 1, outputs.size())
      .dtypes(outputs)
      .reduction(opts.reduceOp, outputs)
      .length("input tensor lists", 1, inputs.size())
      .length("input tensor list", size_, inputs.front().size())
      .like(outputs.front(), inputs.front());
  return run(
      device, c10d::OpType::REDUCE_SCATTER,
      {"reduce_scatter", outputs, std::nullopt, opts.reduceOp.op_}, outputs,
      on_gloo(&c10d::Backend::reduce_scatter, outputs, inputs, as_gloo_options(opts)),
      scaling(opts.reduceOp, size_, outputs));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const c10::DeviceIndex device = call_device("reduce_scatter_tensor", {output, input});
  ArgumentChecks("reduce_scatter_tensor", rank_, size_)
      .dtypes({input})
      .reduction(opts.reduceOp, {input})
      .elements_of(input, "input", output, "output", size_);
  return run(
      device, c10d::OpType::_REDUCE_SCATTER_BASE,
      {"reduce_scatter_tensor", input, std::nullopt, opts.reduceOp.op_}, {output},
      on_gloo(&c10d::Backend::_reduce_scatter_base, output, input, as_gloo_options(opts)),
      scaling(opts.reduceOp, size_, {output}));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const c10::DeviceIndex device = call_device("reduce_scatter_tensor_coalesced", {outputs, inputs});
  ArgumentChecks check("reduce_scatter_tensor_coalesced", rank_, size_);
  check.length("output tensor list", inputs.size(), outputs.size()).dtypes(inputs).reduction(opts.reduceOp, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check.elements_of(inputs[i], "input", outputs[i], "output", size_);
  }
  return run(
      device, c10d::OpType::COALESCED,
      {"reduce_scatter_tensor_coalesced", inputs, std::nullopt, opts.reduceOp.op_}, outputs,
      on_gloo(
            &c10d::Backend::reduce_scatter_tensor_coalesced, outputs, inputs, as_gloo_options(opts)),
      scaling(opts.reduceOp, size_, outputs));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const bool split = !output_split_sizes.empty() || !input_split_sizes.empty();
  const c10::DeviceIndex device = call_device("all_to_all_single", {output, input});
  ArgumentChecks check("all_to_all_single", rank_, size_);
  check.dtypes({input}).splits("input", input_split_sizes, input).splits("output", output_split_sizes, output);
  if (split) {
    check.same_dtype(input, {output});
  } else {
    check.elements_of(output, "output", input, "input", 1);
  }
  return run(device, c10d::OpType::ALLTOALL_BASE,
             {"all_to_all_single", input, std::nullopt, std::nullopt, split}, {output}, on_gloo(
        &c10d::Backend::alltoall_base, output, input, output_split_sizes, input_split_sizes, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  const c10::DeviceIndex device = call_device("all_to_all", {outputs, inputs});
  ArgumentChecks("all_to_all", rank_, size_)
      .length("input tensor list", size_, inputs.size())
      .length("output tensor list", size_, outputs.size())
      .dtypes(inputs)
      .same_dtype(inputs.front(), inputs)
      .same_dtype(inputs.front(), outputs);
  return run(device, c10d::OpType::ALLTOALL,
             {"all_to_all", inputs, std::nullopt, std::nullopt, /*element_counts_may_differ=*/true},
             outputs,
             on_gloo(&c10d::Backend::alltoall, outputs, inputs, opts));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  const c10::DeviceIndex device = call_device("send", {tensors});
  ArgumentChecks("send", rank_, size_).dtypes(tensors);
  return run(device, c10d::OpType::SEND, point_to_point("send", tensors), tensors,
             on_gloo(&c10d::Backend::send, tensors, dst_rank, tag));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  const c10::DeviceIndex device = call_device("recv", {tensors});
  ArgumentChecks("recv", rank_, size_).dtypes(tensors);
  return run(device, c10d::OpType::RECV, point_to_point("recv", tensors), tensors,
             on_gloo(&c10d::Backend::recv, tensors, src_rank, tag));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  const c10::DeviceIndex device = call_device("recv", {tensors});
  ArgumentChecks("recv", rank_, size_).dtypes(tensors);
  return run(device, c10d::OpType::RECVANYSOURCE, point_to_point("recv", tensors), tensors,
             on_gloo(&c10d::Backend::recvAnysource, tensors, tag));
}

c10::intrusive_ptr<c10d::Work> CollectiveBackend::barrier(const c10d::BarrierOptions& opts) {
  // gloo's barrier exchanges no tensors; it still follows the stream of the barrier's
  // device (the current device unless one is given).
  c10::DeviceIndex device =
      opts.device.has_value() && opts.device->type() == kDeviceType && opts.device->has_index()
      ? opts.device->index()
      : current_device();
  c10d::BarrierOptions gloo_opts = opts;
  gloo_opts.device = std::nullopt;
  return run(device, c10d::OpType::BARRIER, {"barrier"}, {}, [transport = transport_, gloo_opts] {
    return transport->barrier(gloo_opts);
  });
}

void CollectiveBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  c10d::BarrierOptions gloo_opts = opts;
  gloo_opts.device = std::nullopt;
  // On the communication stream, after the collectives called before it: gloo numbers
  // its messages in the order of the calls on its group.
  auto done = std::make_shared<std::promise<void>>();
  streams_.launch(current_device(), "monitored_barrier", nullptr,
                  [transport = transport_, gloo_opts, wait_all_ranks, done] {
    try {
      transport->monitoredBarrier(gloo_opts, wait_all_ranks);
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  done->get_future().get();
}

} // namespace vdev
