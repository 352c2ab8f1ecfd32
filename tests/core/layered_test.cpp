// Tests of the network's layered passes (mlp.hpp, layered.cpp): convolutional networks against a
// reference written here from the definitions in double precision (its gradient by central
// differences), the parameter layout, the fused training step, and IST's subnets of channels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "test_archs.hpp"

using namespace tessera;
using namespace tessera::core;

namespace {

// The reference: the same network evaluated from the definitions, in double.
struct reference {
  const mlp_arch& arch;
  std::vector<layer_plan> plans = plan_layers(arch);
  std::vector<layer_slots> slots = param_slots(arch);

  [[nodiscard]] std::vector<double> dense(const layer_plan& p, const layer_slots& s, const std::vector<double>& params,
                                          const std::vector<double>& u, float scale) const {
    std::vector<double> z(static_cast<std::size_t>(p.units));
    for (std::int64_t o = 0; o < p.units; ++o) {
      double sum = 0;
      for (std::int64_t c = 0; c < s.cols; ++c) sum += params[s.weight + static_cast<std::size_t>(o * s.cols + c)] * u[static_cast<std::size_t>(c)];
      z[static_cast<std::size_t>(o)] = sum * scale + params[s.bias + static_cast<std::size_t>(o)];
    }
    return z;
  }

  [[nodiscard]] std::vector<double> conv(const layer_plan& p, const layer_slots& s, const std::vector<double>& params,
                                         const std::vector<double>& u, float scale) const {
    const conv_geometry& g = p.conv;
    std::vector<double> z(static_cast<std::size_t>(g.out.size()));
    for (std::int64_t oh = 0; oh < g.out.height; ++oh)
      for (std::int64_t ow = 0; ow < g.out.width; ++ow)
        for (std::int64_t oc = 0; oc < g.out.channels; ++oc) {
          double sum = 0;
          for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
            for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const std::int64_t ih = oh * g.stride + kh - g.pad_h, iw = ow * g.stride + kw - g.pad_w;
              if (ih < 0 || ih >= g.in.height || iw < 0 || iw >= g.in.width) continue;
              for (std::int64_t ic = 0; ic < g.in.channels; ++ic)
                sum += params[s.weight + static_cast<std::size_t>(((oc * g.kernel_h + kh) * g.kernel_w + kw) * g.in.channels + ic)] *
                       u[static_cast<std::size_t>((ih * g.in.width + iw) * g.in.channels + ic)];
            }
          z[static_cast<std::size_t>((oh * g.out.width + ow) * g.out.channels + oc)] = sum * scale + params[s.bias + static_cast<std::size_t>(oc)];
        }
    return z;
  }

  [[nodiscard]] static std::vector<double> step(const shape_step& st, const std::vector<double>& in) {
    if (st.layer.kind == layer_kind::flatten) return in;
    std::vector<double> out(static_cast<std::size_t>(st.out.size()), st.layer.kind == layer_kind::max_pool ? -1e300 : 0.0);
    const std::int64_t ph = st.in.height / st.out.height, pw = st.in.width / st.out.width;
    for (std::int64_t h = 0; h < st.out.height * ph; ++h)
      for (std::int64_t w = 0; w < st.out.width * pw; ++w)
        for (std::int64_t c = 0; c < st.in.channels; ++c) {
          double& o = out[static_cast<std::size_t>(((h / ph) * st.out.width + w / pw) * st.out.channels + c)];
          const double v = in[static_cast<std::size_t>((h * st.in.width + w) * st.in.channels + c)];
          o = st.layer.kind == layer_kind::max_pool ? std::max(o, v) : o + v / static_cast<double>(st.in.positions());
        }
    return out;
  }

