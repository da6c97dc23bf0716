// Launches for the ops models use that have no ATen C++ meta kernel (relu, where,
// abs, logical_and, index_select, index_put's _index_put_impl_, layer and batch norm, convolution,
// embedding backward, dropout's backward, the CPU's flash attention and its backward). vdev's own meta
// functions size their outputs on the host and check what the CPU kernel checks, so bad
// arguments raise at the call; an argument they are not sure of raises here too, and the
// op then runs on the calling thread, where the CPU kernel decides. Where the op has no
// out= overload with a CPU kernel of its own, a CPU kernel here writes the outputs the
// host allocated: ATen's kernel itself where it can write them (relu as clamp_min), else
// ATen's functional kernel and a copy (convolution, layer norm, batch norm's backward,
// embedding backward, flash attention: their CPU kernels allocate their results).
#include "aten/MetaKernels.h"
#include "aten/native/Normalization.h"

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/result_type_native.h>
#include <ATen/OpMathType.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_backward_overrideable_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/convolution_overrideable_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/where_ops.h>
#include <c10/util/flat_hash_map.h>

namespace vdev {
namespace {

constexpr c10::DispatchKeySet kCpu(c10::DispatchKey::CPU);

at::Tensor empty_meta(at::IntArrayRef sizes, c10::ScalarType dtype, c10::MemoryFormat format = c10::MemoryFormat::Contiguous) {
  return at::detail::empty_meta(sizes, dtype, format);
}

at::Tensor empty_meta_like(const at::Tensor& tensor, c10::MemoryFormat format) {
  return empty_meta(tensor.sizes(), tensor.scalar_type(), format);
}

// A result ATen's functional CPU kernel made, copied into the output the host allocated.
void copy_into(at::Tensor& output, const at::Tensor& result) {
  if (output.defined()) {
    at::_ops::copy_::redispatch(kCpu, output, result, false);
  }
}

// --- relu: the CPU kernel is clamp_min(self, 0) after refusing bool.

void check_relu(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
}

at::Tensor relu_meta(const at::Tensor& self) {
  check_relu(self);
  return at::meta::clamp_min(self, 0);
}

at::Tensor& relu__meta(at::Tensor& self) {
  check_relu(self);
  return at::meta::clamp_min_(self, 0);
}

at::Tensor& relu_cpu(const at::Tensor& self, at::Tensor& out) {
  return at::_ops::clamp_min_out::redispatch(kCpu, self, 0, out);
}

// --- where(condition, self, other): sized by the TensorIterator where.self_out builds.

// `output` undefined: a new one. An out= argument is the iterator's output, so its
// overlap with the inputs raises at the call.
at::TensorIterator where_iterator(
    const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, const at::Tensor& output) {
  TORCH_CHECK(
      condition.scalar_type() == at::kBool,
      "where expected condition to be a boolean tensor, but got a tensor with dtype ", condition.scalar_type());
  return at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .declare_static_dtype(at::native::result_type(self, other))
      .add_output(output)
      .add_const_input(condition)
      .add_input(self)
      .add_input(other)
      .build();
}

at::Tensor where_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  return where_iterator(condition, self, other, at::Tensor()).output();
}

at::Tensor& where_out_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  const c10::ScalarType result_type = at::native::result_type(self, other);
  TORCH_CHECK(
      out.scalar_type() == result_type, "Expected out type to be ", result_type, " but got ", out.scalar_type());
  where_iterator(condition, self, other, out);
  return out;
}

// --- abs and logical_and: not structured in ATen; their out= overloads have CPU kernels.

// The dtypes their CPU kernels take (abs: not bool); for others they run on the calling
// thread, where the CPU kernel raises.
void check_kernel_dtype(const char* op, c10::ScalarType dtype, bool takes_bool) {
  const bool taken = (takes_bool && dtype == at::kBool) || dtype == at::kByte || dtype == at::kChar ||
      dtype == at::kShort || dtype == at::kInt || dtype == at::kLong || dtype == at::kHalf ||
      dtype == at::kBFloat16 || dtype == at::kFloat || dtype == at::kDouble || dtype == at::kComplexFloat ||
      dtype == at::kComplexDouble;
  TORCH_CHECK(taken, op, ": dtype ", dtype, " is left to the CPU kernel on the calling thread");
}

