// bench/train_step — one training step (forward, backward, SGD update) against the machine's own
// single-thread fp32 matrix-multiply rate, measured in the same run with the same compiler flags.
//
// Useful work of a step on widths n0..nL+1 at batch B: forward 2·B·Σ n_l·n_{l-1} flops, weight
// gradients the same again, input gradients 2·B·Σ_{l≥2} n_l·n_{l-1} (none for the data). The ratio
// printed is (useful flops / step time) / (flops of a large square GEMM / its time).
//
// Then the Fashion-MNIST CNN (3×3 convolutions of 32 and 64 channels, 2×2 pooling, dense 128) and its
// 1/4-channel subnet, the same way (bench/common/cnn.hpp counts a convolution's multiply-adds), and the
// forward pass of each of its convolutions two ways: im2col + Eigen GEMM (what the trainer runs,
// core::conv_forward) against a direct loop nest over channels-last data with the output channels
// innermost (vectorised by the compiler).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "../common/cnn.hpp"
#include "../common/timing.hpp"

namespace {

using namespace tessera::core;
using tessera::bench::best_seconds;

// One row of the step table: `steps` of the network on random data at each batch size.
void step_rows(const std::string& name, const model_spec& spec, double peak) {
  const mlp_arch arch = spec.full_arch();
  network net(arch);
  std::vector<float> params(net.param_count()), grads(net.param_count()), velocity(net.param_count());
  initialize(spec, params);
  const auto macs = tessera::bench::macs_of(arch);
  const auto inputs = static_cast<std::size_t>(arch.inputs());
  for (std::int64_t batch : {16, 32, 64}) {
    std::vector<float> ws(net.workspace_floats(batch)), x(static_cast<std::size_t>(batch) * inputs), y(static_cast<std::size_t>(batch));
    rng r(1);
    for (auto& v : x) v = r.uniform();
    for (auto& v : y) v = static_cast<float>(r.below(10));
    const sgd_options opt{.learning_rate = 0.001f, .momentum = 0.9f, .weight_decay = 0.0f};
    const double s = best_seconds(
        [&] {
          auto loss = net.train_step(params, grads, velocity, opt, x.data(), y.data(), batch, ws);
          if (!loss) std::abort();
        },
        20, 5);
    const double flops = 2.0 * static_cast<double>(batch) * (2 * macs.all + macs.with_input_grad);
    std::printf("%-22s %6lld %12.1f %12.0f %10.1f %7.0f%%\n", name.c_str(), static_cast<long long>(batch), 1.0 / s,
                static_cast<double>(batch) / s, flops / s / 1e9, 100.0 * flops / s / 1e9 / peak);
    std::fflush(stdout);
  }
}

// The direct convolution: y[p][o] = b[o] + Σ_taps Σ_c x[p + tap][c] · w[o][tap][c], with the weights
// transposed once to [tap][c][o] so that the innermost loop runs over contiguous output channels.
void direct_conv(const conv_geometry& g, const std::vector<float>& wt, std::span<const float> b, const float* x, std::int64_t rows,
                 float* y) {
  const std::int64_t oc = g.out.channels, ic = g.in.channels;
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* xn = x + n * g.in.size();
    float* yn = y + n * g.out.size();
    for (std::int64_t oy = 0; oy < g.out.height; ++oy)
      for (std::int64_t ox = 0; ox < g.out.width; ++ox) {
        float* acc = yn + (oy * g.out.width + ox) * oc;
        for (std::int64_t o = 0; o < oc; ++o) acc[o] = b[static_cast<std::size_t>(o)];
        for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
          const std::int64_t iy = oy * g.stride + kh - g.pad_h;
          if (iy < 0 || iy >= g.in.height) continue;
          for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
            const std::int64_t ix = ox * g.stride + kw - g.pad_w;
            if (ix < 0 || ix >= g.in.width) continue;
            const float* xp = xn + (iy * g.in.width + ix) * ic;
            const float* wp = wt.data() + (kh * g.kernel_w + kw) * ic * oc;
            for (std::int64_t c = 0; c < ic; ++c) {
              const float xv = xp[c];
              const float* wc = wp + c * oc;
              for (std::int64_t o = 0; o < oc; ++o) acc[o] += xv * wc[o];
            }
          }
        }
      }
  }
}

