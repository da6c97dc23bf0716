#include "distributed/CallAgreement.h"

#include "distributed/CollectiveBackend.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/hash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>

namespace vdev {

namespace {

// The collectives whose calls are compared; a fingerprint names one by its position.
constexpr std::array<const char*, 16> kCollectives = {
    "broadcast", "all_reduce", "all_reduce_coalesced", "reduce", "all_gather",
    "all_gather_into_tensor", "all_gather_coalesced", "all_gather_into_tensor_coalesced",
    "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all_single", "all_to_all", "barrier"};

// A call's fingerprint: int64 fields, -1 where a field does not apply. The fields up
// to kCompared must be equal on every rank; the sizes of the first tensor are there to
// name the call in errors.
enum Field : int64_t {
  kCollective, kRoot, kReduceOp, kDtype, kTensorCount, kElementCount, kElementCountsHash,
  kCompared,
  kDims = kCompared, kFirstSize,
};
constexpr int64_t kShownDims = 6;
constexpr int64_t kFingerprintLength = CallAgreement::kFingerprintLength;
static_assert(kFirstSize + kShownDims == kFingerprintLength);
static_assert(kFingerprintLength <= SharedBoard::kMaxRecordLength);

// What differs when a field does, in "their ... differ".
constexpr std::array<const char*, kCompared> kFieldMeanings = {
    "collectives", "roots", "reduce ops", "dtypes", "tensor counts", "sizes", "sizes"};

int64_t collective_index(const char* op) {
  for (size_t i = 0; i < kCollectives.size(); ++i) {
    if (std::strcmp(kCollectives[i], op) == 0) {
      return static_cast<int64_t>(i);
    }
  }
  TORCH_INTERNAL_ASSERT(false, "no fingerprint for collective ", op);
}

const char* reduce_op_name(int64_t op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown reduce op";
  }
}

void fill_fingerprint(int64_t* fingerprint, const CollectiveCall& call) {
  std::fill(fingerprint, fingerprint + kFingerprintLength, -1);
  fingerprint[kCollective] = collective_index(call.op);
  if (call.root) {
    fingerprint[kRoot] = *call.root;
  }
  if (call.reduce_op) {
    fingerprint[kReduceOp] = *call.reduce_op;
  }
  fingerprint[kTensorCount] = static_cast<int64_t>(call.tensors.size());
  if (call.tensors.empty()) {
    return;
  }
  const at::Tensor& first = call.tensors.front();
  fingerprint[kDtype] = static_cast<int64_t>(first.scalar_type());
  if (!call.element_counts_may_differ) {
    int64_t elements = 0;
    size_t counts_hash = 0;
    for (const at::Tensor& tensor : call.tensors) {
      elements += tensor.numel();
      counts_hash = c10::hash_combine(counts_hash, static_cast<size_t>(tensor.numel()));
    }
    fingerprint[kElementCount] = elements;
    // Non-negative, so never the -1 of a field that does not apply.
    fingerprint[kElementCountsHash] = static_cast<int64_t>(counts_hash >> 1);
  }
  fingerprint[kDims] = first.dim();
  for (int64_t d = 0; d < std::min<int64_t>(first.dim(), kShownDims); ++d) {
    fingerprint[kFirstSize + d] = first.size(d);
  }
}

// "all_reduce(float32, sizes [10], SUM)"
std::string describe(const int64_t* fingerprint) {
  std::ostringstream out;
  out << kCollectives.at(fingerprint[kCollective]) << "(";
  const char* separator = "";
  if (fingerprint[kTensorCount] > 1) {
    out << fingerprint[kTensorCount] << " tensors";
    separator = ", ";
  }
  if (fingerprint[kDtype] >= 0) {
    out << separator << c10::getDtypeNames(static_cast<c10::ScalarType>(fingerprint[kDtype])).first;
    out << ", " << (fingerprint[kTensorCount] > 1 ? "first tensor's sizes [" : "sizes [");
    for (int64_t d = 0; d < std::min(fingerprint[kDims], kShownDims); ++d) {
      out << (d > 0 ? ", " : "") << fingerprint[kFirstSize + d];
    }
    out << (fingerprint[kDims] > kShownDims ? ", ...]" : "]");
    if (fingerprint[kTensorCount] > 1 && fingerprint[kElementCount] >= 0) {
      out << ", " << fingerprint[kElementCount] << " elements in all";
    }
    separator = ", ";
  }
  if (fingerprint[kRoot] >= 0) {
    out << separator << "root " << fingerprint[kRoot];
    separator = ", ";
  }
  if (fingerprint[kReduceOp] >= 0) {
    out << separator << reduce_op_name(fingerprint[kReduceOp]);
  }
  out << ")";
  return out.str();
}

} // namespace

CallAgreement::CallAgreement(const CollectiveCall& call) : op_(call.op) {
  fill_fingerprint(mine_.data(), call);
}

void CallAgreement::start(c10d::Backend& transport, SharedBoard* board) {
  rank_ = transport.getRank();
  ranks_ = transport.getSize();
  board_ = board;
  if (board_ != nullptr) {
    board_exchange_ = board_->post(mine_);
    return;
  }
  at::Tensor mine = at::empty({kFingerprintLength}, at::kLong);
  std::copy(mine_.begin(), mine_.end(), mine.data_ptr<int64_t>());
  gathered_ = at::empty({ranks_ * kFingerprintLength}, at::kLong);
  exchange_ = transport._allgather_base(gathered_, mine, c10d::AllgatherOptions());
}

void CallAgreement::verify(std::chrono::milliseconds timeout) {
  std::vector<int64_t> on_board;
  const int64_t* all = nullptr;
  if (board_ != nullptr) {
    on_board.resize(ranks_ * kFingerprintLength);
    board_->gather(board_exchange_, on_board.data(), kFingerprintLength, op_, timeout);
    all = on_board.data();
  } else {
    exchange_->wait();  // gloo's work times out after the group's timeout itself
    all = gathered_.const_data_ptr<int64_t>();
  }
  const int64_t* mine = all + rank_ * kFingerprintLength;
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    const int64_t* theirs = all + rank * kFingerprintLength;
    for (int64_t field = 0; field < kCompared; ++field) {
      if (theirs[field] == mine[field]) {
        continue;
      }
      std::ostringstream calls;
      for (int64_t r = 0; r < ranks_; ++r) {
        calls << (r > 0 ? "; " : "") << "rank " << r << ": " << describe(all + r * kFingerprintLength);
      }
      TORCH_CHECK(
          false, kCollectiveBackendName, " ", op_, ": the ranks' calls do not match (their ",
          kFieldMeanings.at(field), " differ): ", calls.str(),
          ". Every rank must call the same collectives in the same order, with tensors of the "
          "same dtype and sizes; nothing was sent, and the group stays usable.");
    }
  }
}

} // namespace vdev