// As ATen's abs: a complex input gives a result of its real value type laid out like
// empty_like; any other one the unary TensorIterator's result.
at::Tensor abs_meta(const at::Tensor& self) {
  check_kernel_dtype("abs", self.scalar_type(), /*takes_bool=*/false);
  if (self.is_complex()) {
    const c10::ScalarType real = c10::toRealValueType(self.scalar_type());
    if (self.is_non_overlapping_and_dense()) {
      return at::detail::empty_strided_meta(self.sizes(), self.strides(), real, std::nullopt, std::nullopt, std::nullopt);
    }
    return empty_meta(self.sizes(), real, self.suggest_memory_format());
  }
  at::Tensor output;
  return at::TensorIterator::unary_op(output, self).output();
}

// As ATen's logical_and: the comparison TensorIterator's bool result.
at::Tensor logical_and_meta(const at::Tensor& self, const at::Tensor& other) {
  check_kernel_dtype("logical_and", self.scalar_type(), /*takes_bool=*/true);
  check_kernel_dtype("logical_and", other.scalar_type(), /*takes_bool=*/true);
  at::Tensor output;
  return at::TensorIterator::comparison_op(output, self, other).output();
}

// --- index_select(self, dim, index): index_select.out has a CPU kernel.

at::Tensor index_select_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(
      index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
      "index_select(): Expected dtype int32 or int64 for index");
  const int64_t count = index.numel();
  TORCH_CHECK_INDEX(
      self.dim() > 0 || count == 1, "index_select(): Index to scalar can have only 1 value, got ", count,
      " value(s)");
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) {
    sizes[c10::maybe_wrap_dim(dim, self.dim())] = count;
  }
  return empty_meta(sizes, self.scalar_type());
}

// --- _index_put_impl_(self, indices, values, accumulate, unsafe): in place, and the
// op's own CPU kernel writes self. Its sizes are self's; what the meta function decides
// is whether the CPU kernel accepts the arguments whatever the data, as ATen's checks
// them (too many indices, index dtypes, a mask's sizes, indices that do not broadcast,
// values that do not broadcast to the indexed result or differ in dtype). Anything it
// raises leaves the op to the calling thread, where the CPU kernel raises its own error
// or decides. A bool mask stays a mask: the kernel turns it into indices (nonzero) on
// the stream, so the host reads no data.

// The dims of self that the indices select, with a mask's dims each standing for one,
// and the sizes the index tensors broadcast to (a mask's count of true elements taken
// as 1: only values that broadcast over any count are taken).
struct IndexedDims {
  std::vector<int64_t> dims;
  c10::DimVector broadcast;
  bool mask = false;
};

IndexedDims indexed_dims(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  IndexedDims indexed;
  int64_t dim = 0;
  int defined = 0;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      ++dim;
      continue;
    }
    ++defined;
    const c10::ScalarType dtype = index->scalar_type();
    if (dtype == at::kBool) {
      // A 0-dim mask adds a dim; a uint8 mask warns: both stay on the calling thread.
      TORCH_CHECK(
          index->dim() > 0 && dim + index->dim() <= self.dim() &&
              index->sizes() == self.sizes().slice(dim, index->dim()),
          "_index_put_impl_: a mask vdev leaves to the calling thread");
      for (int64_t j = 0; j < index->dim(); ++j) {
        indexed.dims.push_back(dim++);
      }
      indexed.mask = true;
      indexed.broadcast = at::infer_size_dimvector(indexed.broadcast, c10::IntArrayRef{1});
    } else {
      TORCH_CHECK(
          dtype == at::kLong || dtype == at::kInt, "_index_put_impl_: index dtype vdev leaves to the calling thread");
      indexed.dims.push_back(dim++);
      indexed.broadcast = at::infer_size_dimvector(indexed.broadcast, index->sizes());
    }
  }
  // With other indices, whether the mask's count broadcasts with them depends on data.
  TORCH_CHECK(!indexed.mask || defined == 1, "_index_put_impl_: a mask with other indices");
  return indexed;
}

// The sizes of the indexed result that values broadcast to, as ATen's AdvancedIndex
// builds it: the broadcast index sizes in place of adjacent indexed dims, else in front.
c10::DimVector index_put_result_sizes(const at::Tensor& self, const IndexedDims& indexed) {
  const std::vector<int64_t>& dims = indexed.dims;
  bool empty_dim = false;
  for (int64_t dim : dims) {
    empty_dim = empty_dim || self.size(dim) == 0;
  }
  // ATen's IndexError "index is out of bounds for dimension with size 0".
  TORCH_CHECK(
      !empty_dim || c10::multiply_integers(indexed.broadcast) == 0, "_index_put_impl_: indexing an empty dimension");
  const bool adjacent = dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  c10::DimVector sizes;
  if (!adjacent) {
    sizes.append(indexed.broadcast.begin(), indexed.broadcast.end());
  }
  for (int64_t dim = 0; dim < self.dim(); ++dim) {
    if (adjacent && dim == dims.front()) {
      sizes.append(indexed.broadcast.begin(), indexed.broadcast.end());
    }
    if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
      sizes.push_back(self.size(dim));
    }
  }
  return sizes;
}

