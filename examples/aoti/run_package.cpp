// Loads an AOTInductor package compiled for vdev (torch._inductor.aoti_compile_and_package
// of a model exported on vdev) and runs it on vdev:0.
//
//   run_package MODEL.pt2 DATA_DIR
//
// DATA_DIR holds the model's weights and one input as raw float32 files, listed in
// DATA_DIR/tensors.txt, one "name dim size0 size1 ..." per line; "input" is the input.
// AOTInductor cannot package a vdev model's weights into it, so they are given to the
// loader as vdev tensors (user-managed constants). Prints the output and memory use.

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>
#include <torch_vdev/vdev.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>

namespace {

torch::Tensor read_tensor(const std::string& path, const std::vector<int64_t>& sizes) {
  torch::Tensor tensor = torch::empty(sizes, torch::kFloat32);
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(tensor.data_ptr<float>()), tensor.nbytes());
  TORCH_CHECK(file.gcount() == static_cast<std::streamsize>(tensor.nbytes()), "short read from ", path);
  return tensor;
}

std::unordered_map<std::string, torch::Tensor> read_tensors(const std::string& dir, const torch::Device& device) {
  std::unordered_map<std::string, torch::Tensor> tensors;
  std::ifstream listing(dir + "/tensors.txt");
  TORCH_CHECK(listing, "cannot open ", dir, "/tensors.txt");
  std::string line;
  while (std::getline(listing, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t dim = 0;
    fields >> name >> dim;
    std::vector<int64_t> sizes(dim);
    for (auto& size : sizes) {
      fields >> size;
    }
    tensors[name] = read_tensor(dir + "/" + name + ".bin", sizes).to(device);
  }
  return tensors;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt2 DATA_DIR\n";
    return 2;
  }
  const torch::Device device("vdev:0");
  auto tensors = read_tensors(argv[2], device);
  torch::Tensor input = tensors.at("input");
  tensors.erase("input");

  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  loader.load_constants(tensors, /*use_inactive=*/false, /*check_full_update=*/true, /*user_managed=*/true);

  const size_t allocated_before = vdev::memory_allocated(0);
  std::vector<torch::Tensor> outputs = loader.run({input});
  const torch::Tensor output = outputs.at(0);

  std::cout << "device=" << output.device() << "\n";
  std::cout << "output_allocated_bytes=" << vdev::memory_allocated(0) - allocated_before << "\n";
  std::cout << "output_nbytes=" << output.nbytes() << "\n";
  const torch::Tensor values = output.to(torch::kCPU).contiguous().flatten();
  std::cout << "output=";
  for (int64_t i = 0; i < values.numel(); ++i) {
    std::cout << (i ? "," : "") << values[i].item<float>();
  }
  std::cout << "\n";
}
