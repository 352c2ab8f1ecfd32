// tessera/core/math/mlp.hpp — the network: parameter layout, forward and backward passes, the loss.
//
// A `network` is the arithmetic of one MLP architecture (the full model or a subnet). It owns no
// parameters, gradients or activations: callers pass spans over memory they own (on the device, the
// arena), and no method allocates.
//
// Flat parameter layout (the wire order and the file order), for each layer l = 1..L+1 in turn:
//   W_l  n_l × n_{l-1} floats, row-major (row i = the input weights of neuron i, as nn.Linear.weight)
//   b_l  n_l floats
//   and, for hidden layers of an arch with layer_norm:  gain_l  n_l floats,  shift_l  n_l floats.
//
// Forward, for a batch X (rows × n0, row-major):
//   Z_l = s_l · A_{l-1} W_lᵀ + b_l;  hidden: A_l = relu(Z_l) or relu(gain ⊙ LN(Z_l) + shift);
//   output: Z_{L+1} are the logits (softmax cross-entropy) or predictions (MSE).
//
//   core::network net(spec.full_arch());
//   std::vector<float> ws(net.workspace_floats(64)), grads(net.param_count());
//   auto loss = net.forward_backward(params, grads, x, y, 64, ws);   // mean loss of the batch
//   core::sgd_step(opt, params, grads, velocity);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/conv.hpp"
#include "tessera/core/math/layers.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/optimizer.hpp"

namespace tessera::core {

// Where one layer's tensors start in the flat parameter buffer (offsets in floats). A convolution's
// weight rows are its output channels, each kernel_h × kernel_w × in_channels (OHWI); a dense layer
// after a flatten has one column per position and channel (position-major). Either way a column is
// tap × n_{l-1} + unit, taps being the kernel's positions or the flattened positions (1 for an MLP):
// IST keeps whole taps of the units it keeps.
struct layer_slots {
  std::int64_t rows = 0;  // n_l
  std::int64_t cols = 0;  // taps × n_{l-1}
  std::int64_t taps = 1;
  std::size_t weight = 0;
  std::size_t bias = 0;
  std::size_t gain = 0;   // only meaningful if has_norm
  std::size_t shift = 0;  // only meaningful if has_norm
  bool has_norm = false;
};

// A shape operation between parametric layers (max_pool, global_avg_pool, flatten), as it runs.
struct shape_step {
  layer_spec layer{};
  tensor_shape in{}, out{};
};

// One parametric layer as the network runs it: its kind, units (n_l), the units it reads (n_{l-1}) and
// their taps, its input and output shapes, a convolution's geometry, and the shape operations that
// make its input from the previous layer's activations.
struct layer_plan {
  layer_kind kind = layer_kind::dense;
  std::int64_t units = 0, in_units = 0, taps = 1;
  tensor_shape in{}, out{};
  conv_geometry conv{};
  std::vector<shape_step> before{};
};
// The parametric layers of a valid arch, first to last (an MLP: dense layers of its widths).
[[nodiscard]] std::vector<layer_plan> plan_layers(const mlp_arch& arch);

// Floats needed for all parameters of `arch`.
[[nodiscard]] std::size_t param_count(const mlp_arch& arch) noexcept;
// The slots of every layer (index 0 = layer 1).
[[nodiscard]] std::vector<layer_slots> param_slots(const mlp_arch& arch);
// Where layer l's parameters start in the flat layout (0-based; param_count for l = layer_count()).
[[nodiscard]] std::size_t layer_start(std::span<const layer_slots> slots, std::size_t l) noexcept;
// The first parameter a step trains: the first after the frozen layers (arch.frozen; 0 with none).
[[nodiscard]] std::size_t trained_offset(const mlp_arch& arch);

// Checks that an arch is well formed (widths > 0, input_scale sizes, a layered arch's shapes); `what`
// names it in messages.
[[nodiscard]] result<void> validate(const mlp_arch& arch, std::string_view what);
// A layered arch's part of validate: its widths against its layers and input, and every shape.
[[nodiscard]] result<void> validate_layers(const mlp_arch& arch, const std::string& what);

inline constexpr float k_layer_norm_epsilon = 1e-5f;

// One part of a training step whose batch is taken in micro-batches, so that the workspace holds one
// micro-batch's activations instead of the whole batch's: every part adds its gradient, scaled to the
// mean over the whole batch, and only the last part updates the parameters. The parts together make the
// very step the whole batch makes (the same arithmetic up to the order of its sums: the layers hold
// nothing across rows, layer norm being per example). The default is a whole batch in one part.
struct batch_part {
  std::int64_t batch_rows = 0;  // the whole batch's rows (0: this part is the whole batch)
  bool first = true;            // plain SGD: the gradient buffer starts afresh (momentum accumulates into the velocity)
  bool last = true;             // the update is applied
};

// Frozen layers held encoded (compact_frozen(arch): successive layer training in less memory): their
// blob (frozen_bytes(arch) bytes, checked by check_frozen) and a scratch of frozen_scratch_floats(arch)
// floats that the forward pass decodes them into, a block of rows at a time. The network reads both on
// every forward pass; the parameter buffers it is given then hold only the trained layers.
struct frozen_layers {
  std::span<const std::byte> blob{};
  std::span<float> scratch{};
};

struct layered_slots;  // internal (layered.cpp): where a layered network's passes keep what they compute

class network {
 public:
  // `frozen`: where a compact_frozen arch's frozen layers are (ignored otherwise).
  explicit network(mlp_arch arch, frozen_layers frozen = {});

