/* vdev_runtime: the device runtime of the vdev virtual accelerator.
 *
 * This library plays the vendor driver's role (as the CUDA runtime does for CUDA): it
 * knows nothing of PyTorch. Device memory is host RAM handed out under a per-device
 * capacity; each stream is an in-order queue of work run by its own worker thread, so
 * work launched on a stream runs asynchronously to the host and concurrently with
 * other streams. A hardware team replaces this library with its own driver; the
 * PyTorch integration (csrc/runtime/) is written against this API only.
 *
 * Every function returns a vdrtError_t. A failing call also sets this thread's last
 * error (vdrtGetLastError) and a message with the details (vdrtGetLastErrorMessage).
 *
 * Environment:
 *   VDEV_DEVICE_COUNT     number of devices (default 2, at most 64)
 *   VDEV_MEMORY_LIMIT     capacity of each device in bytes (default: physical RAM)
 *   VDEV_LAUNCH_BLOCKING  1: every stream operation completes before its call returns
 *                         (as CUDA_LAUNCH_BLOCKING), so errors surface at the launch
 *   VDEV_WORKER_SPIN_US   how long an idle stream worker polls for work, and a host
 *                         waiting for a stream polls it, before sleeping (default 50;
 *                         0: sleep at once)
 */
#ifndef VDEV_RUNTIME_H
#define VDEV_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vdrtError {
  vdrtSuccess = 0,
  vdrtErrorInvalidValue = 1,         /* a null pointer, a bad size or enum, a bad handle */
  vdrtErrorInvalidDevice = 2,        /* a device index outside 0..count-1 */
  vdrtErrorMemoryAllocation = 3,     /* out of device (capacity) or host memory */
  vdrtErrorNotReady = 4,             /* queries: the work is not complete yet */
  vdrtErrorInvalidConfiguration = 5, /* a VDEV_* environment variable is malformed */
  vdrtErrorLaunchFailure = 6,        /* a launched host function reported a failure */
  vdrtErrorInvalidResourceHandle = 7,/* an event that was never recorded */
  vdrtErrorTimingDisabled = 8,       /* elapsed time of an event created without timing */
  vdrtErrorWouldDeadlock = 9,        /* a stream's own work waiting for that stream */
  /* Stream capture (see "graphs" below); the names and meanings are CUDA's. */
  vdrtErrorStreamCaptureUnsupported = 10, /* not permitted while the stream is capturing */
  vdrtErrorStreamCaptureInvalidated = 11, /* the capture failed at an earlier operation */
  vdrtErrorStreamCaptureMerge = 12,       /* it would merge two separate captures */
  vdrtErrorStreamCaptureUnmatched = 13,   /* ending a capture on a stream that did not begin it */
  vdrtErrorStreamCaptureUnjoined = 14,    /* a forked stream was not joined back before the end */
  vdrtErrorStreamCaptureIsolation = 15,   /* a dependency on work outside the capture */
  vdrtErrorStreamCaptureImplicit = 16,    /* work on another stream while a capture forbids it */
  vdrtErrorStreamCaptureWrongThread = 17, /* ending a global/thread-local capture from another thread */
  vdrtErrorCapturedEvent = 18,            /* querying or waiting for an event recorded in a capture */
  vdrtErrorIllegalState = 19,             /* beginning a capture on a capturing stream */
} vdrtError_t;

/* The error's name ("vdrtErrorNotReady") and a one-line description. */
const char* vdrtGetErrorName(vdrtError_t error);
const char* vdrtGetErrorString(vdrtError_t error);
/* This thread's last error; Get resets it to vdrtSuccess, Peek does not. */
vdrtError_t vdrtGetLastError(void);
vdrtError_t vdrtPeekAtLastError(void);
/* Details of this thread's last failing call (for a launch failure, the message the
 * host function reported); "" if none. Valid until the thread's next failing call. */
const char* vdrtGetLastErrorMessage(void);

/* ---- devices ---- */

typedef struct vdrtDeviceProp {
  char name[64];
  size_t totalGlobalMem;     /* the capacity: VDEV_MEMORY_LIMIT or physical RAM */
  size_t memoryAlignment;    /* every vdrtMalloc pointer is aligned to this */
  int multiProcessorCount;   /* host hardware threads */
  int major, minor;          /* the runtime's version */
  int streamPriorityLeast;   /* 0 */
  int streamPriorityGreatest;/* -3 */
} vdrtDeviceProp;

