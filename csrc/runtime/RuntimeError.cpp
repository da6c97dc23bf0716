#include "runtime/RuntimeError.h"

#include <torch_vdev/Backend.h>

#include <c10/util/Exception.h>

namespace vdev {

void throw_runtime_error(vdrtError_t error, const char* call) {
  // The message belongs to this thread's last failing call: read it before anything
  // else can fail.
  std::string message = vdrtGetLastErrorMessage();
  vdrtGetLastError();
  if (error == vdrtErrorLaunchFailure) {
    // The kernel's own error, reported where the host synchronized (as CUDA reports
    // an asynchronous kernel error at the next synchronizing call).
    TORCH_CHECK(false, message);
  }
  TORCH_CHECK(
      false, kBackendName, " runtime error in ", call, ": ", vdrtGetErrorString(error), " (",
      vdrtGetErrorName(error), ")", message.empty() ? "" : ": ", message);
}

bool is_capture_error(vdrtError_t error) {
  return error >= vdrtErrorStreamCaptureUnsupported && error <= vdrtErrorCapturedEvent;
}

void throw_capture_error(vdrtError_t error, const char* op_name) {
  std::string message = vdrtGetLastErrorMessage();
  vdrtGetLastError();
  TORCH_CHECK(
      false, op_name, ": ", vdrtGetErrorString(error), " (", vdrtGetErrorName(error), "): ",
      op_name, " runs on the calling thread after waiting for the stream's work, which a "
      "graph capture cannot do (its result would not be replayed). Move it out of the "
      "captured region. Details: ", message);
}

} // namespace vdev
