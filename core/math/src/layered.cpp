// The network's passes when it has convolutions or shape operations (mlp.hpp): the layers of its plan,
// each a dense layer or a convolution, with the pooling and flattening before it. Activations are
// channels-last, so a flatten moves nothing and a dense layer after it reads the positions' channels in
// place. LayerNorm normalises each example's whole activation (positions × channels) with a gain and a
// shift per channel: an MLP's LayerNorm is the case of one position.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "eigen_views.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

using namespace detail;

// The shape after a shape operation on `in` (the layer list was validated).
tensor_shape shape_after_step(const layer_spec& l, const tensor_shape& in) {
  switch (l.kind) {
    case layer_kind::max_pool: return max_pool_shape(in, l.pool).value();
    case layer_kind::global_avg_pool: return {.height = 1, .width = 1, .channels = in.channels};
    default: return {.height = 1, .width = 1, .channels = in.size()};  // flatten
  }
}

// LayerNorm (optional) and ReLU of a hidden layer, per example over its positions × channels.
void normalize_activate(std::int64_t rows, const tensor_shape& out, float* z, float* act, float* rstd, const float* gain,
                        const float* shift) {
  const std::int64_t n = out.size();
  if (rstd == nullptr) {
    matrix_map a(act, ix(rows), ix(n));
    a = a.cwiseMax(0.0f);  // z was written into act
    return;
  }
  standardize_rows(matrix_map(z, ix(rows), ix(n)), rstd, k_layer_norm_epsilon);
  const const_matrix_map xhat(z, ix(rows * out.positions()), ix(out.channels));
  matrix_map a(act, ix(rows * out.positions()), ix(out.channels));
  const const_row_vector_map g(gain, ix(out.channels)), b(shift, ix(out.channels));
  a.array() = ((xhat.array().rowwise() * g.array()).rowwise() + b.array()).cwiseMax(0.0f);
}

}  // namespace

std::vector<layer_plan> plan_layers(const mlp_arch& arch) {
  std::vector<layer_plan> out;
  if (arch.layers.empty()) {
    for (std::size_t l = 1; l < arch.widths.size(); ++l)
      out.push_back({.kind = layer_kind::dense, .units = arch.widths[l], .in_units = arch.widths[l - 1], .taps = 1,
                     .in = {.height = 1, .width = 1, .channels = arch.widths[l - 1]},
                     .out = {.height = 1, .width = 1, .channels = arch.widths[l]}, .conv = {}, .before = {}});
    return out;
  }
  tensor_shape shape = arch.input;
  std::optional<tensor_shape> unflat;  // what a flatten took apart: its positions are the next dense layer's taps
  std::vector<shape_step> pending;
  const auto add = [&](const layer_spec& spec) {
    layer_plan p{.kind = spec.kind, .units = arch.widths[out.size() + 1], .in = shape};
    if (spec.kind == layer_kind::dense) {
      p.in_units = unflat ? unflat->channels : shape.channels;
      p.taps = unflat ? unflat->positions() : 1;
      p.out = {.height = 1, .width = 1, .channels = p.units};
    } else {
      p.conv = make_conv_geometry(shape, p.units, spec.kernel, spec.stride, spec.padding).value();
      p.in_units = shape.channels;
      p.taps = p.conv.kernel_h * p.conv.kernel_w;
      p.out = p.conv.out;
    }
    p.before = std::move(pending);
    pending.clear();
    unflat.reset();
    shape = p.out;
    out.push_back(std::move(p));
  };
  for (const layer_spec& l : arch.layers) {
    if (l.parametric()) {
      add(l);
      continue;
    }
    if (l.kind == layer_kind::flatten && !unflat && shape.positions() > 1) unflat = shape;
    pending.push_back({.layer = l, .in = shape, .out = shape_after_step(l, shape)});
    shape = pending.back().out;
  }
  add({.kind = layer_kind::dense, .units = arch.outputs()});
  return out;
}

result<void> validate_layers(const mlp_arch& arch, const std::string& what) {
  std::vector<layer_spec> layers = arch.layers;
  std::size_t p = 0;
  for (layer_spec& l : layers) {
    if (!l.parametric()) continue;
    if (++p + 1 >= arch.widths.size()) break;
    l.units = arch.widths[p];  // the arch's widths (a subnet's) are what runs
  }
  if (p + 2 != arch.widths.size())
    return make_error(errc::invalid_spec, what + ": " + std::to_string(arch.widths.size() - 2) + " hidden widths for " + std::to_string(p) +
                                              " dense and convolutional layers");
  if (arch.widths.front() != arch.input.channels)
    return make_error(errc::invalid_spec, what + ": width 0 is " + std::to_string(arch.widths.front()) + ", but the input has " +
                                              std::to_string(arch.input.channels) + " channels");
  TESSERA_TRY(layer_shapes(arch.input, layers, arch.outputs(), what));
  double total = 0;
  for (const layer_plan& lp : plan_layers(arch))
    total += static_cast<double>(lp.units) * static_cast<double>(lp.taps * lp.in_units + 3);
  if (total > static_cast<double>(k_max_params))
    return make_error(errc::invalid_spec, what + ": more than " + std::to_string(k_max_params) + " parameters");
  return {};
}

