#pragma once

#include "distributed/SharedBoard.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <array>
#include <optional>

namespace vdev {

// One rank's call of a collective, as every rank's call must match it.
struct CollectiveCall {
  // The collective's name, one of the names CallAgreement knows ("all_reduce", ...).
  const char* op;
  // The tensors whose dtype and element counts must be the same on every rank (those
  // gloo sends and receives in matching pieces).
  c10::ArrayRef<at::Tensor> tensors;
  std::optional<int64_t> root;
  std::optional<c10d::ReduceOp::RedOpType> reduce_op;
  // all_to_all: each rank's element counts are its own; only dtypes must match.
  bool element_counts_may_differ = false;
  // send and recv: only two ranks take part, each in its own call; nothing is compared.
  bool point_to_point = false;
};

// Ranks that make different calls (sizes, dtypes, roots, reductions or collectives
// that differ) make gloo abort the process ("Received data size doesn't match
// expected size") or compute garbage silently (dtypes of one size). So before a
// collective reaches gloo, every rank's call is compared with the others': each rank
// gathers a fingerprint of every rank's call, and on a mismatch every rank fails the
// collective with the same error naming each rank's call, with nothing sent yet, so
// the group stays usable. Ranks on one host exchange fingerprints on the group's
// shared-memory board (a few µs); others with one all_gather of a few int64 on the
// same gloo group (a network round trip). The exchange runs on the group's
// communication stream, in call order, and starts before that stream waits for the
// collective's inputs, so a busy stream hides its cost.
class CallAgreement {
 public:
  // The int64 of one fingerprint.
  static constexpr int64_t kFingerprintLength = 14;

  // Takes the fingerprint of `call` (on the calling thread, whose tensors `call` names).
  explicit CallAgreement(const CollectiveCall& call);
  // Posts this rank's fingerprint on `board`, or starts the exchange on `transport` if
  // there is no board.
  void start(c10d::Backend& transport, SharedBoard* board);
  // Waits for every rank's fingerprint (on the board at most `timeout`; gloo times out
  // by itself); throws a c10::Error naming the mismatch.
  void verify(std::chrono::milliseconds timeout);

 private:
  const char* op_;
  std::array<int64_t, kFingerprintLength> mine_;
  int rank_ = 0;
  int ranks_ = 0;
  SharedBoard* board_ = nullptr;
  uint64_t board_exchange_ = 0;
  // The fingerprints gloo gathers, when there is no board.
  at::Tensor gathered_;
  c10::intrusive_ptr<c10d::Work> exchange_;
};

} // namespace vdev