  // The mean cross-entropy of a batch.
  [[nodiscard]] double loss(const std::vector<double>& params, const std::vector<float>& x, const std::vector<float>& y, std::int64_t rows) const {
    double total = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<double> a(x.begin() + r * arch.inputs(), x.begin() + (r + 1) * arch.inputs());
      if (arch.input.height > 1) {  // an image's features come channel by channel: held channels-last
        const std::vector<double> chw = a;
        const std::int64_t c_n = arch.input.channels, p_n = arch.input.positions();
        for (std::int64_t c = 0; c < c_n; ++c)
          for (std::int64_t p = 0; p < p_n; ++p) a[static_cast<std::size_t>(p * c_n + c)] = chw[static_cast<std::size_t>(c * p_n + p)];
      }
      for (std::size_t l = 0; l < plans.size(); ++l) {
        for (const shape_step& st : plans[l].before) a = step(st, a);
        const float scale = arch.input_scale[l];
        a = plans[l].kind == layer_kind::dense ? dense(plans[l], slots[l], params, a, scale) : conv(plans[l], slots[l], params, a, scale);
        if (l + 1 == plans.size()) break;
        if (slots[l].has_norm) {
          double mean = 0, var = 0;
          for (double v : a) mean += v / static_cast<double>(a.size());
          for (double v : a) var += (v - mean) * (v - mean) / static_cast<double>(a.size());
          const auto c = static_cast<std::size_t>(plans[l].out.channels);
          for (std::size_t i = 0; i < a.size(); ++i)
            a[i] = (a[i] - mean) / std::sqrt(var + k_layer_norm_epsilon) * params[slots[l].gain + i % c] + params[slots[l].shift + i % c];
        }
        for (double& v : a) v = std::max(v, 0.0);
      }
      const double m = *std::max_element(a.begin(), a.end());
      double sum = 0;
      for (double v : a) sum += std::exp(v - m);
      total += m + std::log(sum) - a[static_cast<std::size_t>(y[static_cast<std::size_t>(r)])];
    }
    return total / static_cast<double>(rows);
  }
};

std::vector<float> random_values(std::size_t n, std::uint64_t seed, float spread) {
  rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (r.uniform() * 2.0f - 1.0f) * spread;
  return v;
}

mlp_arch image_arch(bool layer_norm) { return testing::small_image_arch(layer_norm, 6); }

mlp_arch sequence_arch() {
  mlp_arch a;
  a.input = {.height = 1, .width = 9, .channels = 3};
  a.layers = {{.kind = layer_kind::conv1d, .units = 4, .kernel = 3, .stride = 1, .padding = padding_kind::valid},
              {.kind = layer_kind::max_pool, .pool = 2},
              {.kind = layer_kind::conv1d, .units = 6, .kernel = 3},
              {.kind = layer_kind::global_avg_pool}};
  a.widths = {3, 4, 6, 4};
  a.layer_norm = true;
  a.input_scale = {1.0f, 1.0f, 1.0f};
  return a;
}

// The network's gradient against the reference's central differences, every parameter.
void check_gradient(const mlp_arch& arch, std::int64_t rows) {
  REQUIRE(validate(arch, "arch").ok());
  network net(arch);
  const auto params = random_values(net.param_count(), 5, 0.5f);
  const auto x = random_values(static_cast<std::size_t>(rows * arch.inputs()), 6, 1.0f);
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < y.size(); ++r) y[r] = static_cast<float>(r % static_cast<std::size_t>(arch.outputs()));
  std::vector<float> grads(net.param_count()), ws(net.workspace_floats(rows));
  auto loss = net.forward_backward(params, grads, x.data(), y.data(), rows, ws);
  REQUIRE(loss.ok());
  const reference ref{arch};
  std::vector<double> p(params.begin(), params.end());
  CHECK(loss.value() == doctest::Approx(ref.loss(p, x, y, rows)).epsilon(1e-5));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i], h = 1e-6;
    p[i] = keep + h;
    const double up = ref.loss(p, x, y, rows);
    p[i] = keep - h;
    const double down = ref.loss(p, x, y, rows);
    p[i] = keep;
    CAPTURE(i);
    REQUIRE(grads[i] == doctest::Approx((up - down) / (2 * h)).epsilon(2e-3).scale(1e-3));
  }
}

}  // namespace

TEST_CASE("layered network: a 2-D convolutional network's loss and every gradient equal the reference's") {
  for (bool ln : {false, true}) {
    INFO("layer_norm " << ln);
    check_gradient(image_arch(ln), 3);
  }
}