at::Tensor& index_put_impl_meta(
    at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, const at::Tensor& values, bool accumulate,
    bool /*unsafe*/) {
  TORCH_CHECK(indices.size() <= static_cast<size_t>(self.dim()), "_index_put_impl_: too many indices");
  const IndexedDims indexed = indexed_dims(self, indices);
  TORCH_CHECK(!indexed.dims.empty(), "_index_put_impl_: no index tensor");
  // The CPU kernel fills a single mask with a one-element value as masked_fill_ does (the
  // value read on the stream, in self's dtype).
  if (indexed.mask && !accumulate && values.numel() == 1) {
    return self;
  }
  at::assert_no_overlap(self, values);
  for (const std::optional<at::Tensor>& index : indices) {
    if (index.has_value() && index->defined()) {
      at::assert_no_overlap(self, *index);
    }
  }
  TORCH_CHECK(
      values.scalar_type() == self.scalar_type() &&
          at::is_expandable_to(values.sizes(), index_put_result_sizes(self, indexed)),
      "_index_put_impl_: values vdev leaves to the calling thread");
  return self;
}

// --- embedding_dense_backward: its CPU kernel accumulates into zeros it allocates.

at::Tensor embedding_dense_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights, c10::SymInt /*padding_idx*/,
    bool /*scale_grad_by_freq*/) {
  at::checkScalarTypes("embedding_backward", at::TensorArg(indices, "indices", 2), {at::kLong, at::kInt});
  TORCH_CHECK(grad_output.dim() > 0 && num_weights.expect_int() >= 0, "embedding_backward: invalid arguments");
  return empty_meta({num_weights.expect_int(), grad_output.size(-1)}, grad_output.scalar_type());
}

at::Tensor& embedding_dense_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights, c10::SymInt padding_idx,
    bool scale_grad_by_freq, at::Tensor& out) {
  copy_into(
      out, at::_ops::embedding_dense_backward::redispatch(
               kCpu, grad_output, indices, std::move(num_weights), std::move(padding_idx), scale_grad_by_freq));
  return out;
}

// --- native_layer_norm and its backward: their CPU kernels allocate their results (and
// ATen's LayerNormKernel, which could write given ones, is not exported).

at::Tensor value_or_undefined(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? *tensor : at::Tensor();
}

