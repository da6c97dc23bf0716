// CUDA's fused attention ops, which ATen has for CUDA only and vdev computes by the
// math path, one sequence at a time in float32: FlashAttention's
// (_flash_attention_forward/_backward: torch.nn.attention.varlen.varlen_attn calls them
// on any device) and the memory-efficient kernel's (_efficient_attention_forward/
// _backward). What they compute is CUDA's:
//  - dense inputs (batch, seqlen, heads, head_dim), or packed variable-length ones with
//    cumulative sequence offsets (FlashAttention: (total, heads, head_dim); the
//    memory-efficient kernel: a batch of one);
//  - FlashAttention: grouped-query attention (fewer key/value heads), a causal mask and
//    sliding windows aligned to the bottom-right corner, per-sequence key counts
//    (seqused_k), float16 and bfloat16 only, logsumexp (batch, heads, seqlen_q) or
//    (heads, total_q);
//  - the memory-efficient kernel: an additive bias (and its gradient), causal masks from
//    the top-left (custom_mask_type 1) or bottom-right (2) corner, logsumexp (batch or
//    sequences, heads, seqlen_q rounded up to 32) when asked for;
//  - a row with no key to attend has output 0 and logsumexp +inf;
//  - dropout draws its masks from a generator seeded with a seed taken from the device's
//    generator (returned as FlashAttention's rng_state[0], or as philox_seed), so the
//    backward draws the same ones.
// Refused with an error: ALiBi slopes, paged key/value caches (block_table), debug
// masks, and the memory-efficient kernel's window_size.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/logsumexp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

namespace vdev {
namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();

// One sequence of a batch: its queries and keys within the inputs.
struct Sequence {
  int64_t index;
  int64_t q_begin;
  int64_t q_length;
  int64_t k_begin;
  int64_t k_length;
};

// Where each sequence's queries and keys are: (batch, seqlen, heads, dim) inputs, or
// packed (total, heads, dim) ones with cumulative offsets.
class Layout {
 public:
  Layout(
      const char* op,
      const at::Tensor& query,
      const at::Tensor& key,
      const std::optional<at::Tensor>& cum_seq_q,
      const std::optional<at::Tensor>& cum_seq_k,
      const std::optional<at::Tensor>& used_keys)
      : packed_(cum_seq_q.has_value() && cum_seq_q->defined()) {
    TORCH_CHECK(
        packed_ == (cum_seq_k.has_value() && cum_seq_k->defined()), op,
        ": the cumulative sequence lengths of queries and keys must be given together");
    TORCH_CHECK(
        query.dim() == (packed_ ? 3 : 4) && key.dim() == query.dim(), op, ": expected query and key of ",
        packed_ ? "(total, heads, head_dim)" : "(batch, seqlen, heads, head_dim)", ", got ", query.sizes(), " and ",
        key.sizes());
    const bool has_used_keys = used_keys.has_value() && used_keys->defined();
    const at::Tensor key_counts = has_used_keys ? used_keys->to(at::kCPU, at::kLong) : at::Tensor();
    if (packed_) {
      const at::Tensor q_offsets = cum_seq_q->to(at::kCPU, at::kLong);
      const at::Tensor k_offsets = cum_seq_k->to(at::kCPU, at::kLong);
      TORCH_CHECK(
          q_offsets.dim() == 1 && q_offsets.numel() == k_offsets.numel() && q_offsets.numel() >= 1, op,
          ": the cumulative sequence lengths must be 1-D, of batch + 1 offsets");
      const int64_t* q = q_offsets.const_data_ptr<int64_t>();
      const int64_t* k = k_offsets.const_data_ptr<int64_t>();
      for (int64_t s = 0; s + 1 < q_offsets.numel(); ++s) {
        const int64_t k_length = has_used_keys ? key_counts[s].item<int64_t>() : k[s + 1] - k[s];
        sequences_.push_back(Sequence{s, q[s], q[s + 1] - q[s], k[s], k_length});
      }
    } else {
      for (int64_t b = 0; b < query.size(0); ++b) {
        const int64_t k_length = has_used_keys ? key_counts[b].item<int64_t>() : key.size(1);
        sequences_.push_back(Sequence{b, 0, query.size(1), 0, k_length});
      }
    }
  }

  const std::vector<Sequence>& sequences() const {
    return sequences_;
  }

