#include "distributed/SharedBoard.h"

#include "distributed/CollectiveBackend.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <fstream>
#include <random>

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace vdev {

namespace {

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "futexes wait on 32-bit words");

// One rank's record of one exchange. `exchange` (the low 32 bits of the exchange's
// number) is written after the record, and is the futex word readers sleep on;
// `sleepers` says whether the writer must wake any.
struct alignas(64) Entry {
  std::atomic<uint32_t> exchange;
  std::atomic<uint32_t> sleepers;
  int64_t record[SharedBoard::kMaxRecordLength];
};

struct alignas(64) Slot {
  std::atomic<uint32_t> departed;
  Entry entries[2];
};

uint32_t* futex_word(std::atomic<uint32_t>& word) {
  return reinterpret_cast<uint32_t*>(&word);
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec relative{static_cast<time_t>(seconds.count()), static_cast<long>((timeout - seconds).count())};
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  syscall(SYS_futex, futex_word(word), FUTEX_WAIT, seen, &relative, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// This rank's place in the handshake's all_gather.
enum HandshakeField : int64_t {
  kBootIdHigh, kBootIdLow, kPidNamespace, kPid, kNameHigh, kNameLow, kToken, kHandshakeLength
};

// The boot and PID namespace of this process: ranks with the same ones are on one host
// and see each other's process ids. Zeros when they cannot be read.
std::array<int64_t, 3> host_identity() {
  std::array<int64_t, 3> identity{0, 0, 0};
  std::ifstream boot_file("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot_file, boot_id);
  std::string digits;
  for (char c : boot_id) {
    if (std::isxdigit(static_cast<unsigned char>(c))) {
      digits += c;
    }
  }
  struct stat pid_namespace {};
  if (digits.size() != 32 || stat("/proc/self/ns/pid", &pid_namespace) != 0) {
    return identity;
  }
  identity[0] = static_cast<int64_t>(std::stoull(digits.substr(0, 16), nullptr, 16));
  identity[1] = static_cast<int64_t>(std::stoull(digits.substr(16), nullptr, 16));
  identity[2] = static_cast<int64_t>(pid_namespace.st_ino);
  return identity;
}

std::string segment_name(int64_t high, int64_t low) {
  char name[64];
  std::snprintf(name, sizeof(name), "/vccl-board-%016llx%016llx",
                static_cast<unsigned long long>(high), static_cast<unsigned long long>(low));
  return name;
}

at::Tensor all_gather(c10d::Backend& transport, at::Tensor mine) {
  at::Tensor all = at::empty({transport.getSize() * mine.numel()}, at::kLong);
  transport._allgather_base(all, mine, c10d::AllgatherOptions())->wait();
  return all;
}

bool exited(int pidfd) {
  pollfd poller{pidfd, POLLIN, 0};
  return poll(&poller, 1, 0) > 0;
}

// Maps the segment `fd` names; nullptr if it is not a board of `bytes`.
void* map_segment(int fd, size_t bytes) {
  struct stat status {};
  if (fd < 0 || fstat(fd, &status) != 0 || status.st_size != static_cast<off_t>(bytes)) {
    return nullptr;
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return mapping == MAP_FAILED ? nullptr : mapping;
}

} // namespace

struct SharedBoard::Segment {
  alignas(64) int64_t token;

  Slot& slot(int rank) {
    return reinterpret_cast<Slot*>(this + 1)[rank];
  }
  static size_t bytes(int ranks) {
    return sizeof(Segment) + ranks * sizeof(Slot);
  }
};

std::unique_ptr<SharedBoard> SharedBoard::connect(c10d::Backend& transport) {
  const int rank = transport.getRank();
  const int ranks = transport.getSize();
  const size_t bytes = Segment::bytes(ranks);

  // Rank 0 creates the segment and writes a random token in it; its name and token
  // travel in the first all_gather with every rank's host identity.
  at::Tensor mine = at::zeros({kHandshakeLength}, at::kLong);
  int64_t* fields = mine.data_ptr<int64_t>();
  const std::array<int64_t, 3> identity = host_identity();
  std::copy(identity.begin(), identity.end(), fields + kBootIdHigh);
  fields[kPid] = getpid();
  Segment* segment = nullptr;
  if (rank == 0 && identity[0] != 0) {
    std::random_device random;
    auto random64 = [&random] { return static_cast<int64_t>((uint64_t{random()} << 32) | random()) | 1; };
    fields[kNameHigh] = random64();
    fields[kNameLow] = random64();
    const int fd = shm_open(
        segment_name(fields[kNameHigh], fields[kNameLow]).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
        segment = static_cast<Segment*>(map_segment(fd, bytes));
      }
      close(fd);
    }
    if (segment != nullptr) {
      fields[kToken] = random64();
      segment->token = fields[kToken];
    }
  }
  const at::Tensor everyone = all_gather(transport, mine);
  const int64_t* all = everyone.const_data_ptr<int64_t>();
  auto field = [all](int r, int64_t f) { return all[r * kHandshakeLength + f]; };
  const std::string name = segment_name(field(0, kNameHigh), field(0, kNameLow));

  // The others map it if they are on rank 0's host, and check the token (a segment of
  // the same name in another /dev/shm carries another one).
  bool one_host = field(0, kToken) != 0;
  for (int r = 0; r < ranks; ++r) {
    for (int64_t f = kBootIdHigh; f <= kPidNamespace; ++f) {
      one_host &= field(r, f) == field(0, f);
    }
  }
  if (rank != 0 && one_host) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    segment = static_cast<Segment*>(map_segment(fd, bytes));
    if (fd >= 0) {
      close(fd);
    }
    if (segment != nullptr && segment->token != field(0, kToken)) {
      munmap(segment, bytes);
      segment = nullptr;
    }
  }
  bool usable = segment != nullptr;
  std::vector<int> pidfds(ranks, -1);
  std::vector<int64_t> pids(ranks);
  for (int r = 0; r < ranks; ++r) {
    pids[r] = field(r, kPid);
    if (usable && r != rank) {
      pidfds[r] = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pids[r]), 0));
      usable &= pidfds[r] >= 0;
    }
  }
  std::unique_ptr<SharedBoard> board;
  if (segment != nullptr) {
    // Owns the mapping and the pidfds from here, whatever the others say.
    board.reset(new SharedBoard(rank, segment, bytes, std::move(pidfds), std::move(pids)));
  }
  // Every rank must use the board, or none.
  const at::Tensor all_usable = all_gather(transport, at::full({1}, usable ? 1 : 0, at::kLong));
  if (rank == 0 && field(0, kToken) != 0) {
    shm_unlink(name.c_str());  // every rank that could map it has
  }
  if (all_usable.min().item<int64_t>() != 1) {
    return nullptr;
  }
  return board;
}