/* A malformed VDEV_DEVICE_COUNT gives the default count and returns
 * vdrtErrorInvalidConfiguration (the message says why), so callers can warn. */
vdrtError_t vdrtGetDeviceCount(int* count);
vdrtError_t vdrtGetDeviceProperties(vdrtDeviceProp* prop, int device);
/* Blocks until every stream of `device` has completed its work; returns the first
 * launch failure on those streams since they were last synchronized. */
vdrtError_t vdrtDeviceSynchronize(int device);

/* ---- device memory ---- */

/* Allocates `size` bytes of `device`'s memory; vdrtErrorMemoryAllocation past the
 * capacity. A size of 0 gives NULL. */
vdrtError_t vdrtMalloc(int device, void** ptr, size_t size);
/* Frees memory from vdrtMalloc (NULL is a no-op). Like cudaFree, it first waits for
 * the device's streams, so no queued work still uses the memory. */
vdrtError_t vdrtFree(void* ptr);
/* Bytes of `device`'s capacity not allocated, and the capacity. */
vdrtError_t vdrtMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);

/* ---- pinned host memory ---- */

/* Page-aligned host memory that streams may copy to and from asynchronously. */
vdrtError_t vdrtMallocHost(void** ptr, size_t size);
vdrtError_t vdrtFreeHost(void* ptr);

typedef enum vdrtMemoryType {
  vdrtMemoryTypeUnregistered = 0, /* ordinary (pageable) host memory */
  vdrtMemoryTypeHost = 1,         /* pinned host memory */
  vdrtMemoryTypeDevice = 2,
} vdrtMemoryType;

typedef struct vdrtPointerAttributes {
  vdrtMemoryType type;
  int device;        /* for device memory; -1 otherwise */
  void* base;        /* start of the allocation holding the pointer (NULL if unregistered) */
  size_t size;       /* its size */
} vdrtPointerAttributes;

/* Where any address points: inside device memory, inside pinned memory, or elsewhere. */
vdrtError_t vdrtPointerGetAttributes(vdrtPointerAttributes* attributes, const void* ptr);

/* ---- streams ---- */

typedef struct vdrtStream* vdrtStream_t;
typedef struct vdrtEvent* vdrtEvent_t;

/* Each device has a default stream (never destroyed) and any number of created ones.
 * Lower numbers are higher priorities, from 0 (least) to -3; others are clamped. */
vdrtError_t vdrtDeviceGetDefaultStream(int device, vdrtStream_t* stream);
vdrtError_t vdrtStreamCreate(int device, vdrtStream_t* stream, int priority);
/* Waits for the stream's queued work, then destroys it. */
vdrtError_t vdrtStreamDestroy(vdrtStream_t stream);
vdrtError_t vdrtStreamGetPriority(vdrtStream_t stream, int* priority);
vdrtError_t vdrtStreamGetDevice(vdrtStream_t stream, int* device);
/* vdrtSuccess if all queued work is complete, else vdrtErrorNotReady. A launch
 * failure is reported (and cleared) by synchronizing, not by queries. */
vdrtError_t vdrtStreamQuery(vdrtStream_t stream);
/* Blocks until the work queued before the call completes. Returns (and clears) the
 * first launch failure on the stream since its last synchronization. */
vdrtError_t vdrtStreamSynchronize(vdrtStream_t stream);
/* Blocks until the work queued before the call completes, as vdrtStreamSynchronize,
 * but leaves a launch failure on the stream for its next synchronization. */
vdrtError_t vdrtStreamWaitQueued(vdrtStream_t stream);
/* How many work items (launches, copies, memsets, event records and waits) were
 * queued on the stream for its worker so far. Work run at the call (launch blocking)
 * is complete when the call returns and is not counted, nor are captured launches.
 * Two equal counts mean the stream got no new work in between. */
vdrtError_t vdrtStreamGetQueuedCount(vdrtStream_t stream, unsigned long long* count);

/* ---- work on streams ---- */

typedef void (*vdrtHostFn)(void* user_data);

/* Queues fn(user_data) on the stream: it runs on the stream's worker after all work
 * queued before it, and the call returns at once (with VDEV_LAUNCH_BLOCKING=1, once
 * fn has run; its failure is then returned as vdrtErrorLaunchFailure). */
