#include "tessera/core/math/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <Eigen/Core>

#include "eigen_views.hpp"

namespace tessera::core {

using namespace detail;

std::size_t param_count(const mlp_arch& arch) noexcept {
  if (!arch.layers.empty()) {
    std::size_t total = 0;
    for (const layer_slots& s : param_slots(arch)) total += sz(s.rows) * sz(s.cols) + sz(s.rows) * (s.has_norm ? 3 : 1);
    return total;
  }
  std::size_t total = 0;
  for (std::size_t l = 1; l < arch.widths.size(); ++l) {
    const std::size_t rows = sz(arch.widths[l]);
    total += rows * sz(arch.widths[l - 1]) + rows;
    const bool hidden = l + 1 < arch.widths.size();
    if (hidden && arch.layer_norm) total += 2 * rows;
  }
  return total;
}

std::vector<layer_slots> param_slots(const mlp_arch& arch) {
  std::vector<layer_slots> slots;
  slots.reserve(arch.layer_count());
  const std::vector<layer_plan> plans = arch.layers.empty() ? std::vector<layer_plan>{} : plan_layers(arch);
  std::size_t at = 0;
  for (std::size_t l = 1; l < arch.widths.size(); ++l) {
    layer_slots s;
    s.rows = arch.widths[l];
    s.taps = plans.empty() ? 1 : plans[l - 1].taps;
    s.cols = s.taps * arch.widths[l - 1];
    s.weight = at;
    at += sz(s.rows) * sz(s.cols);
    s.bias = at;
    at += sz(s.rows);
    s.has_norm = arch.layer_norm && l + 1 < arch.widths.size();
    if (s.has_norm) {
      s.gain = at;
      at += sz(s.rows);
      s.shift = at;
      at += sz(s.rows);
    }
    slots.push_back(s);
  }
  TESSERA_ASSERT(!arch.layers.empty() || at == param_count(arch));
  return slots;
}

result<void> validate(const mlp_arch& arch, std::string_view what) {
  const std::string name(what);
  if (arch.widths.size() < 2)
    return make_error(errc::invalid_spec, name + ": an MLP needs at least an input and an output width");
  if (arch.widths.size() - 2 > k_max_hidden_layers)
    return make_error(errc::invalid_spec, name + ": more than " + std::to_string(k_max_hidden_layers) + " hidden layers");
  for (std::size_t i = 0; i < arch.widths.size(); ++i) {
    if (arch.widths[i] < 1 || arch.widths[i] > k_max_width)
      return make_error(errc::invalid_spec, name + ": width " + std::to_string(i) + " is " +
                                                std::to_string(arch.widths[i]) + ", must be in [1, " +
                                                std::to_string(k_max_width) + "]");
  }
  if (arch.input_scale.size() != arch.layer_count())
    return make_error(errc::invalid_spec, name + ": input_scale has " + std::to_string(arch.input_scale.size()) +
                                              " entries, expected one per layer (" + std::to_string(arch.layer_count()) + ")");
  for (float s : arch.input_scale)
    if (!std::isfinite(s) || s <= 0) return make_error(errc::invalid_spec, name + ": input_scale entries must be finite and > 0");
  double total = 0;
  for (std::size_t l = 1; l < arch.widths.size(); ++l)
    total += static_cast<double>(arch.widths[l]) * static_cast<double>(arch.widths[l - 1] + 3);
  if (total > static_cast<double>(k_max_params))
    return make_error(errc::invalid_spec, name + ": more than " + std::to_string(k_max_params) + " parameters");
  if (arch.task == task_kind::classification && arch.outputs() < 2)
    return make_error(errc::invalid_spec, name + ": classification needs at least 2 outputs");
  if (arch.frozen < 0 || static_cast<std::size_t>(arch.frozen) >= arch.layer_count())
    return make_error(errc::invalid_spec, name + ": " + std::to_string(arch.frozen) + " frozen layers, must be in [0, " +
                                              std::to_string(arch.layer_count() - 1) + "] (the output layer trains)");
  if (!arch.layers.empty()) TESSERA_TRY(validate_layers(arch, name));
  return {};
}

std::size_t layer_start(std::span<const layer_slots> slots, std::size_t l) noexcept {
  if (l < slots.size()) return slots[l].weight;
  const layer_slots& s = slots.back();
  return (s.has_norm ? s.shift : s.bias) + sz(s.rows);
}

std::size_t trained_offset(const mlp_arch& arch) { return layer_start(param_slots(arch), static_cast<std::size_t>(arch.frozen)); }

network::network(mlp_arch arch, frozen_layers frozen) : arch_(std::move(arch)) {
  TESSERA_ASSERT(validate(arch_, "network").ok());
  slots_ = param_slots(arch_);
  if (!arch_.layers.empty()) plans_ = plan_layers(arch_);
  param_count_ = core::param_count(arch_);
  trained_offset_ = core::trained_offset(arch_);
  if (compact_frozen(arch_)) {
    param_base_ = trained_offset_;
    frozen_ = frozen;
  }
  max_width_ = *std::max_element(arch_.widths.begin() + 1, arch_.widths.end());
}

network::ws_table network::workspace_slots(std::int64_t rows) const noexcept {
  ws_table out{};
  std::size_t at = 0;
  for (std::size_t l = 0; l < slots_.size(); ++l) {
    const std::size_t n = sz(rows) * sz(slots_[l].rows);
    out[l].act = at;
    at += align_up(n);
    if (slots_[l].has_norm) {
      out[l].norm = at;
      at += align_up(n);
      out[l].rstd = at;
      at += align_up(sz(rows));
    }
  }
  return out;
}

std::size_t network::workspace_floats(std::int64_t rows) const noexcept {
  if (!plans_.empty()) return layered_floats(rows);
  std::size_t at = 0;
  for (const auto& s : slots_) {
    at += align_up(sz(rows) * sz(s.rows));
    if (s.has_norm) at += align_up(sz(rows) * sz(s.rows)) + align_up(sz(rows));
  }
  // Two ping-pong buffers for the gradient flowing backwards.
  return at + 2 * align_up(sz(rows) * sz(max_width_));
}

void network::forward(std::span<const float> params, const float* x, std::int64_t rows,
                      std::span<float> workspace) const {
  TESSERA_ASSERT(params.size() == held_count());
  TESSERA_ASSERT(workspace.size() >= workspace_floats(rows));
  TESSERA_ASSERT(rows > 0);
  if (!plans_.empty()) return forward_layered(params, x, rows, workspace);
  const auto ws = workspace_slots(rows);
  const float* input = x;
  for (std::size_t l = 0; l < slots_.size(); ++l) {
    const layer_slots& s = slots_[l];
    float* z_ptr = workspace.data() + (s.has_norm ? ws[l].norm : ws[l].act);
    matrix_map z(z_ptr, ix(rows), ix(s.rows));
    norm_vectors norm;
    if (decodes(l)) {
      norm = frozen_forward(l, input, rows, z_ptr, {});
    } else {
      const const_matrix_map a_prev(input, ix(rows), ix(s.cols));
      const const_matrix_map w(params.data() + held(s.weight), ix(s.rows), ix(s.cols));
      z.rowwise() = const_row_vector_map(params.data() + held(s.bias), ix(s.rows));
      scaled_product(z, arch_.input_scale[l], a_prev, w.transpose(), /*accumulate=*/true);
      if (s.has_norm) norm = {.gain = params.data() + held(s.gain), .shift = params.data() + held(s.shift)};
    }
    const bool hidden = l + 1 < slots_.size();
    if (hidden) {
      matrix_map a(workspace.data() + ws[l].act, ix(rows), ix(s.rows));
      if (s.has_norm) {
        const const_row_vector_map gain(norm.gain, ix(s.rows));
        const const_row_vector_map shift(norm.shift, ix(s.rows));
        standardize_rows(z, workspace.data() + ws[l].rstd, k_layer_norm_epsilon);
        a.array() = ((z.array().rowwise() * gain.array()).rowwise() + shift.array()).cwiseMax(0.0f);
      } else {
        a = a.cwiseMax(0.0f);
      }
    }
    input = workspace.data() + ws[l].act;
  }
}

std::span<const float> network::outputs(std::span<const float> workspace, std::int64_t rows) const noexcept {
  if (!plans_.empty()) return workspace.subspan(layered_output(rows), sz(rows) * sz(arch_.outputs()));
  const auto ws = workspace_slots(rows);
  return workspace.subspan(ws[slots_.size() - 1].act, sz(rows) * sz(arch_.outputs()));
}

// Writes d(mean loss)/d(outputs) into d_out and adds the batch's summed loss to loss_sum.
result<void> network::output_gradient(std::span<const float> workspace, const float* y, std::int64_t rows,
                                      float* d_out, double& loss_sum, std::int64_t mean_over) const {
  const std::int64_t k = arch_.outputs();
  const const_matrix_map out(outputs(workspace, rows).data(), ix(rows), ix(k));
  const float inv_rows = 1.0f / static_cast<float>(mean_over > 0 ? mean_over : rows);
  if (arch_.task == task_kind::classification) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float label = y[r];
      if (!(label >= 0.0f && label < static_cast<float>(k)) || label != std::floor(label))
        return make_error(errc::bad_format, "batch row " + std::to_string(r) + ": class label " + std::to_string(label) +
                                                " is not an integer in [0, " + std::to_string(k) + ")");
      const auto cls = static_cast<std::int64_t>(label);
      const auto zr = out.row(ix(r));
      const float m = zr.maxCoeff();
      const float sum = (zr.array() - m).exp().sum();
      loss_sum += static_cast<double>(m + std::log(sum) - zr(ix(cls)));
      if (d_out != nullptr) {
        matrix_map d(d_out, ix(rows), ix(k));
        d.row(ix(r)).array() = (zr.array() - m).exp() * (inv_rows / sum);
        d(ix(r), ix(cls)) -= inv_rows;
      }
    }
  } else {
    // MSE: mean over rows and outputs of (ŷ - y)².
    const const_matrix_map target(y, ix(rows), ix(k));
    const float inv_count = inv_rows / static_cast<float>(k);
    loss_sum += static_cast<double>((out - target).squaredNorm()) / static_cast<double>(k);
    if (d_out != nullptr) {
      matrix_map d(d_out, ix(rows), ix(k));
      d = (out - target) * (2.0f * inv_count);
    }
  }
  return {};
}

