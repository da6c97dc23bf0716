#pragma once

#include <c10/util/Exception.h>

namespace vdev {

// While alive, warnings raised on this thread are dropped. vdev runs a CPU kernel or
// choice only to ask it a question (does it take these inputs?); the user's own call
// gives its warnings when it runs.
class DiscardingWarnings {
 public:
  DiscardingWarnings() : guard_(&handler_) {}
  DiscardingWarnings(const DiscardingWarnings&) = delete;
  DiscardingWarnings& operator=(const DiscardingWarnings&) = delete;

 private:
  class Discard final : public c10::WarningHandler {
   public:
    void process(const c10::Warning& /*warning*/) override {}
  };
  Discard handler_;
  c10::WarningUtils::WarningHandlerGuard guard_;
};

} // namespace vdev