vdrtError_t vdrtLaunchHostFunc(vdrtStream_t stream, vdrtHostFn fn, void* user_data);
/* As vdrtLaunchHostFunc, and the runtime owns `user_data`: it calls destroy(user_data)
 * once the work can no longer run (after it ran; when the graph recording it is
 * destroyed; at once if the launch fails). `name` (a string that outlives the work, or
 * NULL) names the work in graph dumps. A launch on a capturing stream is recorded, so
 * `fn` may run many times (once per graph launch). */
vdrtError_t vdrtLaunchHostFuncOwned(
    vdrtStream_t stream, vdrtHostFn fn, void* user_data, vdrtHostFn destroy, const char* name);
/* Called by a running host function: marks its launch failed with `message`. The
 * failure surfaces at the stream's next synchronization; later work still runs. Returns
 * vdrtErrorInvalidValue outside a host function. */
vdrtError_t vdrtReportLaunchFailure(const char* message);
/* Called by a running host function: sets *runs_again to 1 when this run is a graph
 * launch's run of work the graph recorded (it runs again at the graph's next launch),
 * else to 0 (the work's only run: it may use up what its user_data owns). Returns
 * vdrtErrorInvalidValue outside a host function. */
vdrtError_t vdrtHostFuncRunsAgain(int* runs_again);
/* Called by a running host function: sets *on_worker to 1 when it runs on a stream's
 * worker thread, which runs nothing but launched work, else to 0 (launch blocking: it
 * runs on the launching thread). Returns vdrtErrorInvalidValue outside a host function. */
vdrtError_t vdrtHostFuncOnWorker(int* on_worker);

typedef enum vdrtMemcpyKind {
  vdrtMemcpyHostToHost = 0,
  vdrtMemcpyHostToDevice = 1,
  vdrtMemcpyDeviceToHost = 2,
  vdrtMemcpyDeviceToDevice = 3,
} vdrtMemcpyKind;

/* Copies `count` bytes; the device side(s) named by `kind` must lie inside device
 * memory. The synchronous forms wait for `device`'s default stream, copy on the
 * calling thread and return when done; the Async forms queue the copy on the stream. */
vdrtError_t vdrtMemcpy(void* dst, const void* src, size_t count, vdrtMemcpyKind kind);
vdrtError_t vdrtMemcpyAsync(
    void* dst, const void* src, size_t count, vdrtMemcpyKind kind, vdrtStream_t stream);
vdrtError_t vdrtMemset(void* ptr, int value, size_t count);
vdrtError_t vdrtMemsetAsync(void* ptr, int value, size_t count, vdrtStream_t stream);

/* ---- events ---- */

enum { vdrtEventDefault = 0, vdrtEventDisableTiming = 1 };

vdrtError_t vdrtEventCreate(vdrtEvent_t* event, unsigned flags);
/* An event may be destroyed while a record of it is still queued. */
vdrtError_t vdrtEventDestroy(vdrtEvent_t event);
/* The event completes when the stream's worker reaches this point, and with timing
 * enabled takes the time then. Recording again replaces the previous point. */
vdrtError_t vdrtEventRecord(vdrtEvent_t event, vdrtStream_t stream);
/* vdrtSuccess if the last record completed (or the event was never recorded),
 * else vdrtErrorNotReady. */
vdrtError_t vdrtEventQuery(vdrtEvent_t event);
/* Blocks until the last record completes; reports the recording stream's launch failure. */
vdrtError_t vdrtEventSynchronize(vdrtEvent_t event);
/* Milliseconds between two completed records, as timed on their streams. */
vdrtError_t vdrtEventElapsedTime(float* milliseconds, vdrtEvent_t start, vdrtEvent_t end);
/* Work queued on `stream` after this call waits for the event's last record (made
 * before this call) to complete. A never-recorded event is no wait. */
vdrtError_t vdrtStreamWaitEvent(vdrtStream_t stream, vdrtEvent_t event);

