#pragma once

#include <torch_vdev/Backend.h>

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/Stream.h>

typedef struct vdrtGraph* vdrtGraph_t;
typedef struct vdrtGraphExec* vdrtGraphExec_t;

namespace vdev {

// A vdev graph (torch.accelerator.Graph, torch.vdev.VDEVGraph): capture is the device
// runtime's stream capture. Between capture_begin and capture_end, every kernel
// launched on the current stream (vdev::launch) and on streams that join it through
// events is recorded, not run; allocations on those streams come from the graph's
// private memory pool; a replay queues all recorded kernels on the current stream,
// where they run again on the same memory. Operations that must wait for the stream
// (.item(), .cpu(), synchronize(), ops that run on the calling thread) raise during
// capture and invalidate it, as on CUDA.
class VDEV_API Graph final : public at::GraphImplInterface {
 public:
  explicit Graph(const at::GraphImplArgs& args = {});
  ~Graph() override;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // `pool` {0, 0}: a new private pool; otherwise the pool of another graph
  // (Graph::pool()) or of graph_pool_handle(), shared with it.
  void capture_begin(
      c10::MempoolId_t pool = {0, 0},
      at::GraphCaptureMode capture_mode = at::GraphCaptureMode::Default) override;
  void capture_end() override;
  void instantiate() override;
  void replay() override;
  void reset() override;
  c10::MempoolId_t pool() const override;
  // Keeps the captured graph for debug_dump.
  void enable_debug_mode() override;
  // Writes the captured graph in Graphviz DOT form (one node per recorded kernel).
  void debug_dump(const std::string& path) override;

  // Recorded kernels (copies, memsets and nested graph launches count as one each).
  size_t node_count() const;

 private:
  void release_resources() noexcept;

  const bool keep_graph_;
  bool debug_ = false;
  bool capturing_ = false;
  c10::DeviceIndex device_ = -1;
  c10::StreamId capture_stream_ = 0;
  unsigned long long capture_id_ = 0;
  c10::MempoolId_t pool_{0, 0};
  bool holds_pool_ = false;
  vdrtGraph_t graph_ = nullptr;
  vdrtGraphExec_t exec_ = nullptr;
  size_t node_count_ = 0;
};

// A new pool id for graphs to share (torch.vdev.graph_pool_handle()).
VDEV_API c10::MempoolId_t graph_pool_handle();

} // namespace vdev