TEST_CASE("layered network: a 1-D convolutional network with global average pooling equals the reference") {
  check_gradient(sequence_arch(), 4);
}

TEST_CASE("layered network: parameters are laid out per layer, a convolution's OHWI and a flattened dense layer's taps") {
  const mlp_arch a = image_arch(true);
  const auto slots = param_slots(a);
  REQUIRE(slots.size() == 4);
  CHECK(slots[0].rows == 4);
  CHECK(slots[0].taps == 9);
  CHECK(slots[0].cols == 18);  // 3×3 taps × 2 input channels
  CHECK(slots[1].cols == 36);
  CHECK(slots[2].taps == 4);   // the 2×2 positions the flatten took apart
  CHECK(slots[2].cols == 20);  // × 5 channels
  CHECK(slots[3].cols == 6);
  CHECK(param_count(a) == (4 * 18 + 12) + (5 * 36 + 15) + (6 * 20 + 18) + (3 * 6 + 3));
  const auto plans = plan_layers(a);
  CHECK(plans[1].before.size() == 1);
  CHECK(plans[1].in == tensor_shape{4, 4, 4});
  CHECK(plans[2].in == tensor_shape{1, 1, 20});
}

TEST_CASE("layered network: widths that do not fit the layers are refused") {
  mlp_arch a = image_arch(false);
  a.widths = {2, 4, 5, 3};
  a.input_scale.pop_back();
  auto v = validate(a, "subnet");
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().message == "subnet: 2 hidden widths for 3 dense and convolutional layers");
  a = image_arch(false);
  a.widths[0] = 3;
  CHECK(validate(a, "subnet").error().message == "subnet: width 0 is 3, but the input has 2 channels");
}

TEST_CASE("layered network: train_step equals forward_backward followed by sgd_step") {
  const mlp_arch arch = image_arch(true);
  network net(arch);
  std::vector<float> a = random_values(net.param_count(), 7, 0.5f), b = a;
  std::vector<float> va(a.size(), 0.0f), vb(a.size(), 0.1f), ga(a.size()), ws(net.workspace_floats(3));
  const auto x = random_values(static_cast<std::size_t>(3 * arch.inputs()), 8, 1.0f);
  const std::vector<float> y = {0, 2, 1};
  const sgd_options opt{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  sgd_prepare_start(opt, b, vb);
  for (int step = 0; step < 3; ++step) {
    REQUIRE(net.forward_backward(a, ga, x.data(), y.data(), 3, ws).ok());
    sgd_step(opt, a, ga, va);
    REQUIRE(net.train_step(b, {}, vb, opt, x.data(), y.data(), 3, ws).ok());
  }
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == doctest::Approx(a[i]).epsilon(1e-5));
}

TEST_CASE("layered network: a batch taken in parts makes the step the whole batch makes") {
  const mlp_arch arch = image_arch(true);
  network net(arch);
  const std::vector<float> start = random_values(net.param_count(), 9, 0.5f);
  const auto x = random_values(static_cast<std::size_t>(5 * arch.inputs()), 10, 1.0f);
  const std::vector<float> y = {0, 2, 1, 1, 0};
  const auto in = static_cast<std::size_t>(arch.inputs());
  for (const float momentum : {0.9f, 0.0f}) {
    const sgd_options opt{.learning_rate = 0.1f, .momentum = momentum, .weight_decay = 0.01f};
    std::vector<float> a = start, b = start, g(start.size()), va(start.size()), vb(start.size()), ws(net.workspace_floats(5));
    if (momentum != 0.0f) {
      sgd_prepare_start(opt, a, va);
      sgd_prepare_start(opt, b, vb);
    }
    const auto velocity = [&](std::vector<float>& v) { return momentum != 0.0f ? std::span<float>(v) : std::span<float>{}; };
    for (int step = 0; step < 3; ++step) {
      REQUIRE(net.train_step(a, g, velocity(va), opt, x.data(), y.data(), 5, ws).ok());
      // Parts of 2, 2 and 1 rows: the gradient summed over them, one update at the end.
      REQUIRE(net.train_step(b, g, velocity(vb), opt, x.data(), y.data(), 2, ws, {.batch_rows = 5, .first = true, .last = false}).ok());
      if (step == 0) CHECK(b == start);  // no update before the last part
      REQUIRE(net.train_step(b, g, velocity(vb), opt, x.data() + 2 * in, y.data() + 2, 2, ws, {.batch_rows = 5, .first = false, .last = false}).ok());
      REQUIRE(net.train_step(b, g, velocity(vb), opt, x.data() + 4 * in, y.data() + 4, 1, ws, {.batch_rows = 5, .first = false, .last = true}).ok());
      if (step == 0) CHECK(b != start);
    }
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == doctest::Approx(a[i]).epsilon(1e-5));
  }
}

