#include "runtime/HostAccess.h"

#include "runtime/Stream.h"

#include <c10/util/flat_hash_map.h>

#include <mutex>

namespace vdev {
namespace {

// Counts by name pointer (names are static strings or operator schemas' names, which
// live as long as the process): one uncontended lock and one lookup per call.
class HostOpCounts {
 public:
  void count(const char* op_name) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[op_name];
  }

  std::unordered_map<std::string, int64_t> snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unordered_map<std::string, int64_t> by_name;
    for (const auto& [name, calls] : counts_) {
      by_name[name] += calls;
    }
    return by_name;
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_.clear();
  }

 private:
  std::mutex mutex_;
  ska::flat_hash_map<const char*, int64_t> counts_;
};

HostOpCounts& host_op_counts() {
  // Leaked on purpose: ops may run during static destruction.
  static HostOpCounts* counts = new HostOpCounts();
  return *counts;
}

} // namespace

void synchronize_for_host_op(c10::DeviceIndex device, const char* op_name) {
  host_op_counts().count(op_name);
  synchronize_current_stream(device, op_name);
}

std::unordered_map<std::string, int64_t> host_op_stats() {
  return host_op_counts().snapshot();
}

void reset_host_op_stats() {
  host_op_counts().reset();
}

} // namespace vdev