  // A sequence's queries (q: true) or keys of `tensor`, (length, heads, head_dim).
  at::Tensor part(const at::Tensor& tensor, const Sequence& sequence, bool q) const {
    const at::Tensor batch = packed_ ? tensor : tensor.select(0, sequence.index);
    return q ? batch.narrow(0, sequence.q_begin, sequence.q_length)
             : batch.narrow(0, sequence.k_begin, sequence.k_length);
  }

  // A sequence's part of a (batch, heads, queries, keys) bias, (heads, queries, keys).
  at::Tensor bias_part(const at::Tensor& bias, const Sequence& sequence) const {
    return bias.select(0, packed_ ? 0 : sequence.index)
        .narrow(1, sequence.q_begin, sequence.q_length)
        .narrow(2, sequence.k_begin, sequence.k_length);
  }

  bool packed() const {
    return packed_;
  }

 private:
  bool packed_;
  std::vector<Sequence> sequences_;
};

// The keys each query attends, the score scale and dropout.
struct Masking {
  double scale;
  bool bottom_right;  // the diagonal of a causal mask or window ends at the last key
  int64_t window_left;  // keys before the diagonal a query attends; -1: all
  int64_t window_right;  // keys after it; -1: all
  double dropout_p;
  uint64_t seed;
};

double softmax_scale(const at::Tensor& query, std::optional<double> scale) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
}

// A seed for the dropout masks, from the device's generator (torch.manual_seed decides it).
uint64_t dropout_seed(const at::Tensor& query, double dropout_p) {
  if (dropout_p <= 0) {
    return 0;
  }
  return static_cast<uint64_t>(
      at::randint(std::numeric_limits<int64_t>::max(), {}, query.options().dtype(at::kLong)).item<int64_t>());
}

// (heads, length, head_dim) in float32, key/value heads repeated for each query head
// of their group.
at::Tensor heads_first(const at::Tensor& part, int64_t query_heads) {
  const at::Tensor heads = part.transpose(0, 1).to(at::kFloat);
  const int64_t group = query_heads / part.size(1);
  return group > 1 ? heads.repeat_interleave(group, 0) : heads;
}

