#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/optimizer.hpp"

using namespace tessera::core;

namespace {

// An independent, naive double-precision forward pass and loss: the reference the analytic gradient
// of `network` is checked against by central differences.
double reference_loss(const mlp_arch& arch, const std::vector<double>& p, const std::vector<float>& x,
                      const std::vector<float>& y, std::int64_t rows) {
  const auto slots = param_slots(arch);
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> a(x.begin() + static_cast<std::ptrdiff_t>(r * arch.inputs()),
                          x.begin() + static_cast<std::ptrdiff_t>((r + 1) * arch.inputs()));
    for (std::size_t l = 0; l < slots.size(); ++l) {
      const auto& s = slots[l];
      std::vector<double> z(static_cast<std::size_t>(s.rows));
      for (std::int64_t i = 0; i < s.rows; ++i) {
        double acc = 0;
        for (std::int64_t j = 0; j < s.cols; ++j) acc += p[s.weight + static_cast<std::size_t>(i * s.cols + j)] * a[static_cast<std::size_t>(j)];
        z[static_cast<std::size_t>(i)] = arch.input_scale[l] * acc + p[s.bias + static_cast<std::size_t>(i)];
      }
      if (l + 1 < slots.size()) {
        if (s.has_norm) {
          double mean = 0, var = 0;
          for (double v : z) mean += v;
          mean /= static_cast<double>(z.size());
          for (double v : z) var += (v - mean) * (v - mean);
          var /= static_cast<double>(z.size());
          for (std::size_t i = 0; i < z.size(); ++i)
            z[i] = p[s.gain + i] * (z[i] - mean) / std::sqrt(var + k_layer_norm_epsilon) + p[s.shift + i];
        }
        for (double& v : z) v = std::max(v, 0.0);
      }
      a = z;
    }
    if (arch.task == task_kind::classification) {
      double m = a[0];
      for (double v : a) m = std::max(m, v);
      double sum = 0;
      for (double v : a) sum += std::exp(v - m);
      total += m + std::log(sum) - a[static_cast<std::size_t>(y[static_cast<std::size_t>(r)])];
    } else {
      for (std::size_t k = 0; k < a.size(); ++k) {
        const double d = a[k] - y[static_cast<std::size_t>(r) * a.size() + k];
        total += d * d / static_cast<double>(a.size());
      }
    }
  }
  return total / static_cast<double>(rows);
}

void check_gradients(mlp_arch arch, std::uint64_t seed) {
  arch.input_scale.resize(arch.layer_count(), 1.0f);
  const std::int64_t rows = 5;
  network net(arch);
  rng r(seed);
  std::vector<float> params(net.param_count());
  for (auto& v : params) v = (r.uniform() - 0.5f) * 1.2f;
  for (const auto& s : net.slots())
    if (s.has_norm)
      for (std::int64_t i = 0; i < s.rows; ++i) params[s.gain + static_cast<std::size_t>(i)] = 0.5f + r.uniform();
  std::vector<float> x(static_cast<std::size_t>(rows * arch.inputs()));
  for (auto& v : x) v = (r.uniform() - 0.5f) * 2.0f;
  const std::int64_t target_width = arch.task == task_kind::classification ? 1 : arch.outputs();
  std::vector<float> y(static_cast<std::size_t>(rows * target_width));
  for (auto& v : y)
    v = arch.task == task_kind::classification ? static_cast<float>(r.below(static_cast<std::uint64_t>(arch.outputs())))
                                               : r.uniform() * 2.0f - 1.0f;

  std::vector<float> grads(net.param_count()), ws(net.workspace_floats(rows));
  auto loss = net.forward_backward(params, grads, x.data(), y.data(), rows, ws);
  REQUIRE(loss.ok());

  std::vector<double> p(params.begin(), params.end());
  CHECK(loss.value() == doctest::Approx(reference_loss(arch, p, x, y, rows)).epsilon(1e-5));
  const double eps = 1e-6;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double up = reference_loss(arch, p, x, y, rows);
    p[i] = keep - eps;
    const double down = reference_loss(arch, p, x, y, rows);
    p[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    INFO("parameter " << i << " numeric " << numeric << " analytic " << grads[i]);
    CHECK(std::abs(numeric - static_cast<double>(grads[i])) <= 2e-4 + 1e-3 * std::abs(numeric));
    ++checked;
  }
  CHECK(checked == net.param_count());
}

}  // namespace

TEST_CASE("gradient check: softmax cross-entropy, two hidden layers") {
  check_gradients({.widths = {6, 7, 5, 4}, .task = task_kind::classification, .layer_norm = false, .input_scale = {}}, 1);
}

TEST_CASE("gradient check: softmax cross-entropy, no hidden layer (the output layer alone)") {
  check_gradients({.widths = {5, 3}, .task = task_kind::classification, .layer_norm = false, .input_scale = {}}, 2);
}

