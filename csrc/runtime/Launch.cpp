#include "runtime/Launch.h"

#include "runtime/RuntimeError.h"
#include "runtime/Stream.h"

#include <exception>
#include <memory>
#include <string>

namespace vdev {
namespace {

struct Kernel {
  const char* op_name;
  std::function<void()> body;
};

void run_kernel(void* data) {
  std::unique_ptr<Kernel> kernel(static_cast<Kernel*>(data));
  try {
    kernel->body();
  } catch (const c10::Error& error) {
    vdrtReportLaunchFailure(
        (std::string(kernel->op_name) + ": " + error.what_without_backtrace()).c_str());
  } catch (const std::exception& error) {
    vdrtReportLaunchFailure((std::string(kernel->op_name) + ": " + error.what()).c_str());
  }
}

} // namespace

void launch(const c10::Stream& stream, const char* op_name, std::function<void()> kernel) {
  auto* queued = new Kernel{op_name, std::move(kernel)};
  check_runtime(vdrtLaunchHostFunc(runtime_stream(stream), &run_kernel, queued), op_name);
}

} // namespace vdev
