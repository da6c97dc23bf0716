#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace vdev {

// A process group's communication thread, in the role of NCCL's communication stream:
// it runs the group's tasks (a collective's launch: meeting the other ranks' calls,
// waiting for the stream its inputs come from, handing the collective to gloo) one at
// a time, in the order they were posted, while the thread that called the collective
// goes on. One order matters: gloo matches the ranks' messages by the order of the
// calls on its group, and the ranks compare their calls in order.
class CommunicationWorker {
 public:
  CommunicationWorker() = default;
  // Runs the tasks still queued, then stops the thread.
  ~CommunicationWorker();
  CommunicationWorker(const CommunicationWorker&) = delete;
  CommunicationWorker& operator=(const CommunicationWorker&) = delete;

  // Queues `task` (which must not throw) and returns; the thread starts with the first.
  void post(std::function<void()> task);
  // Returns once every task posted before has run.
  void drain();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable posted_or_stopping_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> tasks_;
  bool running_task_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace vdev
