// bench/train_step — one training step (forward, backward, SGD update) against the machine's own
// single-thread fp32 matrix-multiply rate, measured in the same run with the same compiler flags.
//
// Useful work of a step on widths n0..nL+1 at batch B: forward 2·B·Σ n_l·n_{l-1} flops, weight
// gradients the same again, input gradients 2·B·Σ_{l≥2} n_l·n_{l-1} (none for the data). The ratio
// printed is (useful flops / step time) / (flops of a large square GEMM / its time).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "../common/timing.hpp"

int main(int argc, char** argv) {
  using namespace tessera::core;
  using tessera::bench::best_seconds;
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
    const mlp_arch arch = spec.full_arch();
    network net(arch);
    std::vector<float> params(net.param_count()), grads(net.param_count()), velocity(net.param_count());
    initialize(spec, params);
    double macs = 0, macs_input_grad = 0;
    for (std::size_t l = 1; l < arch.widths.size(); ++l) {
      macs += static_cast<double>(arch.widths[l] * arch.widths[l - 1]);
      if (l > 1) macs_input_grad += static_cast<double>(arch.widths[l] * arch.widths[l - 1]);
    }
    for (std::int64_t batch : {16, 32, 64}) {
      std::vector<float> ws(net.workspace_floats(batch)), x(static_cast<std::size_t>(batch * 784)), y(static_cast<std::size_t>(batch));
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
      const double flops = 2.0 * static_cast<double>(batch) * (2 * macs + macs_input_grad);
      std::string name = "784";
      for (auto h : hidden) name += "-" + std::to_string(h);
      name += "-10" + std::string(comp == compensation_kind::layer_norm ? " +LN" : "");
      std::printf("%-22s %6lld %12.1f %12.0f %10.1f %7.0f%%\n", name.c_str(), static_cast<long long>(batch), 1.0 / s,
                  static_cast<double>(batch) / s, flops / s / 1e9, 100.0 * flops / s / 1e9 / peak);
    }
  }
  return 0;
}