// Scaled, biased and masked scores of one sequence, (heads, queries, keys).
at::Tensor masked_scores(
    const at::Tensor& q,
    const at::Tensor& k,
    const std::optional<at::Tensor>& bias,
    const Masking& masking) {
  at::Tensor scores = at::matmul(q, k.transpose(1, 2)).mul_(masking.scale);
  if (bias.has_value()) {
    scores.add_(*bias);
  }
  const int64_t q_length = q.size(1);
  const int64_t k_length = k.size(1);
  const at::TensorOptions index = q.options().dtype(at::kLong);
  const at::Tensor diagonal =
      at::arange(q_length, index).unsqueeze(1) + (masking.bottom_right ? k_length - q_length : 0);
  const at::Tensor keys = at::arange(k_length, index).unsqueeze(0);
  at::Tensor allowed = at::ones({q_length, k_length}, q.options().dtype(at::kBool));
  if (masking.window_right >= 0) {
    allowed = allowed.logical_and(keys <= diagonal + masking.window_right);
  }
  if (masking.window_left >= 0) {
    allowed = allowed.logical_and(keys >= diagonal - masking.window_left);
  }
  return scores.masked_fill_(allowed.logical_not(), -kInfinity);
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

// One sequence forward: (output (heads, queries, value_dim), logsumexp (heads, queries)).
std::pair<at::Tensor, at::Tensor> attend(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const std::optional<at::Tensor>& bias,
    const Masking& masking,
    Dropout& dropout) {
  const at::Tensor scores = masked_scores(q, k, bias, masking);
  at::Tensor logsumexp = at::logsumexp(scores, -1);
  logsumexp.masked_fill_(logsumexp.isneginf(), kInfinity);
  at::Tensor probabilities = at::exp(scores - logsumexp.unsqueeze(-1));
  if (masking.dropout_p > 0) {
    probabilities = probabilities * dropout.next(probabilities);
  }
  return {at::matmul(probabilities, v), logsumexp};
}

struct Gradients {
  at::Tensor query;
  at::Tensor key;
  at::Tensor value;
  at::Tensor scores;  // of the biased scores: the bias's gradient
};

// One sequence backward, from the forward's output and logsumexp.
Gradients attend_backward(
    const at::Tensor& d_out,
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& out,
    const at::Tensor& logsumexp,
    const Masking& masking,
    Dropout& dropout) {
  const at::Tensor probabilities = at::exp(masked_scores(q, k, bias, masking) - logsumexp.unsqueeze(-1));
  at::Tensor kept = probabilities;
  at::Tensor d_probabilities = at::matmul(d_out, v.transpose(1, 2));
  if (masking.dropout_p > 0) {
    const at::Tensor keep = dropout.next(probabilities);
    kept = probabilities * keep;
    d_probabilities = d_probabilities * keep;
  }
  at::Tensor d_scores = probabilities * (d_probabilities - (d_out * out).sum(-1, true));
  return Gradients{
      at::matmul(d_scores, k).mul_(masking.scale), at::matmul(d_scores.transpose(1, 2), q).mul_(masking.scale),
      at::matmul(kept.transpose(1, 2), d_out), std::move(d_scores)};
}

// (heads, length, dim) gradients summed over the query heads of each key/value head's
// group, as (length, kv_heads, dim).
at::Tensor per_kv_head(const at::Tensor& grad, int64_t kv_heads) {
  const int64_t group = grad.size(0) / kv_heads;
  return grad.view({kv_heads, group, grad.size(1), grad.size(2)}).sum(1).transpose(0, 1);
}

// ---- FlashAttention

at::Tensor flash_logsumexp(const at::Tensor& logsumexp, const Layout& layout, const Sequence& sequence) {
  return layout.packed() ? logsumexp.narrow(1, sequence.q_begin, sequence.q_length)
                         : logsumexp.select(0, sequence.index).narrow(1, 0, sequence.q_length);
}

Masking flash_masking(
    const at::Tensor& query,
    std::optional<double> scale,
    bool is_causal,
    std::optional<c10::SymInt> window_size_left,
    std::optional<c10::SymInt> window_size_right,
    double dropout_p,
    uint64_t seed) {
  const int64_t left = window_size_left.has_value() ? window_size_left->expect_int() : -1;
  const int64_t right = is_causal ? 0 : window_size_right.has_value() ? window_size_right->expect_int() : -1;
  return Masking{softmax_scale(query, scale), true, left, right, dropout_p, seed};
}

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
      !(alibi_slopes.has_value() && alibi_slopes->defined()),
      "_flash_attention_forward on vdev: alibi_slopes is not supported");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(block_table.has_value() && block_table->defined()),
      "_flash_attention_forward on vdev: paged key/value caches (block_table) are not supported");
  TORCH_CHECK_NOT_IMPLEMENTED(!return_debug_mask, "_flash_attention_forward on vdev: return_debug_mask is not supported");
  const Layout layout("_flash_attention_forward", query, key, cum_seq_q, cum_seq_k, seqused_k);
  const uint64_t seed = dropout_seed(query, dropout_p);
  const Masking masking =
      flash_masking(query, scale, is_causal, window_size_left, window_size_right, dropout_p, seed);
  at::Tensor output = at::zeros_like(query);
  const at::TensorOptions float_options = query.options().dtype(at::kFloat);
  at::Tensor logsumexp = layout.packed() ? at::empty({query.size(1), query.size(0)}, float_options)
                                         : at::empty({query.size(0), query.size(2), query.size(1)}, float_options);
  Dropout dropout(masking);
  const int64_t heads = query.size(-2);
  for (const Sequence& sequence : layout.sequences()) {
    const auto [attended, row_logsumexp] = attend(
        heads_first(layout.part(query, sequence, true), heads), heads_first(layout.part(key, sequence, false), heads),
        heads_first(layout.part(value, sequence, false), heads), std::nullopt, masking, dropout);
    layout.part(output, sequence, true).copy_(attended.transpose(0, 1));
    flash_logsumexp(logsumexp, layout, sequence).copy_(row_logsumexp);
  }
  const at::Tensor rng_state =
      at::tensor({static_cast<int64_t>(seed), int64_t{0}}, at::kLong).to(query.device()).view(at::kUInt64);
  return {output, logsumexp, rng_state, at::empty({}, query.options().dtype(at::kUInt64)), at::empty({0}, query.options())};
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
  const Layout layout("_flash_attention_backward", query, key, cum_seq_q, cum_seq_k, std::nullopt);
  const uint64_t seed = dropout_p > 0 ? static_cast<uint64_t>(rng_state.view(at::kLong)[0].item<int64_t>()) : 0;
  const Masking masking =
      flash_masking(query, scale, is_causal, window_size_left, window_size_right, dropout_p, seed);
  at::Tensor grad_query = at::zeros_like(query);
  at::Tensor grad_key = at::zeros_like(key);
  at::Tensor grad_value = at::zeros_like(value);
  Dropout dropout(masking);
  const int64_t heads = query.size(-2);
  for (const Sequence& sequence : layout.sequences()) {
    const Gradients grads = attend_backward(
        heads_first(layout.part(grad_out, sequence, true), heads), heads_first(layout.part(query, sequence, true), heads),
        heads_first(layout.part(key, sequence, false), heads), heads_first(layout.part(value, sequence, false), heads),
        std::nullopt, heads_first(layout.part(out, sequence, true), heads),
        flash_logsumexp(logsumexp, layout, sequence), masking, dropout);
    layout.part(grad_query, sequence, true).copy_(grads.query.transpose(0, 1));
    layout.part(grad_key, sequence, false).copy_(per_kv_head(grads.key, key.size(-2)));
    layout.part(grad_value, sequence, false).copy_(per_kv_head(grads.value, value.size(-2)));
  }
  return {grad_query, grad_key, grad_value};
}

