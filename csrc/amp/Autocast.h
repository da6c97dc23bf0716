#pragma once

#include <torch_vdev/Backend.h>

#include <vector>

namespace vdev {

// An op with a vdev autocast kernel: its name ("aten::" omitted, "name.overload") and
// its cast policy, named as at::autocast::CastPolicy names it ("lower_precision_fp",
// "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote").
struct AutocastOp {
  const char* name;
  const char* policy;
};

// Every op Autocast.cpp registered for AutocastPrivateUse1, in registration order.
VDEV_API const std::vector<AutocastOp>& autocast_ops();

} // namespace vdev
