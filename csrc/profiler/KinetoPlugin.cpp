// vdev's Kineto plugin: torch.profiler's PrivateUse1 activity. Each profiling session
// turns the device activity vdev's runtime recorded (DeviceActivity.h) into Kineto
// activities: kernels, copies and memsets on one row per device stream, with a
// runtime event on the launching host thread and a flow arrow from it to the device
// work (as cudaLaunchKernel's), both correlated with the CPU operator that launched
// them; stream waits, event records and synchronizations as runtime events.
#include "profiler/DeviceActivity.h"
#include "runtime/Stream.h"

#include <torch_vdev/vdev.h>

#include <torch_vdev/Backend.h>

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace vdev::profiler {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType>& supported_activities() {
  static const std::set<ActivityType> activities{
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
      ActivityType::PRIVATEUSE1_RUNTIME};
  return activities;
}

ActivityType kineto_type(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kKernel:
      return ActivityType::CONCURRENT_KERNEL;
    case ActivityKind::kMemcpy:
      return ActivityType::GPU_MEMCPY;
    case ActivityKind::kMemset:
      return ActivityType::GPU_MEMSET;
    case ActivityKind::kRuntime:
      break;
  }
  return ActivityType::PRIVATEUSE1_RUNTIME;
}

// The runtime call that launches device work, named as CUDA's are.
const char* launch_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kMemcpy:
      return "vdevMemcpyAsync";
    case ActivityKind::kMemset:
      return "vdevMemsetAsync";
    default:
      return "vdevLaunchKernel";
  }
}

// A kernel is ATen's CPU kernel of its op run on device memory; naming it apart from
// the op keeps the op's row and its kernel's row apart in tables.
std::string device_work_name(const DeviceActivity& record) {
  if (record.kind == ActivityKind::kKernel) {
    return std::string(kBackendName) + "_kernel[" + record.name + "]";
  }
  return record.name;
}

std::string device_name(c10::DeviceIndex device) {
  return std::string(kBackendName) + " " + std::to_string(device);
}

void synchronize_all_devices() {
  for (c10::DeviceIndex device = 0; device < device_count(); ++device) {
    synchronize_device(device);
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<ActivityType> activity_types)
      : activity_types_(std::move(activity_types)) {}

  // A session records the device work launched while it runs: the work queued on the
  // streams' workers before it starts is finished first, and the work launched
  // during it before it stops (as torch.cuda.synchronize() ends a CUDA profile,
  // here for every vdev device).
  void start() override {
    synchronize_all_devices();
    start_ns_ = now_ns();
    start_recording();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    synchronize_all_devices();
    stop_recording();
    end_ns_ = now_ns();
    records_ = take_recorded();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, start_ns_, end_ns_);
  }

  void processTrace(
      libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
      int64_t /*start_time*/, int64_t /*end_time*/) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, kBackendName);
    buffer_->gpuOpCount = 0;
    const int32_t process = libkineto::processId();
    std::map<c10::DeviceIndex, std::set<c10::StreamId>> streams;
    uint32_t flow_id = 0;

    auto add = [&](const DeviceActivity& record, ActivityType type, const std::string& name,
                   bool on_host) -> libkineto::GenericTraceActivity& {
      buffer_->emplace_activity(buffer_->span, type, name);
      auto& activity = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
      activity.startTime = record.start_ns;
      activity.endTime = record.end_ns;
      activity.id = static_cast<int32_t>(record.correlation_id);
      activity.device = on_host ? process : record.device;
      activity.resource = on_host ? record.thread_id : static_cast<int32_t>(record.stream);
      activity.threadId = record.thread_id;
      if (record.correlation_id != 0 && linked_activity) {
        activity.linked = linked_activity(static_cast<int32_t>(record.correlation_id));
      }
      activity.addMetadata("device", record.device);
      activity.addMetadata("stream", record.stream);
      activity.addMetadata("correlation", record.correlation_id);
      if (record.correlation_id != 0) {
        activity.addMetadata("External id", record.correlation_id);
      }
      return activity;
    };

    for (const DeviceActivity& record : records_) {
      const ActivityType type = kineto_type(record.kind);
      if (record.kind == ActivityKind::kRuntime) {
        if (activity_types_.count(type) != 0) {
          add(record, type, record.name, /*on_host=*/true).log(logger);
        }
        continue;
      }
      if (activity_types_.count(type) == 0) {
        continue;
      }
      auto& work = add(record, type, device_work_name(record), /*on_host=*/false);
      if (record.kind != ActivityKind::kKernel) {
        work.addMetadata("bytes", record.bytes);
      }
      streams[record.device].insert(record.stream);
      buffer_->gpuOpCount += 1;
      if (activity_types_.count(ActivityType::PRIVATEUSE1_RUNTIME) != 0) {
        // The arrow from the launching call to the work it launched.
        flow_id += 1;
        auto& launch = add(record, ActivityType::PRIVATEUSE1_RUNTIME, launch_name(record.kind),
                           /*on_host=*/true);
        for (auto* end : {&launch, &work}) {
          end->flow.id = flow_id;
          end->flow.type = libkineto::kLinkAsyncCpuGpu;
          end->flow.start = end == &launch;
        }
        launch.log(logger);
      }
      work.log(logger);
    }

    // Kineto asks a session for one device's info (getDeviceInfo): the first one's;
    // the others are logged here.
    device_ = streams.empty() ? c10::DeviceIndex(0) : streams.begin()->first;
    for (const auto& [device, ids] : streams) {
      if (device != device_) {
        logger.handleDeviceInfo(device_info(device), start_ns_);
      }
      for (c10::StreamId stream : ids) {
        resources_.push_back(libkineto::ResourceInfo{
            static_cast<int64_t>(stream), static_cast<int64_t>(stream), device,
            "stream " + std::to_string(stream)});
      }
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(device_));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return resources_;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    push_correlation_id(id);
  }

  void popCorrelationId() override {
    pop_correlation_id();
  }

 private:
  static libkineto::DeviceInfo device_info(c10::DeviceIndex device) {
    return libkineto::DeviceInfo{device, device, device_name(device), device_name(device)};
  }

  const std::set<ActivityType> activity_types_;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  std::vector<DeviceActivity> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<libkineto::ResourceInfo> resources_;
  c10::DeviceIndex device_ = 0;
};

class VdevActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<ActivityType>& availableActivities() const override {
    return supported_activities();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    std::set<ActivityType> wanted;
    for (ActivityType type : activity_types) {
      if (supported_activities().count(type) != 0) {
        wanted.insert(type);
      }
    }
    return std::make_unique<Session>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  const std::string name_ = std::string(kBackendName) + "_activity_profiler";
};

} // namespace

REGISTER_PRIVATEUSE1_PROFILER(VdevActivityProfiler);

} // namespace vdev::profiler