  [[nodiscard]] const mlp_arch& arch() const noexcept { return arch_; }
  [[nodiscard]] std::span<const layer_slots> slots() const noexcept { return slots_; }
  [[nodiscard]] std::size_t param_count() const noexcept { return param_count_; }
  // The parameters a step trains: [trained_offset(), param_count()), every layer after the frozen ones
  // (arch().frozen). Gradient and velocity buffers hold exactly these (trained_count() floats).
  [[nodiscard]] std::size_t trained_offset() const noexcept { return trained_offset_; }
  [[nodiscard]] std::size_t trained_count() const noexcept { return param_count_ - trained_offset_; }
  // Floats of the parameter buffer the passes take: param_count(), or trained_count() when the frozen
  // layers are held encoded (compact_frozen).
  [[nodiscard]] std::size_t held_count() const noexcept { return param_count_ - param_base_; }
  // Floats of workspace a batch of `rows` examples needs (activations and their gradients).
  [[nodiscard]] std::size_t workspace_floats(std::int64_t rows) const noexcept;

  // Forward pass only; outputs (rows × outputs) are then readable with outputs().
  void forward(std::span<const float> params, const float* x, std::int64_t rows, std::span<float> workspace) const;
  [[nodiscard]] std::span<const float> outputs(std::span<const float> workspace, std::int64_t rows) const noexcept;

  // Mean loss of a batch whose forward pass is in `workspace`; targets are class indices or values.
  // A class index outside [0, outputs) is an error naming the row.
  [[nodiscard]] result<double> loss(std::span<const float> workspace, const float* y, std::int64_t rows) const;

  // Forward and backward: writes d(mean loss)/d(params) of the trained parameters into grads
  // (trained_count floats, overwritten) and returns the mean loss.
  [[nodiscard]] result<double> forward_backward(std::span<const float> params, std::span<float> grads,
                                                const float* x, const float* y, std::int64_t rows,
                                                std::span<float> workspace) const;

  // One training step: forward_backward and sgd_step fused, each layer updated as soon as its gradient
  // is complete (and no longer needed below), while its tensors are still in cache. The result equals
  // forward_backward followed by sgd_step over the whole buffer, bit for bit. With `part`, one
  // micro-batch of a step (batch_part); the loss returned is the mean over this part's rows.
  [[nodiscard]] result<double> train_step(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                          const sgd_options& sgd, const float* x, const float* y, std::int64_t rows,
                                          std::span<float> workspace, const batch_part& part = {}) const;

 private:
  struct ws_slots {
    std::size_t act = 0;   // A_l (or Z_l for the output layer), rows × n_l
    std::size_t norm = 0;  // LN: normalised pre-activation x̂_l, rows × n_l
    std::size_t rstd = 0;  // LN: 1/σ per row
  };
  // A fixed array, not a vector: computed on every pass, and passes must not allocate.
  using ws_table = std::array<ws_slots, k_max_hidden_layers + 1>;
  [[nodiscard]] ws_table workspace_slots(std::int64_t rows) const noexcept;
  [[nodiscard]] result<double> backward(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                        const sgd_options* sgd, const float* x, const float* y, std::int64_t rows,
                                        std::span<float> workspace, const batch_part& part) const;
  // d_out is d(loss summed over rows / mean_over)/d(outputs).
  [[nodiscard]] result<void> output_gradient(std::span<const float> workspace, const float* y, std::int64_t rows,
                                             float* d_out, double& loss_sum, std::int64_t mean_over = 0) const;

  // A compact frozen layer's pre-activations z (rows × units) from its input, its weights decoded a
  // block of rows at a time (frozen.cpp); returns its gain and shift decoded into the scratch (null
  // without LayerNorm). `patches`: a convolution's.
  struct norm_vectors {
    const float* gain = nullptr;
    const float* shift = nullptr;
  };
  norm_vectors frozen_forward(std::size_t l, const float* input, std::int64_t rows, float* z, std::span<float> patches) const;
  [[nodiscard]] bool decodes(std::size_t l) const noexcept { return param_base_ > 0 && l < static_cast<std::size_t>(arch_.frozen); }
  // Where the parameter at `offset` of the flat layout is in the buffer the passes take.
  [[nodiscard]] std::size_t held(std::size_t offset) const noexcept { return offset - param_base_; }

  // A network with convolutions or shape operations (layered.cpp): the same passes over plans_.
  [[nodiscard]] layered_slots layered_workspace(std::int64_t rows) const noexcept;
  [[nodiscard]] std::size_t layered_floats(std::int64_t rows) const noexcept;
  [[nodiscard]] std::size_t layered_output(std::int64_t rows) const noexcept;
  void forward_layered(std::span<const float> params, const float* x, std::int64_t rows, std::span<float> workspace) const;
  [[nodiscard]] result<double> backward_layered(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                                const sgd_options* sgd, const float* x, const float* y, std::int64_t rows,
                                                std::span<float> workspace, const batch_part& part) const;

  mlp_arch arch_;
  std::vector<layer_slots> slots_;
  std::vector<layer_plan> plans_;
  std::size_t param_count_ = 0;
  std::size_t trained_offset_ = 0;
  std::size_t param_base_ = 0;  // trained_offset_ when the frozen layers are held encoded, else 0
  frozen_layers frozen_{};
  std::int64_t max_width_ = 0;  // widest of n_1..n_{L+1}: size of the two gradient buffers
};

}  // namespace tessera::core
