#include "graphs/Graph.h"

#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>

namespace vdev {
namespace {

// Pool ids as CUDA's: graphs' own pools are {n, 0}, handles for sharing {0, n}.
std::atomic<c10::CaptureId_t> last_graph_pool{0};
std::atomic<c10::CaptureId_t> last_shared_pool{0};

vdrtStreamCaptureMode runtime_mode(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::Default:
    case at::GraphCaptureMode::Global:
      return vdrtStreamCaptureModeGlobal;
    case at::GraphCaptureMode::ThreadLocal:
      return vdrtStreamCaptureModeThreadLocal;
    case at::GraphCaptureMode::Relaxed:
      return vdrtStreamCaptureModeRelaxed;
  }
  TORCH_CHECK(false, "Unknown graph capture mode ", static_cast<int>(mode));
}

c10::Stream stream_at(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), id);
}

} // namespace

Graph::Graph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}

Graph::~Graph() {
  release_resources();
}

void Graph::capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode capture_mode) {
  lazy_init();
  TORCH_CHECK(
      !capturing_ && graph_ == nullptr && exec_ == nullptr,
      "This graph instance already owns a captured graph. To capture a new graph, create a "
      "new instance or call reset() first.");
  const c10::DeviceIndex device = current_device();
  const c10::Stream stream = current_stream(device);
  TORCH_CHECK(
      stream.id() != 0, kBackendName, " graphs must be captured on a non-default stream (as "
      "CUDA graphs). Capture on a side stream: `with torch.", kBackendName, ".graph(g):`, or "
      "`with torch.", kBackendName, ".stream(torch.", kBackendName, ".Stream()), g:`. A graph "
      "may be replayed on any stream, the default one included.");
  TORCH_CHECK(
      pool.first == 0 || pool.second == 0,
      "A graph pool id has one zero half: use Graph.pool() or graph_pool_handle()");
  check_runtime(
      vdrtStreamBeginCapture(runtime_stream(stream), runtime_mode(capture_mode)),
      "vdrtStreamBeginCapture");
  pool_ = pool.first == 0 && pool.second == 0 ? c10::MempoolId_t{++last_graph_pool, 0} : pool;
  device_ = device;
  capture_stream_ = stream.id();
  capture_id_ = stream_capture_id(device, stream.id());
  begin_allocate_to_pool(device, pool_, capture_id_);
  holds_pool_ = true;
  capturing_ = true;
}

void Graph::capture_end() {
  TORCH_CHECK(capturing_, "capture_end() called without a matching capture_begin()");
  const c10::Stream stream = stream_at(device_, capture_stream_);
  TORCH_CHECK(
      current_stream(device_) == stream,
      "capture_end() must be called on the stream capture_begin() was called on (",
      stream, "); the current stream is ", current_stream(device_));
  vdrtGraph_t graph = nullptr;
  const vdrtError_t status = vdrtStreamEndCapture(runtime_stream(stream), &graph);
  if (status == vdrtErrorStreamCaptureWrongThread) {
    check_runtime(status, "vdrtStreamEndCapture");  // still capturing: nothing changed
  }
  capturing_ = false;
  end_allocate_to_pool(device_, capture_id_);
  capture_id_ = 0;
  if (status != vdrtSuccess) {
    // A failed capture keeps no graph; the memory its allocations took is released
    // with the pool when the tensors go.
    reset();
    check_runtime(status, "vdrtStreamEndCapture");
  }
  graph_ = graph;
  check_runtime(vdrtGraphGetNodeCount(graph_, &node_count_), "vdrtGraphGetNodeCount");
  if (!keep_graph_) {
    instantiate();
    if (!debug_) {
      vdrtGraphDestroy(graph_);
      graph_ = nullptr;
    }
  }
}

void Graph::instantiate() {
  TORCH_CHECK(!capturing_, "instantiate() called during capture: call capture_end() first");
  TORCH_CHECK(
      graph_ != nullptr, "instantiate() needs a captured graph: capture one first (and pass "
      "keep_graph=True to instantiate it yourself)");
  if (exec_ != nullptr) {
    vdrtGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  check_runtime(vdrtGraphInstantiate(&exec_, graph_), "vdrtGraphInstantiate");
}

void Graph::replay() {
  TORCH_CHECK(
      !capturing_ && (exec_ != nullptr || graph_ != nullptr),
      "Called Graph.replay() without a preceding successful capture.");
  if (exec_ == nullptr) {
    instantiate();  // keep_graph: instantiated at the first replay
  }
  check_runtime(
      vdrtGraphLaunch(exec_, runtime_stream(current_stream(device_))), "vdrtGraphLaunch");
}

void Graph::reset() {
  release_resources();
}

void Graph::release_resources() noexcept {
  if (capturing_) {
    // Destroyed mid-capture: end it, discarding what it recorded.
    vdrtGraph_t graph = nullptr;
    if (vdrtStreamEndCapture(runtime_stream(stream_at(device_, capture_stream_)), &graph) ==
        vdrtSuccess) {
      vdrtGraphDestroy(graph);
    }
    vdrtGetLastError();
    end_allocate_to_pool(device_, capture_id_);
    capturing_ = false;
  }
  if (exec_ != nullptr) {
    vdrtGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  if (graph_ != nullptr) {
    vdrtGraphDestroy(graph_);
    graph_ = nullptr;
  }
  node_count_ = 0;
  if (holds_pool_) {
    // The recorded kernels (and the tensors they hold) are gone: the pool's free
    // memory returns to the runtime once queued replays are done (vdrtFree waits).
    release_pool(device_, pool_);
    holds_pool_ = false;
  }
}

c10::MempoolId_t Graph::pool() const {
  TORCH_CHECK(
      holds_pool_, "Called Graph.pool() without a capture: the pool is chosen at capture_begin()");
  return pool_;
}

void Graph::enable_debug_mode() {
  debug_ = true;
}

void Graph::debug_dump(const std::string& path) {
  TORCH_CHECK(
      graph_ != nullptr, "debug_dump() needs the captured graph: call enable_debug_mode() (or "
      "pass keep_graph=True) before capturing");
  check_runtime(vdrtGraphDebugDotPrint(graph_, path.c_str()), "vdrtGraphDebugDotPrint");
}

size_t Graph::node_count() const {
  return node_count_;
}

c10::MempoolId_t graph_pool_handle() {
  return {0, ++last_shared_pool};
}

namespace {
// The registry's key is the backend's name (in upper case), so it is registered once
// the name is (registering the same name again is harmless).
struct RegisterGraphImpl {
  RegisterGraphImpl() {
    c10::register_privateuse1_backend(kBackendName);
    at::GraphImplRegistry()->Register(
        c10::DeviceTypeName(kDeviceType, /*lower_case=*/false),
        [](const at::GraphImplArgs& args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<Graph>(args);
        });
  }
} register_graph_impl;
} // namespace

} // namespace vdev
