// Shared by the benchmarks: the Fashion-MNIST convolutional network of the benchmarks (3×3
// convolutions of c1 and c2 channels, each followed by 2×2 max pooling, then a dense layer of d
// neurons), and the useful multiply-adds of a training step on any network.
#pragma once

#include <cstdlib>
#include <string>

#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::bench {

inline core::model_spec fashion_cnn(std::int64_t c1, std::int64_t c2, std::int64_t d) {
  const std::string text = R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [{"conv2d": {"channels": )" + std::to_string(c1) +
                           R"(, "kernel": 3}}, {"max_pool": 2}, {"conv2d": {"channels": )" + std::to_string(c2) +
                           R"(, "kernel": 3}}, {"max_pool": 2}, {"flatten": true}, {"dense": )" + std::to_string(d) + "}]}";
  auto spec = core::parse_model_spec(text, "the benchmark's CNN");
  if (!spec) std::abort();
  return spec.value();
}

// Multiply-adds per example of the forward pass (`all`) and of the layers whose input gradient the
// backward pass computes (`with_input_grad`: every parametric layer but the first). A step's useful
// flops per example: 2 · (2 · all + with_input_grad) (forward, weight gradients, input gradients).
struct step_macs {
  double all = 0, with_input_grad = 0;
};
inline step_macs macs_of(const core::mlp_arch& arch) {
  const auto slots = core::param_slots(arch);
  const auto plans = core::plan_layers(arch);
  step_macs m;
  for (std::size_t l = 0; l < slots.size(); ++l) {
    double positions = 1;
    if (l < plans.size() && plans[l].kind != core::layer_kind::dense)
      positions = static_cast<double>(plans[l].conv.out.height * plans[l].conv.out.width);
    const double macs = positions * static_cast<double>(slots[l].rows * slots[l].cols);
    m.all += macs;
    if (l > 0) m.with_input_grad += macs;
  }
  return m;
}

}  // namespace tessera::bench
