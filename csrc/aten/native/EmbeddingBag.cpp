// _embedding_bag and _embedding_bag_forward_only with CUDA's auxiliary results. The bags
// themselves are the CPU kernel's (CpuKernel.h); its three other results follow its own
// rules, which differ from CUDA's (EmbeddingBag.cu) and from the meta kernel, which gives
// every device but the CPU CUDA's shapes (fake tensors, torch.compile):
// - offset2bag: the CPU's sum fast path leaves it empty; CUDA always gives each index's
//   bag, which backward formulas would otherwise recompute from the offsets;
// - bag_size: CUDA's has one element per offset, so one more with include_last_offset;
// - max_indices: CUDA's is empty unless mode is max (the CPU's has one per bag).
#include "aten/CpuKernel.h"

#include <ATen/ops/_embedding_bag_forward_only_ops.h>
#include <ATen/ops/_embedding_bag_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>

namespace vdev {
namespace {

using EmbeddingBagResults = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

constexpr int64_t kModeMax = 2;

// Each index's bag, as EmbeddingBag.cpp's make_offset2bag computes it for the backward:
// a count of the offsets at or before each index, less one. The extra last slot takes
// include_last_offset's final offset (the number of indices).
at::Tensor bag_of_each_index(const at::Tensor& indices, const at::Tensor& offsets) {
  const int64_t index_count = indices.size(0);
  at::Tensor bag_starts = at::zeros({index_count + 1}, indices.options());
  bag_starts.index_add_(0, offsets, at::ones_like(offsets, indices.options()));
  return bag_starts.cumsum(0, indices.scalar_type()).sub_(1).narrow(0, 0, index_count);
}

EmbeddingBagResults with_cuda_auxiliary_results(
    EmbeddingBagResults cpu_results,
    const at::Tensor& indices,
    const at::Tensor& offsets,
    int64_t mode) {
  auto& [output, offset2bag, bag_size, max_indices] = cpu_results;
  if (offset2bag.numel() != indices.numel()) {
    offset2bag = bag_of_each_index(indices, offsets);
  }
  if (bag_size.size(0) != offsets.size(0)) {
    at::Tensor per_offset = at::zeros(offsets.sizes(), bag_size.options());
    per_offset.narrow(0, 0, bag_size.size(0)).copy_(bag_size);
    bag_size = per_offset;
  }
  if (mode != kModeMax) {
    max_indices = at::empty({0}, max_indices.options());
  }
  return cpu_results;
}

// Op: _embedding_bag or _embedding_bag_forward_only, which share a signature.
template <class Op>
EmbeddingBagResults embedding_bag(
    const at::Tensor& weight,
    const at::Tensor& indices,
    const at::Tensor& offsets,
    bool scale_grad_by_freq,
    int64_t mode,
    bool sparse,
    const std::optional<at::Tensor>& per_sample_weights,
    bool include_last_offset,
    int64_t padding_idx) {
  return with_cuda_auxiliary_results(
      CpuKernel<Op>::call(
          weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset,
          padding_idx),
      indices, offsets, mode);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag", TORCH_FN(embedding_bag<at::_ops::_embedding_bag>));
  m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag<at::_ops::_embedding_bag_forward_only>));
}

} // namespace vdev