result<double> network::loss(std::span<const float> workspace, const float* y, std::int64_t rows) const {
  double sum = 0;
  TESSERA_TRY(output_gradient(workspace, y, rows, nullptr, sum));
  return sum / static_cast<double>(rows);
}

result<double> network::forward_backward(std::span<const float> params, std::span<float> grads, const float* x,
                                         const float* y, std::int64_t rows, std::span<float> workspace) const {
  forward(params, x, rows, workspace);
  // Without an optimizer the parameters are only read.
  const std::span<float> read_only(const_cast<float*>(params.data()), params.size());
  if (!plans_.empty()) return backward_layered(read_only, grads, {}, nullptr, x, y, rows, workspace, {});
  return backward(read_only, grads, {}, nullptr, x, y, rows, workspace, {});
}

result<double> network::train_step(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                   const sgd_options& sgd, const float* x, const float* y, std::int64_t rows,
                                   std::span<float> workspace, const batch_part& part) const {
  TESSERA_ASSERT(part.batch_rows == 0 || part.batch_rows >= rows);
  forward(params, x, rows, workspace);
  if (!plans_.empty()) return backward_layered(params, grads, velocity, &sgd, x, y, rows, workspace, part);
  return backward(params, grads, velocity, &sgd, x, y, rows, workspace, part);
}

