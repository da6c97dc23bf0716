#include "distributed/CommunicationWorker.h"

namespace vdev {

CommunicationWorker::~CommunicationWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  posted_or_stopping_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void CommunicationWorker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
    }
  }
  posted_or_stopping_.notify_one();
}

void CommunicationWorker::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return tasks_.empty() && !running_task_; });
}

void CommunicationWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    posted_or_stopping_.wait(lock, [this] { return !tasks_.empty() || stopping_; });
    if (tasks_.empty()) {
      return;  // stopping, with nothing left to run
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    running_task_ = true;
    lock.unlock();
    task();
    task = nullptr;  // what the task holds goes before the next one runs
    lock.lock();
    running_task_ = false;
    if (tasks_.empty()) {
      idle_.notify_all();
    }
  }
}

} // namespace vdev