SharedBoard::SharedBoard(
    int rank, void* mapping, size_t bytes, std::vector<int> peer_pidfds, std::vector<int64_t> pids)
    : rank_(rank),
      segment_(static_cast<Segment*>(mapping)),
      bytes_(bytes),
      peer_pidfds_(std::move(peer_pidfds)),
      pids_(std::move(pids)) {}

SharedBoard::~SharedBoard() {
  leave();
  munmap(segment_, bytes_);
  for (int pidfd : peer_pidfds_) {
    if (pidfd >= 0) {
      close(pidfd);
    }
  }
}

void SharedBoard::leave() {
  if (left_) {
    return;
  }
  left_ = true;
  Slot& mine = segment_->slot(rank_);
  mine.departed.store(1);
  for (Entry& entry : mine.entries) {
    futex_wake_all(entry.exchange);
  }
}

uint64_t SharedBoard::post(c10::ArrayRef<int64_t> record) {
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(record.size()) <= kMaxRecordLength);
  const uint64_t exchange = next_exchange_++;
  Entry& entry = segment_->slot(rank_).entries[exchange & 1];
  std::copy(record.begin(), record.end(), entry.record);
  // Sequentially consistent with the readers' `sleepers` increment and re-read: either
  // a reader sees this exchange before it sleeps, or this rank sees the sleeper.
  entry.exchange.store(static_cast<uint32_t>(exchange));
  if (entry.sleepers.load() != 0) {
    futex_wake_all(entry.exchange);
  }
  return exchange;
}

void SharedBoard::wait_for(
    int rank, uint64_t exchange, const char* op, std::chrono::milliseconds timeout) const {
  Slot& slot = segment_->slot(rank);
  Entry& entry = slot.entries[exchange & 1];
  const auto posted = static_cast<uint32_t>(exchange);
  // The peer is usually about to post (it is making the same call): spin a moment,
  // then sleep. Not sched_yield: on a loaded machine a yield gives the core away for a
  // whole time slice.
  for (int spin = 0; spin < 200; ++spin) {
    if (entry.exchange.load(std::memory_order_acquire) == posted) {
      return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  constexpr std::chrono::milliseconds kSlice{100};
  while (true) {
    entry.sleepers.fetch_add(1);
    const uint32_t seen = entry.exchange.load();
    if (seen != posted) {
      const auto left = deadline - std::chrono::steady_clock::now();
      futex_wait(entry.exchange, seen, std::min<std::chrono::nanoseconds>(kSlice, std::max(left, decltype(left)::zero())));
    }
    entry.sleepers.fetch_sub(1);
    if (entry.exchange.load(std::memory_order_acquire) == posted) {
      return;
    }
    TORCH_CHECK(
        slot.departed.load() == 0, kCollectiveBackendName, " ", op, ": rank ", rank,
        " left the process group (shut it down or destroyed it) before making this call");
    TORCH_CHECK(
        !exited(peer_pidfds_[rank]), kCollectiveBackendName, " ", op, ": rank ", rank,
        " (process ", pids_[rank], ") exited before making this call");
    TORCH_CHECK(
        std::chrono::steady_clock::now() < deadline, kCollectiveBackendName, " ", op,
        ": timed out after ", timeout.count(), " ms (the group's timeout) waiting for rank ", rank,
        " to make this call");
  }
}

void SharedBoard::gather(
    uint64_t exchange, int64_t* records, int64_t record_length, const char* op,
    std::chrono::milliseconds timeout) const {
  const int ranks = static_cast<int>(pids_.size());
  for (int rank = 0; rank < ranks; ++rank) {
    if (rank != rank_) {
      wait_for(rank, exchange, op, timeout);
    }
    const Entry& entry = segment_->slot(rank).entries[exchange & 1];
    std::copy(entry.record, entry.record + record_length, records + rank * record_length);
  }
}

} // namespace vdev