// The mean and rstd as the CPU kernel shapes them: the input's leading sizes, then ones.
std::vector<int64_t> layer_norm_stat_sizes(const at::Tensor& input, size_t normalized_dims) {
  std::vector<int64_t> sizes = input.sizes().vec();
  std::fill(sizes.end() - static_cast<std::ptrdiff_t>(normalized_dims), sizes.end(), 1);
  return sizes;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_meta(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double /*eps*/) {
  const at::Tensor gamma = value_or_undefined(weight);
  const at::Tensor beta = value_or_undefined(bias);
  const bool mixed_type = at::native::is_mixed_type(input, gamma, beta);
  if (mixed_type) {
    at::native::check_mixed_data_type(input, gamma, beta);
  }
  at::native::_check_layer_norm_inputs(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), gamma, beta);
  const c10::ScalarType stat_type = at::native::param_scalar_type(input, mixed_type);
  const std::vector<int64_t> stat_sizes = layer_norm_stat_sizes(input, normalized_shape.size());
  return {
      empty_meta(input.sizes(), input.scalar_type()), empty_meta(stat_sizes, stat_type),
      empty_meta(stat_sizes, stat_type)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_layer_norm_cpu(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, at::Tensor& out, at::Tensor& mean, at::Tensor& rstd) {
  const auto [out_result, mean_result, rstd_result] =
      at::_ops::native_layer_norm::redispatch(kCpu, input, normalized_shape, weight, bias, eps);
  copy_into(out, out_result);
  copy_into(mean, mean_result);
  copy_into(rstd, rstd_result);
  return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  const at::Tensor gamma = value_or_undefined(weight);
  const at::Tensor beta = value_or_undefined(bias);
  const auto [rows, columns] =
      at::native::_check_layer_norm_inputs(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), gamma, beta);
  // The CPU kernel reads these as flat buffers of the input's and the statistics' sizes.
  TORCH_CHECK(
      grad_out.sizes() == input.sizes() && mean.numel() == rows && rstd.numel() == rows &&
          (!output_mask[1] || gamma.defined()) && (!output_mask[2] || beta.defined() || gamma.defined()),
      "native_layer_norm_backward: arguments do not match the input");
  return {
      output_mask[0] ? empty_meta(input.sizes(), input.scalar_type()) : at::Tensor(),
      output_mask[1] ? empty_meta_like(gamma, c10::MemoryFormat::Contiguous) : at::Tensor(),
      output_mask[2] ? empty_meta_like(beta.defined() ? beta : gamma, c10::MemoryFormat::Contiguous) : at::Tensor()};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_layer_norm_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask, at::Tensor& grad_input,
    at::Tensor& grad_weight, at::Tensor& grad_bias) {
  const auto [input_result, weight_result, bias_result] = at::_ops::native_layer_norm_backward::redispatch(
      kCpu, grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask);
  copy_into(grad_input, input_result);
  copy_into(grad_weight, weight_result);
  copy_into(grad_bias, bias_result);
  return {grad_input, grad_weight, grad_bias};
}

// --- native_batch_norm: native_batch_norm.out's CPU kernel writes the outputs; the backward copies.

int64_t batch_norm_channels(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dimensions");
  return input.size(1);
}

void check_channel_vector(const std::optional<at::Tensor>& tensor, int64_t channels) {
  TORCH_CHECK(
      !tensor.has_value() || !tensor->defined() || (tensor->dim() == 1 && tensor->size(0) == channels),
      "batch_norm: expected a parameter or statistic of ", channels, " elements");
}

c10::ScalarType batch_norm_stat_type(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var) {
  const bool mixed_type = at::native::is_mixed_type(
      input, value_or_undefined(weight), value_or_undefined(bias), value_or_undefined(running_mean),
      value_or_undefined(running_var));
  if (mixed_type) {
    at::native::check_mixed_data_type(
        input, value_or_undefined(weight), value_or_undefined(bias), value_or_undefined(running_mean),
        value_or_undefined(running_var));
  }
  return at::native::param_scalar_type(input, mixed_type);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_meta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double /*momentum*/, double /*eps*/) {
  const int64_t channels = batch_norm_channels(input);
  TORCH_CHECK(
      at::isFloatingType(input.scalar_type()) && !at::isComplexType(input.scalar_type()),
      "batch_norm: expected a floating-point input");
  // native_batch_norm.out gives strided inputs or statistics wrong results (OpInfo's
  // non-contiguous samples); the functional CPU kernel takes them on the calling thread.
  bool dense = input.is_contiguous(input.suggest_memory_format());
  for (const auto* tensor : {&weight, &bias, &running_mean, &running_var}) {
    check_channel_vector(*tensor, channels);
    dense = dense && (!tensor->has_value() || !(*tensor)->defined() || (*tensor)->is_contiguous());
  }
  TORCH_CHECK(dense, "native_batch_norm: strided arguments vdev runs on the calling thread");
  TORCH_CHECK(
      training || (running_mean.has_value() && running_mean->defined() && running_var.has_value() &&
                   running_var->defined()),
      "batch_norm: running_mean and running_var must be defined in evaluation mode");
  // In evaluation the statistics are CUDA's (fill_eval_statistics), in the accumulation type.
  const c10::ScalarType stat_type = training
      ? batch_norm_stat_type(input, weight, bias, running_mean, running_var)
      : at::toOpMathType(input.scalar_type());
  return {
      empty_meta_like(input, input.suggest_memory_format()), empty_meta({channels}, stat_type),
      empty_meta({channels}, stat_type)};
}

// In evaluation the CPU kernel reads no statistics from its saved ones, but wants them in
// its parameter type, which may not be the accumulation type the host gave them.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_cpu(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps, at::Tensor& output, at::Tensor& save_mean, at::Tensor& save_invstd) {
  if (training) {
    return at::_ops::native_batch_norm_out::redispatch(
        kCpu, input, weight, bias, running_mean, running_var, training, momentum, eps, output, save_mean,
        save_invstd);
  }
  const auto cpu_stat_options =
      save_mean.options().dtype(batch_norm_stat_type(input, weight, bias, running_mean, running_var));
  at::Tensor unused_mean = at::empty({0}, cpu_stat_options);
  at::Tensor unused_invstd = at::empty({0}, cpu_stat_options);
  at::_ops::native_batch_norm_out::redispatch(
      kCpu, input, weight, bias, running_mean, running_var, training, momentum, eps, output, unused_mean,
      unused_invstd);
  fill_eval_statistics(*running_mean, *running_var, eps, save_mean, save_invstd);
  return {output, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train,
    double /*eps*/, std::array<bool, 3> output_mask) {
  const int64_t channels = batch_norm_channels(input);
  TORCH_CHECK(
      grad_out.sizes() == input.sizes() && grad_out.scalar_type() == input.scalar_type(),
      "batch_norm_backward: grad_out does not match the input");
  for (const auto* tensor : {&weight, &running_mean, &running_var}) {
    check_channel_vector(*tensor, channels);
  }
  const auto defined = [](const std::optional<at::Tensor>& tensor) { return tensor.has_value() && tensor->defined(); };
  // In evaluation the backward reads the running statistics, not the saved ones.
  if (train) {
    check_channel_vector(save_mean, channels);
    check_channel_vector(save_invstd, channels);
  }
  TORCH_CHECK(
      train ? defined(save_mean) && defined(save_invstd) : defined(running_mean) && defined(running_var),
      "batch_norm_backward: missing statistics");
  const c10::ScalarType stat_type = at::native::param_scalar_type(
      input,
      at::native::is_mixed_type(
          input, value_or_undefined(weight), value_or_undefined(running_mean), value_or_undefined(running_var),
          value_or_undefined(save_mean), value_or_undefined(save_invstd)));
  return {
      output_mask[0] ? empty_meta_like(input, input.suggest_memory_format()) : at::Tensor(),
      output_mask[1] ? empty_meta({channels}, stat_type) : at::Tensor(),
      output_mask[2] ? empty_meta({channels}, stat_type) : at::Tensor()};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> native_batch_norm_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask, at::Tensor& grad_input, at::Tensor& grad_weight, at::Tensor& grad_bias) {
  const auto [input_result, weight_result, bias_result] = at::_ops::native_batch_norm_backward::redispatch(
      kCpu, grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask);
  copy_into(grad_input, input_result);
  copy_into(grad_weight, weight_result);
  copy_into(grad_bias, bias_result);
  return {grad_input, grad_weight, grad_bias};
}

// --- convolution: ATen's CPU convolutions (mkldnn, slow_conv2d, ...) allocate their
// results, so the kernel copies them into the outputs.

struct ConvolutionGeometry {
  std::vector<int64_t> output_sizes;
  c10::MemoryFormat format;
};

ConvolutionGeometry convolution_geometry(
    const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding, const c10::SymInt& groups) {
  const int64_t dims = input.dim();
  const size_t spatial = dims - 2;
  const int64_t group_count = groups.expect_int();
  // Anything else (unexpanded or invalid parameters, empty tensors, mixed dtypes) the
  // CPU kernel handles on the calling thread.
  TORCH_CHECK(
      dims >= 3 && weight.dim() == dims && stride.size() == spatial && padding.size() == spatial &&
          dilation.size() == spatial && output_padding.size() == spatial && group_count > 0 && input.numel() > 0 &&
          weight.numel() > 0 && input.scalar_type() == weight.scalar_type() &&
          at::isFloatingType(input.scalar_type()),
      "convolution: arguments vdev sizes on the calling thread");
  const std::vector<int64_t> strides = C10_AS_INTARRAYREF_SLOW(stride).vec();
  const std::vector<int64_t> paddings = C10_AS_INTARRAYREF_SLOW(padding).vec();
  const std::vector<int64_t> dilations = C10_AS_INTARRAYREF_SLOW(dilation).vec();
  const std::vector<int64_t> output_paddings = C10_AS_INTARRAYREF_SLOW(output_padding).vec();
  for (size_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(
        strides[i] > 0 && paddings[i] >= 0 && dilations[i] > 0 && output_paddings[i] >= 0 &&
            (transposed || output_paddings[i] == 0),
        "convolution: invalid stride, padding or dilation");
  }
  TORCH_CHECK(
      transposed ? input.size(1) == weight.size(0) && weight.size(0) % group_count == 0
                 : input.size(1) == weight.size(1) * group_count && weight.size(0) % group_count == 0,
      "convolution: input channels do not match the weight and groups");
  std::vector<int64_t> output_sizes = transposed
      ? at::native::conv_input_size(
            input.sizes(), weight.sizes(), paddings, output_paddings, strides, dilations, group_count)
      : at::native::conv_output_size(input.sizes(), weight.sizes(), paddings, strides, dilations);
  for (int64_t size : output_sizes) {
    TORCH_CHECK(size > 0, "convolution: the output would be empty");
  }
  // As ATen's CPU convolutions: channels-last if the input or the weight is.
  const c10::MemoryFormat channels_last =
      dims == 4 ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::ChannelsLast3d;
  const bool is_channels_last = (dims == 4 || dims == 5) &&
      (input.suggest_memory_format() == channels_last || weight.suggest_memory_format() == channels_last);
  return {std::move(output_sizes), is_channels_last ? channels_last : c10::MemoryFormat::Contiguous};
}

at::Tensor convolution_meta(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const ConvolutionGeometry geometry =
      convolution_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  TORCH_CHECK(
      !bias.has_value() || !bias->defined() ||
          (bias->dim() == 1 && bias->size(0) == geometry.output_sizes[1] &&
           bias->scalar_type() == input.scalar_type()),
      "convolution: the bias does not match the output channels");
  return empty_meta(geometry.output_sizes, input.scalar_type(), geometry.format);
}

at::Tensor& convolution_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
    c10::SymIntArrayRef output_padding, c10::SymInt groups, at::Tensor& out) {
  copy_into(
      out, at::_ops::convolution::redispatch(
               kCpu, input, weight, bias, stride, padding, dilation, transposed, output_padding, std::move(groups)));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  const ConvolutionGeometry geometry =
      convolution_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  TORCH_CHECK(
      grad_output.sizes() == at::IntArrayRef(geometry.output_sizes) &&
          grad_output.scalar_type() == input.scalar_type(),
      "convolution_backward: grad_output does not match the convolution's output");
  return {
      output_mask[0] ? empty_meta_like(input, geometry.format) : at::Tensor(),
      output_mask[1] ? empty_meta_like(weight, geometry.format) : at::Tensor(),
      output_mask[2] ? empty_meta({geometry.output_sizes[1]}, input.scalar_type()) : at::Tensor()};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> convolution_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask, at::Tensor& grad_input, at::Tensor& grad_weight,
    at::Tensor& grad_bias) {
  const c10::SymInt bias_size = grad_output.sym_size(1);
  const auto [input_result, weight_result, bias_result] = at::_ops::convolution_backward::redispatch(
      kCpu, grad_output, input, weight, c10::SymIntArrayRef(&bias_size, 1), stride, padding, dilation, transposed,
      output_padding, std::move(groups), output_mask);
  copy_into(grad_input, input_result);
  copy_into(grad_weight, weight_result);
  copy_into(grad_bias, bias_result);
  return {grad_input, grad_weight, grad_bias};
}

