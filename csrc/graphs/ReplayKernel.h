#pragma once

#include <atomic>
#include <vector>

namespace c10 {
class IValue;
class OperatorHandle;
} // namespace c10

namespace vdev {

// What a graph's recorded kernel works out once and every replay reuses: a graph's
// memory is static, so its CPU kernel runs on the same aliases, sizes and dtypes each
// time. For ATen's structured pointwise ops this is the TensorIterator their meta
// function builds (type promotion, broadcasting, dimension coalescing: most of a small
// op's cost); a replay then runs only the op's loop.
class PreparedKernel {
 public:
  virtual ~PreparedKernel() = default;
  virtual void run() const = 0;
};

// A recorded kernel's PreparedKernel, made at its first replay. Replays of one graph
// may run at once (launches of two instantiations), so it is made once
// whichever runs first and is read-only afterwards.
class ReplayKernel {
 public:
  ReplayKernel() = default;
  // Moved only before any run (into the kernel that launches it).
  ReplayKernel(ReplayKernel&& other) noexcept;
  ReplayKernel& operator=(ReplayKernel&&) = delete;
  ReplayKernel(const ReplayKernel&) = delete;
  ReplayKernel& operator=(const ReplayKernel&) = delete;
  ~ReplayKernel();

  // Runs `cpu_op` on `arguments` (its stack: the kernel's CPU aliases, which live as
  // long as the kernel) prepared, and returns true; false, having run nothing, when
  // the op has no prepared form or preparing it raised (its CPU kernel then runs as
  // at launch, raising the error itself).
  bool run(const c10::OperatorHandle& cpu_op, const std::vector<c10::IValue>& arguments);

 private:
  std::atomic<const PreparedKernel*> prepared_{nullptr};
};

} // namespace vdev
