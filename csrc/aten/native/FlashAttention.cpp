// FlashAttention's ops, _flash_attention_forward and _flash_attention_backward, which
// ATen has for CUDA only: torch.nn.attention.varlen.varlen_attn calls them on any
// device, as do code paths written for accelerators. vdev computes what CUDA's kernels
// compute, by the math path, one sequence at a time in float32: dense inputs
// (batch, seqlen, heads, head_dim) or packed variable-length ones (total, heads,
// head_dim) with cumulative sequence offsets; grouped-query attention (fewer key/value
// heads); a causal mask and sliding windows aligned to the bottom-right corner, as
// FlashAttention aligns them; a row with no key to attend has output 0 and logsumexp
// +inf; per-sequence key counts (seqused_k); dropout. The logsumexp is (batch, heads,
// seqlen_q), or (heads, total_q) for packed inputs, in float32. Dropout draws its
// masks from a generator seeded with rng_state[0], a seed taken from the device's
// generator, so the backward draws the same ones. ALiBi slopes and paged key/value
// caches (block_table) are refused.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

namespace vdev {
namespace {

// One sequence of a batch: its queries and keys within the inputs.
struct Sequence {
  int64_t batch;
  int64_t q_begin;
  int64_t q_length;
  int64_t k_begin;
  int64_t k_length;
};

class Layout {
 public:
  Layout(
      const at::Tensor& query,
      const at::Tensor& key,
      const std::optional<at::Tensor>& cum_seq_q,
      const std::optional<at::Tensor>& cum_seq_k,
      const std::optional<at::Tensor>& seqused_k)
      : packed_(cum_seq_q.has_value() && cum_seq_q->defined()) {
    TORCH_CHECK(
        packed_ == (cum_seq_k.has_value() && cum_seq_k->defined()),
        "_flash_attention_forward: cum_seq_q and cum_seq_k must be given together");
    TORCH_CHECK(
        query.dim() == (packed_ ? 3 : 4) && key.dim() == query.dim(),
        "_flash_attention_forward: expected query and key of ", packed_ ? "(total, heads, head_dim)" :
        "(batch, seqlen, heads, head_dim)", ", got ", query.sizes(), " and ", key.sizes());
    const bool has_used_keys = seqused_k.has_value() && seqused_k->defined();
    const at::Tensor used_keys = has_used_keys ? seqused_k->to(at::kCPU, at::kLong) : at::Tensor();
    if (packed_) {
      const at::Tensor q_offsets = cum_seq_q->to(at::kCPU, at::kLong);
      const at::Tensor k_offsets = cum_seq_k->to(at::kCPU, at::kLong);
      TORCH_CHECK(
          q_offsets.dim() == 1 && q_offsets.numel() == k_offsets.numel() && q_offsets.numel() >= 1,
          "_flash_attention_forward: cum_seq_q and cum_seq_k must be 1-D of batch + 1 offsets");
      const int64_t* q = q_offsets.const_data_ptr<int64_t>();
      const int64_t* k = k_offsets.const_data_ptr<int64_t>();
      for (int64_t b = 0; b + 1 < q_offsets.numel(); ++b) {
        const int64_t k_length = has_used_keys ? used_keys[b].item<int64_t>() : k[b + 1] - k[b];
        sequences_.push_back(Sequence{b, q[b], q[b + 1] - q[b], k[b], k_length});
      }
    } else {
      for (int64_t b = 0; b < query.size(0); ++b) {
        const int64_t k_length = has_used_keys ? used_keys[b].item<int64_t>() : key.size(1);
        sequences_.push_back(Sequence{b, 0, query.size(1), 0, k_length});
      }
    }
  }

  const std::vector<Sequence>& sequences() const {
    return sequences_;
  }

  // A sequence's queries (q: true) or keys of `tensor`, (length, heads, head_dim).
  at::Tensor part(const at::Tensor& tensor, const Sequence& sequence, bool q) const {
    const at::Tensor batch = packed_ ? tensor : tensor.select(0, sequence.batch);
    return q ? batch.narrow(0, sequence.q_begin, sequence.q_length)
             : batch.narrow(0, sequence.k_begin, sequence.k_length);
  }

  // A sequence's logsumexp, (heads, length).
  at::Tensor logsumexp(const at::Tensor& tensor, const Sequence& sequence) const {
    return packed_ ? tensor.narrow(1, sequence.q_begin, sequence.q_length)
                   : tensor.select(0, sequence.batch).narrow(1, 0, sequence.q_length);
  }

  at::Tensor empty_logsumexp(const at::Tensor& query) const {
    const at::TensorOptions options = query.options().dtype(at::kFloat);
    return packed_ ? at::empty({query.size(1), query.size(0)}, options)
                   : at::empty({query.size(0), query.size(2), query.size(1)}, options);
  }