// --- native_dropout_backward(grad_output, mask, scale): the CPU kernel computes
// (grad_output * mask) * scale, which mul.out then mul_ write into the output as such.

at::Tensor native_dropout_backward_meta(const at::Tensor& grad_output, const at::Tensor& mask, double /*scale*/) {
  // The masks native_dropout makes; other dtypes (whose product the scale may promote)
  // the CPU kernel takes on the calling thread.
  TORCH_CHECK(
      at::isFloatingType(grad_output.scalar_type()) && mask.scalar_type() == at::kBool,
      "native_dropout_backward: arguments vdev sizes on the calling thread");
  return at::meta::mul(grad_output, mask);
}

at::Tensor& native_dropout_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& mask, double scale, at::Tensor& out) {
  at::_ops::mul_out::redispatch(kCpu, grad_output, mask, out);
  // The scale as the CPU kernel's `* scale` takes it: a wrapped number, the second
  // operand, multiplied in the op math type (mul_.Scalar would round it to bfloat16).
  return at::_ops::mul__Tensor::redispatch(kCpu, out, at::native::wrapped_scalar_tensor(scale));
}

// --- _scaled_dot_product_flash_attention_for_cpu and its backward: the CPU kernels
// allocate their results (the output laid out as the query, the log-sum-exp and the
// gradients as (batch, length, heads, ...) buffers transposed to (batch, heads,
// length, ...)), so the kernels here copy.

