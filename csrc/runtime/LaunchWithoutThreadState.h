#pragma once

#include <torch_vdev/Backend.h>

#include <c10/core/Stream.h>

#include <functional>

namespace vdev {

// launch() (Launch.h) of a kernel that does not dispatch (a kernel Inductor generated):
// it runs without the launching thread's state, which costs a capture per launch and
// a restore per run, and whose Python objects (dispatch modes, hooks) the stream's
// worker would need the GIL to release.
VDEV_API void launch_without_thread_state(const c10::Stream& stream, const char* op_name, std::function<void()> kernel);

} // namespace vdev