// Offsets in the workspace, in floats, for a batch: per parametric layer its activations (and, with
// LayerNorm, the normalised pre-activations and 1/σ per example); per shape operation its output (and
// a max pool's argmax); one patch buffer for every convolution; two gradient buffers.
struct layered_slots {
  std::array<std::size_t, k_max_layers + 1> act{}, xhat{}, rstd{};
  std::array<std::size_t, k_max_layers> step_out{}, step_argmax{};  // shape operations, numbered through the plan
  std::size_t input = 0;  // an image of several channels, channels-last (its features arrive channel by channel)
  std::size_t patches = 0, grad_a = 0, grad_b = 0, total = 0;
};

namespace {

// An image's features arrive as input_shape writes it, channels × height × width; the layers run
// channels-last. One channel needs no move.
bool transposes_input(const tensor_shape& in) noexcept { return in.height > 1 && in.channels > 1; }

void channels_last(const tensor_shape& in, const float* x, std::int64_t rows, float* out) {
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t c = 0; c < in.channels; ++c)
      for (std::int64_t p = 0; p < in.positions(); ++p) out[(n * in.positions() + p) * in.channels + c] = x[(n * in.channels + c) * in.positions() + p];
}

}  // namespace

layered_slots network::layered_workspace(std::int64_t rows) const noexcept {
  layered_slots ws;
  std::size_t at = 0, step = 0, patches = 0, widest = 0;
  const auto carve = [&](std::int64_t floats) {
    const std::size_t here = at;
    at += align_up(sz(rows) * sz(floats));
    widest = std::max(widest, sz(floats));
    return here;
  };
  if (transposes_input(arch_.input)) ws.input = carve(arch_.input.size());
  for (std::size_t l = 0; l < plans_.size(); ++l) {
    const layer_plan& p = plans_[l];
    widest = std::max(widest, sz(p.in.size()));
    for (const shape_step& s : p.before) {
      widest = std::max(widest, sz(s.in.size()));
      if (s.layer.kind != layer_kind::flatten) ws.step_out[step] = carve(s.out.size());  // a flatten moves nothing
      if (s.layer.kind == layer_kind::max_pool) ws.step_argmax[step] = carve(s.out.size());
      ++step;
    }
    ws.act[l] = carve(p.out.size());
    if (slots_[l].has_norm) {
      ws.xhat[l] = carve(p.out.size());
      ws.rstd[l] = at;
      at += align_up(sz(rows));
    }
    if (p.kind != layer_kind::dense) patches = std::max(patches, conv_patch_floats(p.conv, rows));
  }
  ws.patches = at;
  at += align_up(patches);
  ws.grad_a = at;
  at += align_up(sz(rows) * widest);
  ws.grad_b = at;
  at += align_up(sz(rows) * widest);
  ws.total = at;
  return ws;
}

std::size_t network::layered_floats(std::int64_t rows) const noexcept { return layered_workspace(rows).total; }

std::size_t network::layered_output(std::int64_t rows) const noexcept { return layered_workspace(rows).act[plans_.size() - 1]; }