 private:
  bool packed_;
  std::vector<Sequence> sequences_;
};

struct Masking {
  double scale;
  int64_t window_left;  // -1: unbounded
  int64_t window_right;
  double dropout_p;
  uint64_t seed;
};

Masking masking(
    const at::Tensor& query,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right,
    uint64_t seed) {
  const int64_t left = window_size_left.has_value() ? window_size_left->expect_int() : -1;
  const int64_t right = is_causal ? 0 : window_size_right.has_value() ? window_size_right->expect_int() : -1;
  const double softmax_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  return Masking{softmax_scale, left, right, dropout_p, seed};
}

// (heads, length, head_dim) in float32, key/value heads repeated for each query head
// of their group.
at::Tensor heads_first(const at::Tensor& part, int64_t query_heads) {
  const at::Tensor heads = part.transpose(0, 1).to(at::kFloat);
  const int64_t group = query_heads / part.size(1);
  return group > 1 ? heads.repeat_interleave(group, 0) : heads;
}

// The (queries, keys) a query may attend, bottom-right aligned as in FlashAttention.
at::Tensor allowed(int64_t q_length, int64_t k_length, const Masking& masking, const at::TensorOptions& options) {
  const at::Tensor diagonal =
      at::arange(q_length, options.dtype(at::kLong)).unsqueeze(1) + (k_length - q_length);
  const at::Tensor keys = at::arange(k_length, options.dtype(at::kLong)).unsqueeze(0);
  at::Tensor mask = at::ones({q_length, k_length}, options.dtype(at::kBool));
  if (masking.window_right >= 0) {
    mask = mask.logical_and(keys <= diagonal + masking.window_right);
  }
  if (masking.window_left >= 0) {
    mask = mask.logical_and(keys >= diagonal - masking.window_left);
  }
  return mask;
}

// Scaled, masked scores of one sequence, (heads, queries, keys).
at::Tensor masked_scores(const at::Tensor& q, const at::Tensor& k, const Masking& masking) {
  const at::Tensor scores = at::matmul(q, k.transpose(1, 2)).mul_(masking.scale);
  const at::Tensor mask = allowed(q.size(1), k.size(1), masking, q.options());
  return scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
}

// The dropout keep masks, scaled by 1 / (1 - p), drawn in sequence order.
class Dropout {
 public:
  explicit Dropout(const Masking& masking)
      : p_(masking.dropout_p), generator_(at::make_generator<at::CPUGeneratorImpl>(masking.seed)) {}

  at::Tensor next(const at::Tensor& like) {
    at::Tensor keep = at::empty(like.sizes(), at::TensorOptions().dtype(at::kFloat));
    keep.bernoulli_(1.0 - p_, generator_);
    return keep.div_(1.0 - p_).to(like.device());
  }