TEST_CASE("gradient check: MSE regression with several outputs") {
  check_gradients({.widths = {4, 6, 3}, .task = task_kind::regression, .layer_norm = false, .input_scale = {}}, 3);
}

TEST_CASE("gradient check: layer normalisation gain, shift and everything beneath") {
  check_gradients({.widths = {5, 6, 7, 3}, .task = task_kind::classification, .layer_norm = true, .input_scale = {}}, 4);
}

TEST_CASE("gradient check: scaled layer inputs (inverted-dropout compensation)") {
  check_gradients({.widths = {4, 5, 6, 3}, .task = task_kind::classification, .layer_norm = false,
                   .input_scale = {1.0f, 2.5f, 4.0f}},
                  5);
  check_gradients({.widths = {4, 5, 3}, .task = task_kind::regression, .layer_norm = true, .input_scale = {1.0f, 3.0f}}, 6);
}

TEST_CASE("forward: a batch equals its examples one at a time") {
  const mlp_arch arch{.widths = {3, 4, 2}, .task = task_kind::classification, .layer_norm = true, .input_scale = {1, 1}};
  network net(arch);
  std::vector<float> params(net.param_count());
  rng r(9);
  for (auto& v : params) v = r.uniform() - 0.5f;
  const std::vector<float> x = {0.1f, 0.2f, -0.3f, 1.0f, -1.0f, 0.5f};
  std::vector<float> ws(net.workspace_floats(2)), ws1(net.workspace_floats(1));
  net.forward(params, x.data(), 2, ws);
  const auto both = net.outputs(ws, 2);
  const std::vector<float> batch_out(both.begin(), both.end());
  for (int row = 0; row < 2; ++row) {
    net.forward(params, x.data() + row * 3, 1, ws1);
    const auto one = net.outputs(ws1, 1);
    CHECK(one[0] == doctest::Approx(batch_out[static_cast<std::size_t>(row * 2)]));
    CHECK(one[1] == doctest::Approx(batch_out[static_cast<std::size_t>(row * 2 + 1)]));
  }
}

TEST_CASE("loss: a class label out of range is an error naming the row") {
  network net({.widths = {2, 3}, .task = task_kind::classification, .layer_norm = false, .input_scale = {1}});
  std::vector<float> params(net.param_count(), 0.1f), grads(net.param_count()), ws(net.workspace_floats(2));
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> y = {1, 3};
  auto r = net.forward_backward(params, grads, x.data(), y.data(), 2, ws);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("row 1") != std::string::npos);
}

TEST_CASE("arch validation names what is wrong") {
  auto r = validate(mlp_arch{.widths = {3, 0, 2}, .task = task_kind::classification, .layer_norm = false, .input_scale = {1, 1}}, "subnet");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("width 1") != std::string::npos);
  auto s = validate(mlp_arch{.widths = {3, 2}, .task = task_kind::classification, .layer_norm = false, .input_scale = {}}, "subnet");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message.find("input_scale") != std::string::npos);
}

TEST_CASE("train_step equals forward_backward followed by sgd_step") {
  for (bool ln : {false, true}) {
    const mlp_arch arch{.widths = {6, 9, 7, 3}, .task = task_kind::classification, .layer_norm = ln, .input_scale = {1.0f, 2.0f, 1.5f}};
    network net(arch);
    rng r(21);
    std::vector<float> a(net.param_count());
    for (auto& v : a) v = r.uniform() - 0.5f;
    std::vector<float> b = a, va(a.size(), 0.1f), vb = va, ga(a.size()), gb(a.size()), ws(net.workspace_floats(4));
    const std::vector<float> x = {0.1f, 0.5f, -0.3f, 0.2f, 0.9f, -1.0f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f, -0.1f,
                                  1.0f, 0.0f, 0.5f, 0.5f, -0.5f, 0.25f, 0.3f, 0.3f, 0.3f, -0.3f, -0.3f, 0.7f};
    const std::vector<float> y = {0, 2, 1, 2};
    const sgd_options opt{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    // The fused step accumulates into a prepared velocity (mu*v + wd*w): same update, other rounding.
    sgd_prepare_start(opt, b, vb);
    std::fill(va.begin(), va.end(), 0.0f);
    for (int step = 0; step < 3; ++step) {
      REQUIRE(net.forward_backward(a, ga, x.data(), y.data(), 4, ws).ok());
      sgd_step(opt, a, ga, va);
      REQUIRE(net.train_step(b, {}, vb, opt, x.data(), y.data(), 4, ws).ok());
    }
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-5));
    // Plain SGD goes through the gradient buffer and matches exactly.
    const sgd_options plain{.learning_rate = 0.1f, .momentum = 0.0f, .weight_decay = 0.01f};
    REQUIRE(net.forward_backward(a, ga, x.data(), y.data(), 4, ws).ok());
    sgd_step(plain, a, ga, {});
    b = std::vector<float>(a);
    CHECK(a == b);
  }
}