void network::forward_layered(std::span<const float> params, const float* x, std::int64_t rows, std::span<float> workspace) const {
  const layered_slots ws = layered_workspace(rows);
  float* base = workspace.data();
  std::size_t step = 0;
  const float* input = x;
  if (transposes_input(arch_.input)) {
    channels_last(arch_.input, x, rows, base + ws.input);
    input = base + ws.input;
  }
  for (std::size_t l = 0; l < plans_.size(); ++l) {
    const layer_plan& p = plans_[l];
    const layer_slots& s = slots_[l];
    for (const shape_step& st : p.before) {
      float* out = base + ws.step_out[step++];
      if (st.layer.kind == layer_kind::flatten) continue;  // the same values in the same place
      if (st.layer.kind == layer_kind::max_pool) max_pool_forward(st.in, st.layer.pool, input, rows, out, base + ws.step_argmax[step - 1]);
      else global_avg_pool_forward(st.in, input, rows, out);
      input = out;
    }
    const bool hidden = l + 1 < plans_.size();
    float* z = base + (s.has_norm ? ws.xhat[l] : ws.act[l]);
    const float scale = arch_.input_scale[l];
    const std::span<float> patches = p.kind == layer_kind::dense ? std::span<float>{} : workspace.subspan(ws.patches, conv_patch_floats(p.conv, rows));
    norm_vectors norm;
    if (decodes(l)) {
      norm = frozen_forward(l, input, rows, z, patches);
    } else {
      if (p.kind == layer_kind::dense) {
        const const_matrix_map u(input, ix(rows), ix(s.cols));
        const const_matrix_map w(params.data() + held(s.weight), ix(s.rows), ix(s.cols));
        matrix_map zm(z, ix(rows), ix(s.rows));
        zm.rowwise() = const_row_vector_map(params.data() + held(s.bias), ix(s.rows));
        scaled_product(zm, scale, u, w.transpose(), /*accumulate=*/true);
      } else {
        conv_forward(p.conv, params.subspan(held(s.weight), sz(s.rows * s.cols)), params.subspan(held(s.bias), sz(s.rows)), input, rows, z,
                     patches, scale);
      }
      if (s.has_norm) norm = {.gain = params.data() + held(s.gain), .shift = params.data() + held(s.shift)};
    }
    if (hidden) normalize_activate(rows, p.out, z, base + ws.act[l], s.has_norm ? base + ws.rstd[l] : nullptr, norm.gain, norm.shift);
    input = base + ws.act[l];
  }
}

namespace {

// What the backward pass of one layer needs to know of the workspace and the parameters.
struct backward_view {
  std::int64_t rows;
  float* base;       // the workspace
  float* gstart;                // where gradients go (grads, or the velocity): the trained parameters'
  std::size_t trained_offset;   // the first trained parameter (network::trained_offset)
  std::size_t param_base;       // the first parameter the parameter buffer holds (network::held)
  bool accumulate;              // into the velocity, or after an earlier part of the batch: add, do not overwrite
  // The gradient of the (trained) parameter at `offset`.
  [[nodiscard]] float* grad(std::size_t offset) const noexcept { return gstart + (offset - trained_offset); }
};

// The gradient of layer l's input (du, rows × p.in.size()) back through the shape operations before
// it and through layer l−1's ReLU and LayerNorm: on return *d holds d(loss)/d(z_{l−1}) and *spare is
// free. `first_step` numbers p.before's first operation in the workspace.
void back_to_previous(const backward_view& v, const layer_plan& p, std::size_t first_step, const layered_slots& ws,
                      const layer_slots& prev, const layer_plan& prev_plan, std::size_t prev_index, std::span<const float> params,
                      float** d, float** spare) {
  for (std::size_t k = p.before.size(); k-- > 0;) {
    const shape_step& st = p.before[k];
    if (st.layer.kind == layer_kind::flatten) continue;
    if (st.layer.kind == layer_kind::max_pool) max_pool_backward(st.in, st.layer.pool, *d, v.rows, v.base + ws.step_argmax[first_step + k], *spare);
    else global_avg_pool_backward(st.in, *d, v.rows, *spare);
    std::swap(*d, *spare);
  }
  const std::int64_t n = prev_plan.out.size();
  matrix_map da(*d, ix(v.rows), ix(n));
  const const_matrix_map a(v.base + ws.act[prev_index], ix(v.rows), ix(n));
  da.array() = (a.array() > 0.0f).select(da.array(), 0.0f);
  if (!prev.has_norm) return;
  const std::int64_t c = prev_plan.out.channels, rp = v.rows * prev_plan.out.positions();
  const const_matrix_map xhat_c(v.base + ws.xhat[prev_index], ix(rp), ix(c));
  matrix_map da_c(*d, ix(rp), ix(c));
  row_vector_map dgain(v.grad(prev.gain), ix(c)), dshift(v.grad(prev.shift), ix(c));
  if (!v.accumulate) {
    dgain.setZero();
    dshift.setZero();
  }
  add_column_dots(da_c.data(), xhat_c.data(), rp, c, dgain.data());  // over every example's positions
  add_column_sums(da_c.data(), rp, c, dshift.data());
  da_c.array().rowwise() *= const_row_vector_map(params.data() + (prev.gain - v.param_base), ix(c)).array();
  const const_matrix_map xhat(v.base + ws.xhat[prev_index], ix(v.rows), ix(n));
  const float inv_n = 1.0f / static_cast<float>(n);
  for (std::int64_t r = 0; r < v.rows; ++r) {
    auto dr = da.row(ix(r));
    const auto xr = xhat.row(ix(r));
    const float mean_d = dr.sum() * inv_n;
    const float mean_dx = dr.dot(xr) * inv_n;
    dr = v.base[ws.rstd[prev_index] + sz(r)] * (dr.array() - mean_d - xr.array() * mean_dx).matrix();
  }
}

}  // namespace