// A (batch, heads, length, ...) result laid out as the CPU kernel's transposed buffer.
at::Tensor empty_meta_heads_second(at::IntArrayRef sizes, c10::ScalarType dtype) {
  std::vector<int64_t> buffer_sizes = sizes.vec();
  std::swap(buffer_sizes[1], buffer_sizes[2]);
  return empty_meta(buffer_sizes, dtype).transpose(1, 2);
}

// What the CPU kernels check, and what their flash kernels assume of the shapes (one
// head count, one key length, a mask that broadcasts to the scores); anything else
// raises here and the CPU kernel decides on the calling thread.
void check_flash_attention_cpu(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p,
    const std::optional<at::Tensor>& attn_mask) {
  const c10::ScalarType dtype = query.scalar_type();
  TORCH_CHECK(
      c10::isFloatingType(dtype), "scaled_dot_product_attention_flash_attention: Expected data type in FP32, FP64, ",
      "BF16, FP16, but got ", dtype, " instead.");
  TORCH_CHECK(
      query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
      "scaled_dot_product_attention_flash_attention: Accept only 4 dims inputs shape of {B, H, T, K}");
  TORCH_CHECK(dropout_p == 0.0, "scaled_dot_product_attention_flash_attention: Currently do not support dropout > 0");
  TORCH_CHECK(
      query.size(3) == value.size(3) && key.size(3) == value.size(3),
      "scaled_dot_product_attention_flash_attention: Q/K/V should have the same head size");
  TORCH_CHECK(
      key.scalar_type() == dtype && value.scalar_type() == dtype && query.size(0) == key.size(0) &&
          key.size(0) == value.size(0) && query.size(1) == key.size(1) && key.size(1) == value.size(1) &&
          key.size(2) == value.size(2),
      "scaled_dot_product_attention_flash_attention: arguments vdev sizes on the calling thread");
  if (attn_mask.has_value() && attn_mask->defined()) {
    const at::Tensor& mask = *attn_mask;
    const c10::ScalarType mask_type = mask.scalar_type();
    TORCH_CHECK(
        mask_type == at::kBool || mask_type == at::kFloat || mask_type == at::kBFloat16 || mask_type == at::kHalf ||
            mask_type == dtype,
        "scaled_dot_product_attention_flash_attention: Attention mask is the same data type as query");
    TORCH_CHECK(
        mask.dim() == 2 || mask.dim() == 4,
        "scaled_dot_product_attention_flash_attention: Attention mask dim in {2, 4}");
    const std::array<int64_t, 4> scores{query.size(0), query.size(1), query.size(2), key.size(2)};
    for (int64_t i = 0; i < mask.dim(); ++i) {
      const int64_t size = mask.size(-1 - i);
      TORCH_CHECK(
          size == 1 || size == scores[3 - i],
          "scaled_dot_product_attention_flash_attention: the mask does not broadcast to the scores (vdev leaves it ",
          "to the calling thread)");
    }
  }
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu_meta(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p, bool /*is_causal*/,
    const std::optional<at::Tensor>& attn_mask, std::optional<double> /*scale*/) {
  check_flash_attention_cpu(query, key, value, dropout_p, attn_mask);
  return {
      at::empty_like(query), empty_meta_heads_second(query.sizes().slice(0, 3), at::toOpMathType(query.scalar_type()))};
}

std::tuple<at::Tensor&, at::Tensor&> flash_attention_cpu(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double dropout_p, bool is_causal,
    const std::optional<at::Tensor>& attn_mask, std::optional<double> scale, at::Tensor& output,
    at::Tensor& logsumexp) {
  const auto [output_result, logsumexp_result] = at::_ops::_scaled_dot_product_flash_attention_for_cpu::redispatch(
      kCpu, query, key, value, dropout_p, is_causal, attn_mask, scale);
  copy_into(output, output_result);
  copy_into(logsumexp, logsumexp_result);
  return {output, logsumexp};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_cpu_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, double dropout_p, bool /*is_causal*/,
    const std::optional<at::Tensor>& attn_mask, std::optional<double> /*scale*/) {
  check_flash_attention_cpu(query, key, value, dropout_p, attn_mask);
  TORCH_CHECK(
      grad_out.sizes() == query.sizes() && out.sizes() == query.sizes() &&
          grad_out.scalar_type() == query.scalar_type() && out.scalar_type() == query.scalar_type() &&
          logsumexp.sizes() == query.sizes().slice(0, 3) &&
          logsumexp.scalar_type() == at::toOpMathType(query.scalar_type()),
      "_scaled_dot_product_flash_attention_for_cpu_backward: grad_out, out or logsumexp does not match the query");
  return {
      empty_meta_heads_second(query.sizes(), query.scalar_type()),
      empty_meta_heads_second(key.sizes(), key.scalar_type()),
      empty_meta_heads_second(value.sizes(), value.scalar_type())};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> flash_attention_cpu_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& logsumexp, double dropout_p, bool is_causal,
    const std::optional<at::Tensor>& attn_mask, std::optional<double> scale, at::Tensor& grad_query,
    at::Tensor& grad_key, at::Tensor& grad_value) {
  const auto [query_result, key_result, value_result] =
      at::_ops::_scaled_dot_product_flash_attention_for_cpu_backward::redispatch(
          kCpu, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale);
  copy_into(grad_query, query_result);
  copy_into(grad_key, key_result);
  copy_into(grad_value, value_result);
  return {grad_query, grad_key, grad_value};
}

using LaunchTable = ska::flat_hash_map<c10::OperatorName, HandwrittenLaunch>;

template <class Op>
c10::OperatorName name_of() {
  return c10::OperatorName(Op::name, Op::overload_name);
}

// An op whose out= overload (or, in place, the op itself) has a CPU kernel.
template <class Op, typename Op::schema* meta>
void add_launch(LaunchTable& table) {
  table.emplace(
      name_of<Op>(),
      HandwrittenLaunch{
          c10::KernelFunction::makeFromUnboxedFunction(c10::CompileTimeFunctionPointer<typename Op::schema, meta>()),
          c10::KernelFunction()});
}

// An op whose outputs vdev's CPU kernel `cpu` writes: it takes the op's arguments, then
// its outputs (the schema of the op's out= overload, where it has one).
template <class Op, typename Op::schema* meta, auto* cpu>
void add_launch(LaunchTable& table) {
  table.emplace(
      name_of<Op>(),
      HandwrittenLaunch{
          c10::KernelFunction::makeFromUnboxedFunction(c10::CompileTimeFunctionPointer<typename Op::schema, meta>()),
          c10::KernelFunction::makeFromUnboxedFunction(
              c10::CompileTimeFunctionPointer<std::remove_pointer_t<decltype(cpu)>, cpu>())});
}

LaunchTable make_launch_table() {
  namespace ops = at::_ops;
  LaunchTable table;
  add_launch<ops::relu, relu_meta, relu_cpu>(table);
  add_launch<ops::relu_, relu__meta>(table);
  add_launch<ops::where_self, where_meta>(table);
  add_launch<ops::where_self_out, where_out_meta>(table);
  add_launch<ops::index_select, index_select_meta>(table);
  add_launch<ops::_index_put_impl_, index_put_impl_meta>(table);
  add_launch<ops::abs, abs_meta>(table);
  add_launch<ops::logical_and, logical_and_meta>(table);
  add_launch<ops::embedding_dense_backward, embedding_dense_backward_meta, embedding_dense_backward_cpu>(table);
  add_launch<ops::native_layer_norm, native_layer_norm_meta, native_layer_norm_cpu>(table);
  add_launch<ops::native_layer_norm_backward, native_layer_norm_backward_meta, native_layer_norm_backward_cpu>(table);
  add_launch<ops::native_batch_norm, native_batch_norm_meta, native_batch_norm_cpu>(table);
  add_launch<ops::native_batch_norm_backward, native_batch_norm_backward_meta, native_batch_norm_backward_cpu>(table);
  add_launch<ops::convolution_overrideable, convolution_meta, convolution_cpu>(table);
  add_launch<ops::convolution_backward_overrideable, convolution_backward_meta, convolution_backward_cpu>(table);
  add_launch<ops::native_dropout_backward, native_dropout_backward_meta, native_dropout_backward_cpu>(table);
  add_launch<ops::_scaled_dot_product_flash_attention_for_cpu, flash_attention_cpu_meta, flash_attention_cpu>(table);
  add_launch<
      ops::_scaled_dot_product_flash_attention_for_cpu_backward, flash_attention_cpu_backward_meta,
      flash_attention_cpu_backward>(table);
  return table;
}

} // namespace

const HandwrittenLaunch* handwritten_launch(const c10::OperatorName& name) {
  static const LaunchTable* const table = new LaunchTable(make_launch_table());
  auto found = table->find(name);
  return found == table->end() ? nullptr : &found->second;
}

} // namespace vdev