/* ---- graphs: stream capture ----
 *
 * As CUDA's stream capture: between vdrtStreamBeginCapture and vdrtStreamEndCapture,
 * work launched on the stream (host functions, async copies and memsets, graph
 * launches) is recorded into a graph instead of queued. An event recorded on a
 * capturing stream and waited for by another stream makes that stream join the
 * capture (fork); its work must be joined back to the origin stream (the origin waits
 * for an event recorded on it) before the capture ends. vdrtGraphInstantiate makes an
 * executable graph; vdrtGraphLaunch queues one run of all its recorded work, in an
 * order that respects the captured dependencies, as one item of the stream's work.
 *
 * Operations that would wait for or observe captured work return
 * vdrtErrorStreamCaptureUnsupported (synchronizing or querying a capturing stream,
 * synchronizing its device, synchronous copies and memsets on the device) or
 * vdrtErrorCapturedEvent (querying or synchronizing an event recorded in a capture).
 * The capture mode decides which other operations are forbidden while a capture is
 * under way: with Global, work launched on or synchronizing a stream that is not
 * capturing, from any thread, while the capture runs; with ThreadLocal, the same from
 * the capturing thread only; with Relaxed, nothing more. Such an operation returns
 * vdrtErrorStreamCaptureImplicit. Any of these errors invalidates the captures
 * concerned: their later launches return vdrtErrorStreamCaptureInvalidated and their
 * vdrtStreamEndCapture returns it too (and ends them, so the streams work again). */

typedef struct vdrtGraph* vdrtGraph_t;
typedef struct vdrtGraphExec* vdrtGraphExec_t;

typedef enum vdrtStreamCaptureMode {
  vdrtStreamCaptureModeGlobal = 0,
  vdrtStreamCaptureModeThreadLocal = 1,
  vdrtStreamCaptureModeRelaxed = 2,
} vdrtStreamCaptureMode;

typedef enum vdrtStreamCaptureStatus {
  vdrtStreamCaptureStatusNone = 0,
  vdrtStreamCaptureStatusActive = 1,
  vdrtStreamCaptureStatusInvalidated = 2,
} vdrtStreamCaptureStatus;

vdrtError_t vdrtStreamBeginCapture(vdrtStream_t stream, vdrtStreamCaptureMode mode);
/* Ends the capture `stream` began; *graph receives the recorded graph (NULL on error). */
vdrtError_t vdrtStreamEndCapture(vdrtStream_t stream, vdrtGraph_t* graph);
/* Whether the stream takes part in a capture (began it or joined it); never an error
 * for the capture. `id` (may be NULL) receives the capture's process-unique id (0: none). */
vdrtError_t vdrtStreamGetCaptureInfo(
    vdrtStream_t stream, vdrtStreamCaptureStatus* status, unsigned long long* id);
/* The number of recorded work items. */
vdrtError_t vdrtGraphGetNodeCount(vdrtGraph_t graph, size_t* count);
/* Writes the graph in Graphviz DOT form: one node per recorded item (named by its
 * launch), one edge per dependency. */
vdrtError_t vdrtGraphDebugDotPrint(vdrtGraph_t graph, const char* path);
/* The graph's recorded work is shared with executable graphs made from it: each of
 * them may outlive the others. */
vdrtError_t vdrtGraphDestroy(vdrtGraph_t graph);
vdrtError_t vdrtGraphInstantiate(vdrtGraphExec_t* exec, vdrtGraph_t graph);
/* Queues one run of the graph's work on `stream` (recorded, if `stream` is capturing).
 * As with CUDA, a launch runs after the previous launch of `exec` completes, on
 * whichever stream that was queued. */
vdrtError_t vdrtGraphLaunch(vdrtGraphExec_t exec, vdrtStream_t stream);
/* Queued launches still run; the recorded work is destroyed after the last one. */
vdrtError_t vdrtGraphExecDestroy(vdrtGraphExec_t exec);

/* ---- launch-blocking switch ---- */

/* Starts from VDEV_LAUNCH_BLOCKING; settable at run time (tests, debuggers). */
vdrtError_t vdrtSetLaunchBlocking(int blocking);
int vdrtGetLaunchBlocking(void);

/* ---- host waits ----
 *
 * Every wait that blocks the calling thread on queued work (stream, event and device
 * synchronizations, synchronous copies and memsets, stream destruction, launch-blocking
 * launches) runs as hook(wait, context): the hook must call wait(context) once, and may
 * do anything around it (an embedding interpreter releases its global lock, which the
 * queued work may need). Waits that would not block (the work is complete) do not call
 * it. NULL restores the default (wait(context) alone). */
typedef void (*vdrtHostWaitHook)(void (*wait)(void* context), void* context);
vdrtError_t vdrtSetHostWaitHook(vdrtHostWaitHook hook);

#ifdef __cplusplus
}
#endif

#endif /* VDEV_RUNTIME_H */