// The forward pass of one convolution at batch 32, both ways: GFLOP/s of each and their outputs' largest difference.
void conv_forward_row(const std::string& name, const tensor_shape& in, std::int64_t out_channels, double peak) {
  const auto g = make_conv_geometry(in, out_channels, 3, 1, padding_kind::same);
  if (!g) std::abort();
  const conv_geometry& geo = g.value();
  constexpr std::int64_t rows = 32;
  rng r(3);
  std::vector<float> w(static_cast<std::size_t>(geo.weights())), b(static_cast<std::size_t>(out_channels)),
      x(static_cast<std::size_t>(rows * in.size())), y1(static_cast<std::size_t>(rows * geo.out.size())), y2(y1.size()),
      patches(conv_patch_floats(geo, rows));
  for (auto* v : {&w, &b, &x})
    for (auto& e : *v) e = r.uniform() - 0.5f;
  std::vector<float> wt(w.size());  // [tap][c][o]
  const std::int64_t taps = geo.kernel_h * geo.kernel_w;
  for (std::int64_t o = 0; o < out_channels; ++o)
    for (std::int64_t t = 0; t < taps; ++t)
      for (std::int64_t c = 0; c < in.channels; ++c)
        wt[static_cast<std::size_t>((t * in.channels + c) * out_channels + o)] = w[static_cast<std::size_t>((o * taps + t) * in.channels + c)];
  const double im2col = best_seconds([&] { conv_forward(geo, w, b, x.data(), rows, y1.data(), patches); }, 10, 5);
  const double direct = best_seconds([&] { direct_conv(geo, wt, b, x.data(), rows, y2.data()); }, 10, 5);
  float worst = 0;
  for (std::size_t i = 0; i < y1.size(); ++i) worst = std::max(worst, std::abs(y1[i] - y2[i]));
  const double flops = 2.0 * rows * static_cast<double>(geo.out.height * geo.out.width) * static_cast<double>(geo.weights());
  std::printf("%-34s %10.1f %5.0f%% %10.1f %5.0f%% %8.2fx   (outputs differ by at most %.1e)\n", name.c_str(), flops / im2col / 1e9,
              100 * flops / im2col / 1e9 / peak, flops / direct / 1e9, 100 * flops / direct / 1e9 / peak, direct / im2col, static_cast<double>(worst));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::core;
  using tessera::bench::gemm_gflops;
  Eigen::setNbThreads(1);
  std::vector<std::int64_t> hidden = {512, 512};
  if (argc > 1 && std::string(argv[1]) == "--wide") hidden = {2048, 2048};
  const double peak = std::max(gemm_gflops(1024), gemm_gflops(2048));
  std::printf("single-thread fp32 GEMM (Eigen, square, best of 1024/2048): %.1f GFLOP/s\n", peak);
  std::printf("%-22s %6s %12s %12s %10s %8s\n", "model", "batch", "steps/s", "examples/s", "GFLOP/s", "of GEMM");
  for (auto comp : {compensation_kind::none, compensation_kind::layer_norm}) {
    model_spec spec;
    spec.inputs = 784;
    spec.hidden = hidden;
    spec.outputs = 10;
    spec.compensation = comp;
    std::string name = "784";
    for (auto h : hidden) name += "-" + std::to_string(h);
    step_rows(name + "-10" + std::string(comp == compensation_kind::layer_norm ? " +LN" : ""), spec, peak);
  }
  std::printf("\nthe Fashion-MNIST CNN, its layers as in bench/common/cnn.hpp (+LN: the default)\n");
  step_rows("cnn 32-64-128 +LN", tessera::bench::fashion_cnn(32, 64, 128), peak);
  step_rows("cnn 8-16-32 (1/4) +LN", tessera::bench::fashion_cnn(8, 16, 32), peak);
  std::printf("\nconvolution forward, batch 32, 3x3 same   im2col GFLOP/s of GEMM  direct GFLOP/s of GEMM  direct/im2col time\n");
  conv_forward_row("layer 1: 28x28x1 -> 32", {.height = 28, .width = 28, .channels = 1}, 32, peak);
  conv_forward_row("layer 2: 14x14x32 -> 64", {.height = 14, .width = 14, .channels = 32}, 64, peak);
  conv_forward_row("layer 1 (1/4): 28x28x1 -> 8", {.height = 28, .width = 28, .channels = 1}, 8, peak);
  conv_forward_row("layer 2 (1/4): 14x14x8 -> 16", {.height = 14, .width = 14, .channels = 8}, 16, peak);
  return 0;
}
