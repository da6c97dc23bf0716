// Exercises the public C++ API (torch_vdev/vdev.h) and prints "key=value" lines that
// tests/test_cpp.py compares with independent references (Python's torch, the
// generic torch::accelerator API, CPU results). Run with VDEV_DEVICE_COUNT=3.
#include <ATen/DeviceAccelerator.h>
#include <torch/types.h>
#include <torch_vdev/vdev.h>

#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace {

template <typename Value>
void print(const std::string& key, const Value& value) {
  std::cout << key << "=" << value << "\n";
}

std::string values_of(const torch::Tensor& tensor) {
  std::ostringstream out;
  out.precision(9);
  torch::Tensor host = tensor.cpu();
  for (int64_t i = 0; i < host.numel(); ++i) {
    out << (i == 0 ? "" : ",") << host[i].item<float>();
  }
  return out.str();
}

// Prints the message of the c10::Error that `call` throws, on one line.
void print_error(const std::string& name, const std::function<void()>& call) {
  std::string outcome = "no error";
  try {
    call();
  } catch (const c10::Error& error) {
    outcome = error.what_without_backtrace();
  } catch (const std::exception& error) {
    outcome = std::string("not a c10::Error: ") + error.what();
  }
  for (char& c : outcome) {
    c = c == '\n' ? ' ' : c;
  }
  print("error." + name, outcome);
}

size_t reserved_bytes(c10::DeviceIndex device) {
  auto stats = at::accelerator::getDeviceStats(device);
  return static_cast<size_t>(
      stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current);
}

} // namespace

int main() {
  print("device_count", static_cast<int>(vdev::device_count()));
  print("accelerator_device_count", static_cast<int>(at::accelerator::deviceCount()));
  print("current_device.initial", static_cast<int>(vdev::current_device()));

  // Both names of the backend parse to the same device type.
  torch::Device generic("privateuseone:0");
  torch::Device named("vdev:1");
  print("device.privateuseone:0", generic);
  print("device.vdev:1", named);
  print("device.same_type", generic.type() == named.type() && named.is_privateuseone());
  print("tensor_device.vdev:1", torch::ones({2}, named).device());

  vdev::set_device(2);
  print("current_device.after_set", static_cast<int>(vdev::current_device()));
  print("accelerator_device_index.after_set", static_cast<int>(at::accelerator::getDeviceIndex()));
  print("tensor_device.index_less", torch::empty({1}, torch::Device("vdev")).device());
  int other_thread_device = -1;
  std::thread([&] { other_thread_device = vdev::current_device(); }).join();
  print("current_device.other_thread", other_thread_device);
  vdev::synchronize();
  vdev::synchronize(1);

  // torch::manual_seed seeds every device; vdev::manual_seed only the current one (2).
  torch::manual_seed(1);
  vdev::manual_seed(7);
  print("randn.vdev:0", values_of(torch::randn({5}, torch::Device("vdev:0"))));
  print("randn.vdev:2", values_of(torch::randn({5}, torch::Device("vdev:2"))));

  const size_t before = vdev::memory_allocated(1);
  {
    torch::Tensor block = torch::empty({1024}, torch::dtype(torch::kFloat).device(named));
    print("tensor_nbytes", block.nbytes());
    print("memory_allocated.delta", vdev::memory_allocated(1) - before);
    vdev::set_device(1);
    print("memory_allocated.current_is_device_1", vdev::memory_allocated() == vdev::memory_allocated(1));
  }
  print("memory_allocated.delta_after_free", vdev::memory_allocated(1) - before);
  print("max_memory_allocated.delta", vdev::max_memory_allocated(1) - before);
  print("reserved.before_empty_cache", reserved_bytes(1));
  vdev::empty_cache();
  print("reserved.after_empty_cache", reserved_bytes(1));

  vdev::set_device(1);
  print_error("set_device(3)", [] { vdev::set_device(3); });
  print_error("set_device(-2)", [] { vdev::set_device(-2); });
  print_error("synchronize(3)", [] { vdev::synchronize(3); });
  print_error("memory_allocated(5)", [] { vdev::memory_allocated(5); });
  print_error("max_memory_allocated(-7)", [] { vdev::max_memory_allocated(-7); });
  print_error("empty(vdev:3)", [] { torch::empty({1}, torch::Device("vdev:3")); });
  // The process stays usable, on the device it was on.
  print("current_device.after_errors", static_cast<int>(vdev::current_device()));
  print("sum.after_errors", torch::ones({4}, torch::Device("vdev")).sum().item<float>());
  return 0;
}
