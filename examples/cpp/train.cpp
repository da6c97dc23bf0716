// Trains a small MLP with SGD on vdev and on CPU from the same seed, checks that the
// two runs' losses agree, and prints vdev's memory statistics. Exits 1 if they differ.
#include <torch/torch.h>
#include <torch_vdev/vdev.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

void print_memory(const char* when) {
  std::printf(
      "vdev:0 memory (%s): memory_allocated=%zu max_memory_allocated=%zu\n", when, vdev::memory_allocated(0),
      vdev::max_memory_allocated(0));
}

constexpr uint64_t kSeed = 2024;
constexpr int kSteps = 50;
constexpr double kRelativeTolerance = 1e-5;

// Fits y = sin(x0) + x1 * x2 with a dropout-regularised MLP; returns the loss of every step.
std::vector<float> train(torch::Device device) {
  // Weights and data come from the CPU generator, so both runs start from the same state.
  torch::manual_seed(kSeed);
  torch::nn::Sequential model(
      torch::nn::Linear(3, 32), torch::nn::ReLU(), torch::nn::Dropout(0.1),
      torch::nn::Linear(32, 1));
  torch::Tensor inputs = torch::randn({256, 3});
  torch::Tensor targets =
      (torch::sin(inputs.select(1, 0)) + inputs.select(1, 1) * inputs.select(1, 2)).unsqueeze(1);

  model->to(device);
  inputs = inputs.to(device);
  targets = targets.to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  // torch::manual_seed also seeds every vdev generator, and a vdev generator draws
  // what a CPU generator with the same seed draws: dropout masks match across runs.
  torch::manual_seed(kSeed);
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(inputs), targets);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<float>());  // item() copies the loss to the host
  }
  if (device.is_privateuseone()) {
    print_memory("model, gradients, momenta and data alive");
  }
  return losses;
}

} // namespace

int main() {
  std::printf("vdev devices: %d\n", static_cast<int>(vdev::device_count()));
  // "vdev:0" and PyTorch's generic "privateuseone:0" name the same device.
  torch::Device device("vdev:0");

  std::vector<float> vdev_losses = train(device);
  vdev::synchronize();
  print_memory("after training");
  std::vector<float> cpu_losses = train(torch::kCPU);

  bool agree = true;
  for (int step = 0; step < kSteps; ++step) {
    const double difference = std::fabs(vdev_losses[step] - cpu_losses[step]);
    if (difference > kRelativeTolerance * std::fabs(cpu_losses[step])) {
      std::printf(
          "step %d: vdev loss %.9g differs from CPU loss %.9g\n", step, vdev_losses[step],
          cpu_losses[step]);
      agree = false;
    }
  }
  std::printf(
      "loss: first %.6f, last %.6f (vdev), last %.6f (cpu)\n", vdev_losses.front(),
      vdev_losses.back(), cpu_losses.back());

  vdev::empty_cache();
  print_memory("after empty_cache");
  std::printf(agree ? "vdev and CPU losses agree\n" : "vdev and CPU losses DIFFER\n");
  return agree ? 0 : 1;
}
