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

} // namespace vdev