TEST_CASE("layered network: IST cuts channels; a subnet is a narrower network of the same layers, gathered and scattered whole") {
  const mlp_arch full = image_arch(true);
  const std::vector<double> caps = {0.5, 0.5};
  auto plan = make_plan(full, caps, 2, {.min_width = 1}, 3);
  REQUIRE(plan.ok());
  // A cut too narrow for min_width names a convolution's units as channels.
  const auto narrow = make_plan(full, caps, 2, {.min_width = 3}, 3);
  REQUIRE_FALSE(narrow.ok());
  CHECK(narrow.error().message.find("hidden layer 1 (4 channels) would give group 0 only 2 channels, fewer than min_width 3") != std::string::npos);
  const auto params = random_values(param_count(full), 9, 0.5f);
  std::vector<float> back(params.size(), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t g = 0; g < 2; ++g) {
    const subnet sub = make_subnet(full, compensation_kind::layer_norm, plan.value(), g);
    REQUIRE(validate(sub.arch, "subnet").ok());
    CHECK(sub.arch.widths == std::vector<std::int64_t>{2, 2, 2, 3, 3});
    CHECK(sub.arch.inputs() == full.inputs());
    std::vector<float> local(param_count(sub.arch));
    gather(full, sub, params, local);
    // Its first weight row is the full model's row of the channel it keeps, every tap of every input.
    const auto fs = param_slots(full), ss = param_slots(sub.arch);
    const std::size_t c0 = static_cast<std::size_t>(sub.neurons[0][0]);
    CHECK(std::equal(local.begin(), local.begin() + 18, params.begin() + static_cast<std::ptrdiff_t>(fs[0].weight + c0 * 18)));
    // Layers 1 (a convolution: 9 taps) and 2 (dense after the flatten: 4 positions): every value is the
    // full model's at (kept row, tap, kept input unit), the taps in the full layer's stride of units.
    for (std::size_t l = 1; l <= 2; ++l) {
      const std::size_t taps = static_cast<std::size_t>(fs[l].taps), sub_in = sub.neurons[l - 1].size();
      REQUIRE(ss[l].taps == fs[l].taps);
      const auto full_in = static_cast<std::size_t>(fs[l].cols) / taps;
      for (std::size_t r = 0; r < static_cast<std::size_t>(ss[l].rows); ++r)
        for (std::size_t t = 0; t < taps; ++t)
          for (std::size_t j = 0; j < sub_in; ++j) {
            const std::size_t row = static_cast<std::size_t>(sub.neurons[l][r]), unit = static_cast<std::size_t>(sub.neurons[l - 1][j]);
            REQUIRE(local[ss[l].weight + r * static_cast<std::size_t>(ss[l].cols) + t * sub_in + j] ==
                    params[fs[l].weight + row * static_cast<std::size_t>(fs[l].cols) + t * full_in + unit]);
          }
    }
    network net(sub.arch);  // and it runs
    std::vector<float> ws(net.workspace_floats(2));
    const auto x = random_values(static_cast<std::size_t>(2 * full.inputs()), 10, 1.0f);
    net.forward(local, x.data(), 2, ws);
    for (float v : net.outputs(ws, 2)) CHECK(std::isfinite(v));
    scatter(full, sub, local, back);
  }
  // The two groups hold disjoint blocks; what neither holds (weights across groups) stayed NaN.
  std::size_t written = 0;
  for (std::size_t i = 0; i < back.size(); ++i) {
    if (std::isnan(back[i])) continue;
    ++written;
    REQUIRE(back[i] == params[i]);
  }
  CHECK(written < back.size());
  CHECK(written > back.size() / 4);
}

