#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vdev {

// A board in shared memory on which the ranks of one process group, all on one host,
// exchange a small record per call without a network round trip: each rank posts its
// record of exchange k in its own slot, then reads the others' records of exchange k,
// waiting for them (spinning briefly, then sleeping on a futex). It replaces an
// all_gather over gloo for CallAgreement's fingerprints (about 250 µs per call on a
// loaded machine, a few µs here).
//
// A rank makes its exchanges one at a time (as a group's collectives are called, in
// one order on every rank), and is at most one exchange ahead of any other (it cannot
// finish exchange k+1 before every rank posted k+1, which each does only after reading
// exchange k), so two entries per rank, by the parity of k, hold every record still to
// be read.
//
// Waiting never hangs: it fails with the group's timeout, at once when a peer leaves
// the group (shutdown) and within a slice (100 ms) when a peer's process exits.
class SharedBoard {
 public:
  // The longest record a board holds, in int64.
  static constexpr int64_t kMaxRecordLength = 16;

  // Sets up a board for the group of `transport` (a collective of all its ranks: two
  // all_gathers on `transport`): a shared-memory segment rank 0 creates, every rank
  // maps, and rank 0 then unlinks, so nothing outlives the processes. Returns nullptr
  // on every rank unless every rank could map it (ranks on different hosts, or in
  // different PID or /dev/shm namespaces, exchange over the transport instead).
  static std::unique_ptr<SharedBoard> connect(c10d::Backend& transport);

  ~SharedBoard();
  SharedBoard(const SharedBoard&) = delete;
  SharedBoard& operator=(const SharedBoard&) = delete;

  // Posts this rank's `record` (at most kMaxRecordLength int64) for the next exchange
  // and returns the exchange's number.
  uint64_t post(c10::ArrayRef<int64_t> record);
  // Waits for every rank's record of `exchange` and copies them, rank after rank, to
  // `records` (ranks × the record length). Errors name `op`: a peer that does not post
  // within `timeout` ("timed out"), or that left the group or exited.
  void gather(
      uint64_t exchange, int64_t* records, int64_t record_length, const char* op,
      std::chrono::milliseconds timeout) const;
  // Tells the peers that this rank makes no more calls (their waits fail at once).
  void leave();

 private:
  struct Segment;
  SharedBoard(int rank, void* mapping, size_t bytes, std::vector<int> peer_pidfds, std::vector<int64_t> pids);

  // Waits until `rank` posted `exchange`.
  void wait_for(int rank, uint64_t exchange, const char* op, std::chrono::milliseconds timeout) const;

  int rank_;
  Segment* segment_;
  size_t bytes_;
  // A pidfd for each rank (-1 for this one), readable once its process exited.
  std::vector<int> peer_pidfds_;
  std::vector<int64_t> pids_;
  uint64_t next_exchange_ = 1;
  bool left_ = false;
};

} // namespace vdev
