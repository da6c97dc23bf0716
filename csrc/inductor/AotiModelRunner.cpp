// Runs AOTInductor packages compiled for vdev: torch._inductor.aoti_load_package and
// torch::inductor::AOTIModelPackageLoader look the package's device up in
// AOTInductor's runner registry, which knows only PyTorch's own devices.
//
// A vdev model is CPU code working on vdev tensors (torch_vdev/_inductor.py), run by
// the generic runner. AOTInductor's model runtime parses only PyTorch's device names,
// so the runner hands the model "cpu:<index>" and the generated model constructor
// makes its device vdev (privateuse1) with that index: its constants and buffers live
// on that vdev device.

#include "runtime/Device.h"

#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <torch_vdev/Backend.h>

namespace vdev {
namespace {

class ModelContainerRunner final : public torch::inductor::AOTIModelContainerRunner {
 public:
  ModelContainerRunner(
      const std::string& model_so_path,
      size_t num_models,
      const std::string& device_str,
      const std::string& bin_dir,
      bool run_single_threaded)
      : AOTIModelContainerRunner(
            model_so_path, num_models, model_device(device_str), bin_dir, run_single_threaded) {}

 private:
  static std::string model_device(const std::string& device_str) {
    const c10::Device device(device_str);
    TORCH_CHECK(
        device.type() == kDeviceType, "a ", kBackendName, " AOTInductor model runs on ",
        kBackendName, " devices, not ", device_str);
    const c10::DeviceIndex index = device.has_index() ? device.index() : current_device();
    check_device_index(index);
    return "cpu:" + std::to_string(index);
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_model_container_runner(
    const std::string& model_so_path,
    size_t num_models,
    const std::string& device_str,
    const std::string& bin_dir,
    const bool run_single_threaded) {
  return std::make_unique<ModelContainerRunner>(
      model_so_path, num_models, device_str, bin_dir, run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner register_model_container_runner(
    kBackendName,
    &create_model_container_runner);

} // namespace
} // namespace vdev