result<double> network::backward(std::span<float> params, std::span<float> grads, std::span<float> velocity,
                                 const sgd_options* sgd, const float* x, const float* y, std::int64_t rows,
                                 std::span<float> workspace, const batch_part& part) const {
  TESSERA_ASSERT(sgd != nullptr || velocity.empty());
  // With momentum the gradient is accumulated straight into the velocity, which the
  // previous update left holding μ·v + λ·w: one GEMM with β = 1 instead of a zeroed gradient buffer, a
  // read of it and a separate velocity pass. Otherwise gradients go to `grads`, added to what earlier
  // parts of the batch left there.
  const bool into_velocity = sgd != nullptr && !velocity.empty();
  const bool accumulate = into_velocity || !part.first;
  TESSERA_ASSERT(into_velocity || grads.size() == trained_count());
  TESSERA_ASSERT(!into_velocity || velocity.size() == trained_count());
  // The gradient of the parameter at `offset` (of the trained ones: frozen layers have none).
  float* const gstart = into_velocity ? velocity.data() : grads.data();
  const auto grad = [&](std::size_t offset) { return gstart + (offset - trained_offset_); };
  // Updates params[first, first + count) from its finished gradient (only when training).
  auto update = [&](std::size_t first, std::size_t count) {
    if (sgd == nullptr || !part.last) return;
    const std::size_t g = first - trained_offset_;
    if (into_velocity) {
      sgd_apply_prepared(*sgd, params.subspan(held(first), count), velocity.subspan(g, count));
    } else {
      sgd_step(*sgd, params.subspan(held(first), count), grads.subspan(g, count), velocity.empty() ? velocity : velocity.subspan(g, count));
    }
  };
  const auto first_trained = static_cast<std::size_t>(arch_.frozen);
  const auto ws = workspace_slots(rows);
  const std::size_t grad_buf = workspace_floats(rows) - 2 * align_up(sz(rows) * sz(max_width_));
  float* g_cur = workspace.data() + grad_buf;
  float* g_next = g_cur + align_up(sz(rows) * sz(max_width_));

  double loss_sum = 0;
  TESSERA_TRY(output_gradient(workspace, y, rows, g_cur, loss_sum, part.batch_rows));
  // dst = value, or dst += value when accumulating (into the velocity, or after an earlier part).
  auto put = [accumulate](auto&& dst, const auto& value) {
    if (accumulate) dst.noalias() += value;
    else dst.noalias() = value;
  };

  for (std::size_t l = slots_.size(); l-- > 0;) {
    const layer_slots& s = slots_[l];
    const float scale = arch_.input_scale[l];
    const const_matrix_map dz(g_cur, ix(rows), ix(s.rows));
    const float* a_prev_ptr = l == 0 ? x : workspace.data() + ws[l - 1].act;
    const const_matrix_map a_prev(a_prev_ptr, ix(rows), ix(s.cols));
    matrix_map dw(grad(s.weight), ix(s.rows), ix(s.cols));
    row_vector_map db(grad(s.bias), ix(s.rows));
    scaled_product(dw, scale, dz.transpose(), a_prev, accumulate);
    put(db, dz.colwise().sum());
    if (l == first_trained) {  // the first layer, or the first after the frozen ones: nothing below trains
      update(s.weight, s.bias + sz(s.rows) - s.weight);
      break;
    }

    // Gradient into the previous hidden layer's activations, then through its ReLU (and LayerNorm).
    const layer_slots& p = slots_[l - 1];
    const const_matrix_map w(params.data() + held(s.weight), ix(s.rows), ix(s.cols));
    matrix_map da(g_next, ix(rows), ix(s.cols));
    scaled_product(da, scale, dz, w, /*accumulate=*/false);
    update(s.weight, s.bias + sz(s.rows) - s.weight);  // W_l was last needed just above
    const const_matrix_map a(workspace.data() + ws[l - 1].act, ix(rows), ix(p.rows));
    da.array() = (a.array() > 0.0f).select(da.array(), 0.0f);
    if (p.has_norm) {
      const const_matrix_map xhat(workspace.data() + ws[l - 1].norm, ix(rows), ix(p.rows));
      const Eigen::Map<const Eigen::VectorXf> rstd(workspace.data() + ws[l - 1].rstd, ix(rows));
      const const_row_vector_map gain(params.data() + held(p.gain), ix(p.rows));
      row_vector_map dgain(grad(p.gain), ix(p.rows));
      row_vector_map dshift(grad(p.shift), ix(p.rows));
      put(dgain, (da.array() * xhat.array()).colwise().sum().matrix());
      put(dshift, da.colwise().sum());
      da.array().rowwise() *= gain.array();
      update(p.gain, p.shift + sz(p.rows) - p.gain);  // gain was last needed just above
      const float inv_n = 1.0f / static_cast<float>(p.rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        auto dr = da.row(ix(r));
        const auto xr = xhat.row(ix(r));
        const float mean_d = dr.sum() * inv_n;
        const float mean_dx = dr.dot(xr) * inv_n;
        dr = rstd(ix(r)) * (dr.array() - mean_d - xr.array() * mean_dx).matrix();
      }
    }
    std::swap(g_cur, g_next);
  }
  return loss_sum / static_cast<double>(rows);
}

}  // namespace tessera::core
