// Native vdev kernels for the fused LSTM and GRU cells. ATen's recurrent layers
// (RNN.cpp) send accelerator inputs, PrivateUse1 among them, to these "fused" cell
// ops, which have CUDA kernels only: without them nn.LSTM, nn.GRU, nn.LSTMCell and
// nn.GRUCell could not run on vdev. They are written with vdev ops on the cell's gate
// pre-activations, in the order PyTorch's LSTM and GRU weights use (LSTM: input,
// forget, cell, output; GRU: reset, update, new). Each forward keeps the activations
// its backward needs in a workspace tensor whose layout only these kernels read.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace vdev {
namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

// (hy, cy, workspace = the activated gates [i, f, g, o]).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(
      input_gates.sizes() == hidden_gates.sizes() && input_gates.dim() == 2 &&
          input_gates.size(1) == 4 * cx.size(-1),
      "_thnn_fused_lstm_cell: gates of sizes ", input_gates.sizes(), " and ", hidden_gates.sizes(),
      " do not match a cell state of sizes ", cx.sizes());
  const at::Tensor gates = with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias);
  std::vector<at::Tensor> chunks = gates.chunk(4, 1);
  const at::Tensor in_gate = chunks[0].sigmoid();
  const at::Tensor forget_gate = chunks[1].sigmoid();
  const at::Tensor cell_gate = chunks[2].tanh();
  const at::Tensor out_gate = chunks[3].sigmoid();
  at::Tensor cy = forget_gate * cx + in_gate * cell_gate;
  at::Tensor hy = out_gate * cy.tanh();
  return {std::move(hy), std::move(cy), at::cat({in_gate, forget_gate, cell_gate, out_gate}, 1)};
}

// (grad of the gate pre-activations, grad_cx, grad of the bias when the cell has one).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx,
    const at::Tensor& cy,
    const at::Tensor& workspace,
    bool has_bias) {
  const bool has_grad_hy = grad_hy.has_value() && grad_hy->defined();
  const bool has_grad_cy = grad_cy.has_value() && grad_cy->defined();
  if (!has_grad_hy && !has_grad_cy) {
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
  std::vector<at::Tensor> gates = workspace.chunk(4, 1);
  const at::Tensor& in_gate = gates[0];
  const at::Tensor& forget_gate = gates[1];
  const at::Tensor& cell_gate = gates[2];
  const at::Tensor& out_gate = gates[3];
  const at::Tensor tanh_cy = cy.tanh();

  at::Tensor grad_c = has_grad_cy ? *grad_cy : at::zeros_like(cy);
  at::Tensor grad_out_gate = at::zeros_like(out_gate);
  if (has_grad_hy) {
    grad_c = grad_c + *grad_hy * out_gate * (1 - tanh_cy * tanh_cy);
    grad_out_gate = *grad_hy * tanh_cy * out_gate * (1 - out_gate);
  }
  at::Tensor grad_gates = at::cat(
      {grad_c * cell_gate * in_gate * (1 - in_gate),
       grad_c * cx * forget_gate * (1 - forget_gate),
       grad_c * in_gate * (1 - cell_gate * cell_gate),
       grad_out_gate},
      1);
  at::Tensor grad_cx = grad_c * forget_gate;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

// (hy, workspace = [reset, update, new gate, hx, hidden new-gate pre-activation]).
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(
      input_gates.sizes() == hidden_gates.sizes() && input_gates.dim() == 2 &&
          input_gates.size(1) == 3 * hx.size(-1),
      "_thnn_fused_gru_cell: gates of sizes ", input_gates.sizes(), " and ", hidden_gates.sizes(),
      " do not match a hidden state of sizes ", hx.sizes());
  std::vector<at::Tensor> in = with_bias(input_gates, input_bias).chunk(3, 1);
  std::vector<at::Tensor> hidden = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset_gate = (in[0] + hidden[0]).sigmoid();
  const at::Tensor update_gate = (in[1] + hidden[1]).sigmoid();
  const at::Tensor new_gate = (in[2] + reset_gate * hidden[2]).tanh();
  at::Tensor hy = (hx - new_gate) * update_gate + new_gate;
  return {std::move(hy), at::cat({reset_gate, update_gate, new_gate, hx, hidden[2]}, 1)};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  std::vector<at::Tensor> saved = workspace.chunk(5, 1);
  const at::Tensor& reset_gate = saved[0];
  const at::Tensor& update_gate = saved[1];
  const at::Tensor& new_gate = saved[2];
  const at::Tensor& hx = saved[3];
  const at::Tensor& hidden_new = saved[4];

  const at::Tensor grad_new = grad_hy * (1 - update_gate) * (1 - new_gate * new_gate);
  const at::Tensor grad_update = grad_hy * (hx - new_gate) * update_gate * (1 - update_gate);
  const at::Tensor grad_reset = grad_new * hidden_new * reset_gate * (1 - reset_gate);
  at::Tensor grad_input_gates = at::cat({grad_reset, grad_update, grad_new}, 1);
  at::Tensor grad_hidden_gates = at::cat({grad_reset, grad_update, grad_new * reset_gate}, 1);
  at::Tensor grad_hx = grad_hy * update_gate;
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {std::move(grad_input_gates), std::move(grad_hidden_gates), std::move(grad_hx),
          std::move(grad_input_bias), std::move(grad_hidden_bias)};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

} // namespace vdev