 private:
  double p_;
  at::Generator generator_;
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> flash_attention_forward(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& cum_seq_q,
    const std::optional<at::Tensor>& cum_seq_k,
    c10::SymInt /*max_q*/,
    c10::SymInt /*max_k*/,
    double dropout_p,
    bool is_causal,
    bool return_debug_mask,
    std::optional<double> scale,
    std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right,
    const std::optional<at::Tensor>& seqused_k,
    const std::optional<at::Tensor>& alibi_slopes,
    const std::optional<at::Tensor>& block_table,
    std::optional<int64_t> /*num_splits: a speed setting*/) {
  TORCH_CHECK(
      query.scalar_type() == at::kHalf || query.scalar_type() == at::kBFloat16,
      "FlashAttention only support fp16 and bf16 data type");
  TORCH_CHECK(
      key.scalar_type() == query.scalar_type() && value.scalar_type() == query.scalar_type(),
      "query and key must have the same dtype");
  TORCH_CHECK(query.size(-1) <= 256, "FlashAttention forward only supports head dimension at most 256");
  TORCH_CHECK(
      query.size(-2) % key.size(-2) == 0 && key.size(-2) == value.size(-2),
      "Number of heads in key/value must divide number of heads in query");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(alibi_slopes.has_value() && alibi_slopes->defined()), "_flash_attention_forward on vdev: alibi_slopes is not supported");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(block_table.has_value() && block_table->defined()),
      "_flash_attention_forward on vdev: paged key/value caches (block_table) are not supported");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !return_debug_mask, "_flash_attention_forward on vdev: return_debug_mask is not supported");
  const Layout layout(query, key, cum_seq_q, cum_seq_k, seqused_k);
  uint64_t seed = 0;
  if (dropout_p > 0) {
    seed = static_cast<uint64_t>(
        at::randint(std::numeric_limits<int64_t>::max(), {}, query.options().dtype(at::kLong)).item<int64_t>());
  }
  const Masking mask = masking(query, dropout_p, is_causal, scale, window_size_left, window_size_right, seed);
  at::Tensor output = at::zeros_like(query);
  at::Tensor logsumexp = layout.empty_logsumexp(query);
  Dropout dropout(mask);
  const int64_t heads = query.size(-2);
  for (const Sequence& sequence : layout.sequences()) {
    const at::Tensor scores = masked_scores(
        heads_first(layout.part(query, sequence, true), heads), heads_first(layout.part(key, sequence, false), heads),
        mask);
    at::Tensor row_logsumexp = at::logsumexp(scores, -1);
    row_logsumexp.masked_fill_(row_logsumexp.isneginf(), std::numeric_limits<float>::infinity());
    at::Tensor probabilities = at::exp(scores - row_logsumexp.unsqueeze(-1));
    if (dropout_p > 0) {
      probabilities = probabilities * dropout.next(probabilities);
    }
    const at::Tensor attended = at::matmul(probabilities, heads_first(layout.part(value, sequence, false), heads));
    layout.part(output, sequence, true).copy_(attended.transpose(0, 1));
    layout.logsumexp(logsumexp, sequence).copy_(row_logsumexp);
  }
  const at::Tensor rng_state =
      at::tensor({static_cast<int64_t>(seed), int64_t{0}}, at::kLong).to(query.device()).view(at::kUInt64);
  const at::Tensor unused = at::empty({}, query.options().dtype(at::kUInt64));
  return {output, logsumexp, rng_state, unused, at::empty({0}, query.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& grad_out,
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const at::Tensor& out,
    const at::Tensor& logsumexp,
    const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k,
    c10::SymInt /*max_q*/,
    c10::SymInt /*max_k*/,
    double dropout_p,
    bool is_causal,
    const at::Tensor& rng_state,
    const at::Tensor& /*unused*/,
    std::optional<double> scale,
    std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right) {
  const Layout layout(
      query, key, cum_seq_q.defined() ? std::optional<at::Tensor>(cum_seq_q) : std::nullopt,
      cum_seq_k.defined() ? std::optional<at::Tensor>(cum_seq_k) : std::nullopt, std::nullopt);
  const uint64_t seed =
      dropout_p > 0 ? static_cast<uint64_t>(rng_state.view(at::kLong)[0].item<int64_t>()) : uint64_t{0};
  const Masking mask = masking(query, dropout_p, is_causal, scale, window_size_left, window_size_right, seed);
  at::Tensor grad_query = at::zeros_like(query);
  at::Tensor grad_key = at::zeros_like(key);
  at::Tensor grad_value = at::zeros_like(value);
  Dropout dropout(mask);
  const int64_t heads = query.size(-2);
  const int64_t kv_heads = key.size(-2);
  // (heads, length, dim) summed over the query heads of each key/value head's group.
  auto per_kv_head = [heads, kv_heads](const at::Tensor& grad) {
    return grad.view({kv_heads, heads / kv_heads, grad.size(1), grad.size(2)}).sum(1);
  };
  for (const Sequence& sequence : layout.sequences()) {
    const at::Tensor q = heads_first(layout.part(query, sequence, true), heads);
    const at::Tensor k = heads_first(layout.part(key, sequence, false), heads);
    const at::Tensor v = heads_first(layout.part(value, sequence, false), heads);
    const at::Tensor d_out = heads_first(layout.part(grad_out, sequence, true), heads);
    const at::Tensor o = heads_first(layout.part(out, sequence, true), heads);
    const at::Tensor probabilities =
        at::exp(masked_scores(q, k, mask) - layout.logsumexp(logsumexp, sequence).unsqueeze(-1));
    at::Tensor kept = probabilities;
    at::Tensor d_probabilities = at::matmul(d_out, v.transpose(1, 2));
    if (dropout_p > 0) {
      const at::Tensor keep = dropout.next(probabilities);
      kept = probabilities * keep;
      d_probabilities = d_probabilities * keep;
    }
    const at::Tensor row_dot = (d_out * o).sum(-1, true);
    const at::Tensor d_scores = probabilities * (d_probabilities - row_dot);
    layout.part(grad_query, sequence, true).copy_(at::matmul(d_scores, k).mul_(mask.scale).transpose(0, 1));
    layout.part(grad_key, sequence, false)
        .copy_(per_kv_head(at::matmul(d_scores.transpose(1, 2), q).mul_(mask.scale)).transpose(0, 1));
    layout.part(grad_value, sequence, false)
        .copy_(per_kv_head(at::matmul(kept.transpose(1, 2), d_out)).transpose(0, 1));
  }
  return {grad_query, grad_key, grad_value};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_flash_attention_forward", TORCH_FN(flash_attention_forward));
  m.impl("_flash_attention_backward", TORCH_FN(flash_attention_backward));
}

} // namespace vdev
