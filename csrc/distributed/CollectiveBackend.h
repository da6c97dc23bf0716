#pragma once

#include <torch_vdev/Backend.h>

#include "distributed/CallAgreement.h"
#include "distributed/CommunicationStream.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace vdev {

// The c10d backend name of vdev's collectives ("cpu:gloo,vdev:vccl").
inline constexpr char kCollectiveBackendName[] = "vccl";

// vdev's c10d backend: every collective runs on gloo, PyTorch's CPU transport, over
// zero-copy CPU aliases of the vdev tensors (vdev memory is host memory), so gloo
// reads and writes device memory directly. It adds what gloo lacks for a device
// backend: device checks with clear errors, stream order, works and futures whose
// results are the vdev tensors, and the AVG and PREMUL_SUM reductions (a SUM scaled
// when it completes).
//
// As NCCL's, a collective is a kernel on the group's communication stream
// (CommunicationStream.h): the call checks what it can check alone (its tensors,
// devices and arguments), queues the collective behind the work queued so far on the
// current stream and returns. The kernel meets the other ranks' calls (CallAgreement.h),
// hands the collective to gloo and waits for it. The work's future is complete at
// once, with an event on the communication stream: waiting for it, or Work.wait(),
// makes the current stream wait. Errors only communication finds (calls that differ
// between ranks, a peer that left, exited or timed out) fail the collective's work,
// not the communication stream: they raise in the streams that wait for it, at their
// next synchronization (EventCheckScope in runtime/Stream.h), or on the host where
// it waits (Work.wait() of a collective that already failed, a barrier).
class VDEV_API CollectiveBackend final : public c10d::Backend {
 public:
  // `transport` is a ProcessGroupGloo of the same rank and size (made in Python,
  // where gloo's options and devices are chosen as for a gloo group).
  explicit CollectiveBackend(c10::intrusive_ptr<c10d::Backend> transport);

  const std::string getBackendName() const override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setGroupUid(const std::string& pg_uid) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // Whether the ranks compare their calls on a shared-memory board (all on one host)
  // rather than over gloo.
  bool compares_calls_in_shared_memory() const {
    return board_ != nullptr;
  }

 private:
  // Checks the tensors of one call (all vdev, on one device, the group's bound device
  // if it has one) and returns their device; errors name `op` and the problem.
  c10::DeviceIndex call_device(const char* op, std::vector<c10::ArrayRef<at::Tensor>> groups) const;
  // Queues a collective on gloo (`launch`) on the communication stream, to run once
  // every rank's call matches `call` (CallAgreement.h), and returns its work at once:
  // the work's results are `results`, after `on_completion` ran on them.
  c10::intrusive_ptr<c10d::Work> run(
      c10::DeviceIndex device, c10d::OpType type, const CollectiveCall& call,
      std::vector<at::Tensor> results, std::function<c10::intrusive_ptr<c10d::Work>()> launch,
      std::function<void()> on_completion = nullptr);

  // A call of gloo's `method` with the arguments on CPU (on_cpu in the .cpp), to run
  // later on the communication stream: it holds what it needs.
  template <typename Method, typename... Args>
  std::function<c10::intrusive_ptr<c10d::Work>()> on_gloo(Method method, const Args&... args);

  c10::intrusive_ptr<c10d::Backend> transport_;
  // Where the ranks compare their calls when they are all on this host (else nullptr:
  // over gloo).
  std::unique_ptr<SharedBoard> board_;
  // Declared last, so destroyed first: its queued collectives use the board.
  CommunicationStreams streams_;
};

} // namespace vdev