// ---- the memory-efficient kernel: (batch, seqlen, heads, dim) inputs, packed ones as a
// batch of one.

constexpr int64_t kLogsumexpAlignment = 32;

// The memory-efficient kernel's custom_mask_type values.
constexpr int64_t kNoCustomMask = 0;
constexpr int64_t kCausalFromTopLeft = 1;

Masking efficient_masking(
    const at::Tensor& query,
    std::optional<double> scale,
    int64_t custom_mask_type,
    double dropout_p,
    uint64_t seed) {
  TORCH_CHECK(
      custom_mask_type >= 0 && custom_mask_type <= 2,
      "_efficient_attention_forward: custom_mask_type must be 0 (none), 1 (causal from the top left) or 2 (causal "
      "from the bottom right), got ",
      custom_mask_type);
  const int64_t right = custom_mask_type == 0 ? -1 : 0;
  return Masking{softmax_scale(query, scale), custom_mask_type == 2, -1, right, dropout_p, seed};
}

// The layout of a batch of sequences, (batch, seqlen, heads, dim), or of packed ones.
Layout efficient_layout(
    const char* op,
    const at::Tensor& query,
    const at::Tensor& key,
    const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& cu_seqlens_k,
    const std::optional<at::Tensor>& seqlen_k) {
  const bool packed = cu_seqlens_q.has_value() && cu_seqlens_q->defined();
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4, op, ": expected (batch, seqlen, heads, head_dim) inputs");
  TORCH_CHECK(!packed || query.size(0) == 1, op, ": packed sequences (cu_seqlens_q) need a batch of one");
  return packed ? Layout(op, query.select(0, 0), key.select(0, 0), cu_seqlens_q, cu_seqlens_k, seqlen_k)
                : Layout(op, query, key, cu_seqlens_q, cu_seqlens_k, seqlen_k);
}

// The inputs as the layout indexes them.
at::Tensor laid_out(const at::Tensor& tensor, const Layout& layout) {
  return layout.packed() ? tensor.select(0, 0) : tensor;
}

std::optional<at::Tensor> expanded_bias(
    const std::optional<at::Tensor>& bias,
    const at::Tensor& query,
    const at::Tensor& key) {
  if (!bias.has_value() || !bias->defined()) {
    return std::nullopt;
  }
  return bias->expand({query.size(0), query.size(2), query.size(1), key.size(1)});
}

// A sequence's bias in float32, (heads, queries, keys).
std::optional<at::Tensor> bias_of(
    const std::optional<at::Tensor>& full_bias,
    const Layout& layout,
    const Sequence& sequence) {
  if (!full_bias.has_value()) {
    return std::nullopt;
  }
  return layout.bias_part(*full_bias, sequence).to(at::kFloat);
}