TEST_CASE("layered network: the FedAvg plan's subnet is the whole network and computes the same outputs") {
  const mlp_arch full = sequence_arch();
  const round_plan plan = make_full_plan(full, 1);
  const subnet sub = make_subnet(full, compensation_kind::layer_norm, plan, 0);
  CHECK(sub.arch.widths == full.widths);
  const auto params = random_values(param_count(full), 11, 0.5f);
  std::vector<float> local(params.size());
  gather(full, sub, params, local);
  CHECK(local == params);
}

TEST_CASE("frozen layers: a step trains the layers after them exactly as the whole network's step, and nothing below") {
  mlp_arch dense{.widths = {6, 9, 7, 3}, .task = task_kind::classification, .layer_norm = true, .input_scale = {1.0f, 2.0f, 1.5f}};
  for (const mlp_arch& arch : {image_arch(true), image_arch(false), dense, sequence_arch()}) {
    const network whole(arch);
    const std::int64_t rows = 3;
    const auto start = random_values(whole.param_count(), 7, 0.5f);
    const auto x = random_values(static_cast<std::size_t>(rows * arch.inputs()), 8, 1.0f);
    std::vector<float> y(static_cast<std::size_t>(rows));
    for (std::size_t r = 0; r < y.size(); ++r) y[r] = static_cast<float>(r % static_cast<std::size_t>(arch.outputs()));
    std::vector<float> ws(whole.workspace_floats(rows)), g_whole(whole.param_count());
    REQUIRE(whole.forward_backward(start, g_whole, x.data(), y.data(), rows, ws).ok());
    const sgd_options sgd{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f};
    std::vector<float> p_whole = start, v_whole(whole.param_count());
    sgd_prepare_start(sgd, p_whole, v_whole);
    const auto loss_whole = whole.train_step(p_whole, {}, v_whole, sgd, x.data(), y.data(), rows, ws);
    REQUIRE(loss_whole.ok());
    for (std::int64_t frozen = 1; frozen < static_cast<std::int64_t>(arch.layer_count()); ++frozen) {
      CAPTURE(frozen);
      mlp_arch a = arch;
      a.frozen = frozen;
      REQUIRE(validate(a, "arch").ok());
      const network net(a);
      const std::size_t off = net.trained_offset();
      CHECK(off == param_slots(a)[static_cast<std::size_t>(frozen)].weight);
      CHECK(net.trained_count() == net.param_count() - off);
      // The gradient of every trained parameter is the whole network's, to the bit.
      std::vector<float> g(net.trained_count());
      REQUIRE(net.forward_backward(start, g, x.data(), y.data(), rows, ws).ok());
      CHECK(std::equal(g.begin(), g.end(), g_whole.begin() + static_cast<std::ptrdiff_t>(off)));
      // A step: the frozen layers keep their values, the others move as the whole network's step moves them.
      std::vector<float> p = start, v(net.trained_count());
      sgd_prepare_start(sgd, std::span<const float>(p).subspan(off), v);
      const auto loss = net.train_step(p, {}, v, sgd, x.data(), y.data(), rows, ws);
      REQUIRE(loss.ok());
      CHECK(loss.value() == loss_whole.value());
      CHECK(std::equal(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(off), start.begin()));
      CHECK(std::equal(p.begin() + static_cast<std::ptrdiff_t>(off), p.end(), p_whole.begin() + static_cast<std::ptrdiff_t>(off)));
      // Their memory: no gradient or velocity for the frozen parameters.
      const training_memory m = plan_training_memory(a, rows, true, codec_kind::f32);
      CHECK(m.velocity_bytes == net.trained_count() * sizeof(float));
      CHECK(m.needed() < plan_training_memory(arch, rows, true, codec_kind::f32).needed());
    }
    mlp_arch bad = arch;
    bad.frozen = static_cast<std::int64_t>(arch.layer_count());
    const auto r = validate(bad, "subnet");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("frozen layers") != std::string::npos);
  }
}