result<double> network::backward_layered(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                          const sgd_options* sgd, const float* x, const float* y, std::int64_t rows,
                                          std::span<float> workspace, const batch_part& part) const {
  TESSERA_ASSERT(sgd != nullptr || velocity.empty());
  const bool into_velocity = sgd != nullptr && !velocity.empty();  // as the MLP's pass: gradients added into μ·v + λ·w
  TESSERA_ASSERT(into_velocity || grads.size() == trained_count());
  TESSERA_ASSERT(!into_velocity || velocity.size() == trained_count());
  const bool accumulate = into_velocity || !part.first;  // or after an earlier part of the batch
  const backward_view v{.rows = rows, .base = workspace.data(), .gstart = into_velocity ? velocity.data() : grads.data(),
                        .trained_offset = trained_offset_, .param_base = param_base_, .accumulate = accumulate};
  const auto update = [&](std::size_t first, std::size_t count) {
    if (sgd == nullptr || !part.last) return;
    const std::size_t g = first - trained_offset_;
    if (into_velocity) sgd_apply_prepared(*sgd, params.subspan(held(first), count), velocity.subspan(g, count));
    else sgd_step(*sgd, params.subspan(held(first), count), grads.subspan(g, count), velocity.empty() ? velocity : velocity.subspan(g, count));
  };
  const auto first_trained = static_cast<std::size_t>(arch_.frozen);
  const layered_slots ws = layered_workspace(rows);
  std::array<std::size_t, k_max_layers + 2> first_step{};  // each layer's first shape operation
  for (std::size_t l = 0; l < plans_.size(); ++l) first_step[l + 1] = first_step[l] + plans_[l].before.size();
  // Layer l's input: x or the previous activations, after the shape operations before it.
  const float* first_input = transposes_input(arch_.input) ? v.base + ws.input : x;  // as forward_layered left it
  const auto input_of = [&](std::size_t l) {
    const float* in = l == 0 ? first_input : v.base + ws.act[l - 1];
    for (std::size_t k = 0; k < plans_[l].before.size(); ++k)
      if (plans_[l].before[k].layer.kind != layer_kind::flatten) in = v.base + ws.step_out[first_step[l] + k];
    return in;
  };
  float* d = v.base + ws.grad_a;
  float* spare = v.base + ws.grad_b;
  double loss_sum = 0;
  TESSERA_TRY(output_gradient(workspace, y, rows, d, loss_sum, part.batch_rows));
  for (std::size_t l = plans_.size(); l-- > 0;) {
    const layer_plan& p = plans_[l];
    const layer_slots& s = slots_[l];
    const float scale = arch_.input_scale[l];
    const float* u = input_of(l);
    float* du = l == first_trained ? nullptr : spare;  // nothing below trains: no gradient into the input
    if (p.kind == layer_kind::dense) {
      const const_matrix_map dz(d, ix(rows), ix(s.rows)), um(u, ix(rows), ix(s.cols));
      matrix_map dw(v.grad(s.weight), ix(s.rows), ix(s.cols));
      row_vector_map db(v.grad(s.bias), ix(s.rows));
      scaled_product(dw, scale, dz.transpose(), um, accumulate);
      if (accumulate) db.noalias() += dz.colwise().sum();
      else db.noalias() = dz.colwise().sum();
      if (du != nullptr)
        scaled_product(matrix_map(du, ix(rows), ix(s.cols)), scale, dz, const_matrix_map(params.data() + held(s.weight), ix(s.rows), ix(s.cols)), false);
    } else {
      conv_backward(p.conv, params.subspan(held(s.weight), sz(s.rows * s.cols)), u, d, rows, std::span(v.grad(s.weight), sz(s.rows * s.cols)),
                    std::span(v.grad(s.bias), sz(s.rows)), du, workspace.subspan(ws.patches, conv_patch_floats(p.conv, rows)), scale,
                    accumulate);
    }
    update(s.weight, s.bias + sz(s.rows) - s.weight);  // W_l was last needed just above
    if (l == first_trained) break;
    std::swap(d, spare);  // d: the gradient of layer l's input; spare: free
    back_to_previous(v, p, first_step[l], ws, slots_[l - 1], plans_[l - 1], l - 1, params, &d, &spare);
    if (slots_[l - 1].has_norm) update(slots_[l - 1].gain, slots_[l - 1].shift + sz(slots_[l - 1].rows) - slots_[l - 1].gain);
  }
  return loss_sum / static_cast<double>(rows);
}

}  // namespace tessera::core