// CUDA's memory-efficient kernels are instantiated for these dtypes only, and refuse the
// others with this error (before any work), forward and backward alike.
void check_efficient_attention_dtype(const at::Tensor& query) {
  const at::ScalarType dtype = query.scalar_type();
  TORCH_CHECK(
      dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
      "Only fp32, half & bf16 supported at the moment");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt> efficient_attention_forward(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& cu_seqlens_k,
    std::optional<c10::SymInt> max_seqlen_q,
    std::optional<c10::SymInt> max_seqlen_k,
    double dropout_p,
    int64_t custom_mask_type,
    bool compute_log_sumexp,
    std::optional<double> scale,
    const std::optional<at::Tensor>& seqlen_k,
    std::optional<int64_t> window_size) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !window_size.has_value(), "_efficient_attention_forward on vdev: window_size is not supported");
  check_efficient_attention_dtype(query);
  TORCH_CHECK(
      query.size(2) == key.size(2) && key.size(2) == value.size(2),
      "_efficient_attention_forward: query, key and value must have the same number of heads");
  const char* op = "_efficient_attention_forward";
  const Layout layout = efficient_layout(op, query, key, cu_seqlens_q, cu_seqlens_k, seqlen_k);
  const bool packed = layout.packed();
  const int64_t longest_q = packed ? max_seqlen_q.value_or(query.size(1)).expect_int() : query.size(1);
  const int64_t longest_k = packed ? max_seqlen_k.value_or(key.size(1)).expect_int() : key.size(1);
  const uint64_t seed = dropout_seed(query, dropout_p);
  const Masking masking = efficient_masking(query, scale, custom_mask_type, dropout_p, seed);
  const int64_t heads = query.size(2);
  at::Tensor output = at::zeros({query.size(0), query.size(1), heads, value.size(3)}, query.options());
  const int64_t logsumexp_length =
      compute_log_sumexp ? (longest_q + kLogsumexpAlignment - 1) / kLogsumexpAlignment * kLogsumexpAlignment : 0;
  at::Tensor logsumexp = at::full(
      {static_cast<int64_t>(packed ? layout.sequences().size() : query.size(0)), heads, logsumexp_length}, kInfinity,
      query.options().dtype(at::kFloat));
  const std::optional<at::Tensor> full_bias = expanded_bias(bias, query, key);
  Dropout dropout(masking);
  for (const Sequence& sequence : layout.sequences()) {
    const std::optional<at::Tensor> sequence_bias = bias_of(full_bias, layout, sequence);
    const auto [attended, row_logsumexp] = attend(
        heads_first(layout.part(laid_out(query, layout), sequence, true), heads),
        heads_first(layout.part(laid_out(key, layout), sequence, false), heads),
        heads_first(layout.part(laid_out(value, layout), sequence, false), heads), sequence_bias, masking, dropout);
    layout.part(laid_out(output, layout), sequence, true).copy_(attended.transpose(0, 1));
    if (compute_log_sumexp) {
      logsumexp.select(0, sequence.index).narrow(1, 0, sequence.q_length).copy_(row_logsumexp);
    }
  }
  const at::TensorOptions seeds = at::TensorOptions().dtype(at::kLong);
  return {
      output, logsumexp, at::scalar_tensor(static_cast<int64_t>(seed), seeds), at::scalar_tensor(0, seeds),
      c10::SymInt(longest_q), c10::SymInt(longest_k)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> efficient_attention_backward(
    const at::Tensor& grad_out,
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& out,
    const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& cu_seqlens_k,
    c10::SymInt /*max_seqlen_q*/,
    c10::SymInt /*max_seqlen_k*/,
    const at::Tensor& logsumexp,
    double dropout_p,
    const at::Tensor& philox_seed,
    const at::Tensor& /*philox_offset*/,
    int64_t custom_mask_type,
    bool bias_requires_grad,
    std::optional<double> scale,
    std::optional<int64_t> /*num_splits_key: a speed setting*/,
    std::optional<int64_t> window_size,
    bool /*shared_storage_dqdkdv: a memory layout*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !window_size.has_value(), "_efficient_attention_backward on vdev: window_size is not supported");
  check_efficient_attention_dtype(query);
  const char* op = "_efficient_attention_backward";
  const Layout layout = efficient_layout(op, query, key, cu_seqlens_q, cu_seqlens_k, std::nullopt);
  const uint64_t seed = dropout_p > 0 ? static_cast<uint64_t>(philox_seed.item<int64_t>()) : 0;
  const Masking masking = efficient_masking(query, scale, custom_mask_type, dropout_p, seed);
  const int64_t heads = query.size(2);
  at::Tensor grad_query = at::zeros_like(query);
  at::Tensor grad_key = at::zeros_like(key);
  at::Tensor grad_value = at::zeros_like(value);
  const std::optional<at::Tensor> full_bias = expanded_bias(bias, query, key);
  at::Tensor grad_bias = full_bias.has_value() && bias_requires_grad
      ? at::zeros(full_bias->sizes(), full_bias->options())
      : at::Tensor();
  Dropout dropout(masking);
  for (const Sequence& sequence : layout.sequences()) {
    const std::optional<at::Tensor> sequence_bias = bias_of(full_bias, layout, sequence);
    const Gradients grads = attend_backward(
        heads_first(layout.part(laid_out(grad_out, layout), sequence, true), heads),
        heads_first(layout.part(laid_out(query, layout), sequence, true), heads),
        heads_first(layout.part(laid_out(key, layout), sequence, false), heads),
        heads_first(layout.part(laid_out(value, layout), sequence, false), heads), sequence_bias,
        heads_first(layout.part(laid_out(out, layout), sequence, true), heads),
        logsumexp.select(0, sequence.index).narrow(1, 0, sequence.q_length), masking, dropout);
    layout.part(laid_out(grad_query, layout), sequence, true).copy_(grads.query.transpose(0, 1));
    layout.part(laid_out(grad_key, layout), sequence, false).copy_(grads.key.transpose(0, 1));
    layout.part(laid_out(grad_value, layout), sequence, false).copy_(grads.value.transpose(0, 1));
    if (grad_bias.defined()) {
      layout.bias_part(grad_bias, sequence).copy_(grads.scores);
    }
  }
  return {grad_query, grad_key, grad_value, grad_bias};
}

// scaled_dot_product_attention's memory-efficient path (Attention.cpp chooses it as
// CUDA does): inputs (batch, heads, seqlen, head_dim), run by the kernel above on their
// (batch, seqlen, heads, head_dim) views, as CUDA's wrappers do.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> scaled_dot_product_efficient_attention(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& bias,
    bool compute_log_sumexp,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale) {
  const int64_t mask_type = is_causal ? kCausalFromTopLeft : kNoCustomMask;
  auto [output, logsumexp, seed, offset, longest_q, longest_k] = efficient_attention_forward(
      query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), bias, std::nullopt, std::nullopt,
      std::nullopt, std::nullopt, dropout_p, mask_type, compute_log_sumexp, scale, std::nullopt, std::nullopt);
  return {output.transpose(1, 2), logsumexp, seed, offset};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> scaled_dot_product_efficient_attention_backward(
    const at::Tensor& grad_out,
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const at::Tensor& bias,
    const at::Tensor& out,
    const at::Tensor& logsumexp,
    const at::Tensor& philox_seed,
    const at::Tensor& philox_offset,
    double dropout_p,
    std::array<bool, 4> grad_input_mask,
    bool is_causal,
    std::optional<double> scale) {
  if (!grad_out.defined()) {
    return {};
  }
  const int64_t mask_type = is_causal ? kCausalFromTopLeft : kNoCustomMask;
  auto [grad_query, grad_key, grad_value, grad_bias] = efficient_attention_backward(
      grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
      bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt, out.transpose(1, 2), std::nullopt,
      std::nullopt, query.size(2), key.size(2), logsumexp, dropout_p, philox_seed, philox_offset, mask_type,
      grad_input_mask[3], scale, std::nullopt, std::nullopt, false);
  return {grad_query.transpose(1, 2), grad_key.transpose(1, 2), grad_value.transpose(1, 2), grad_bias};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_flash_attention_forward", TORCH_FN(flash_attention_forward));
  m.impl("_flash_attention_backward", TORCH_FN(flash_attention_backward));
  m.impl("_efficient_attention_forward", TORCH_FN(efficient_attention_forward));
  m.impl("_efficient_attention_backward", TORCH_FN(efficient_attention_backward));
  m.impl("_scaled_dot_product_efficient_attention", TORCH_FN(scaled_dot_product_efficient_attention));
  m.impl("_scaled_dot_product_efficient_attention_backward", TORCH_FN(scaled_dot_product_efficient_attention_backward));
}

} // namespace vdev
