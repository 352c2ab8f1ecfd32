// bench/edge_speed — training throughput of the agent's trainer, one thread, for the subnet shapes a
// device gets (1/8 and 1/4 of 784-512-512-10) and the whole model, at batch 16, 32 and 64. Data are
// random examples already in memory, as in the PyTorch peer (torch_speed.py), so both time the same
// thing: forward, backward, SGD with momentum, in the model's default architecture (layer norm).
// Then the Fashion-MNIST CNN (bench/common/cnn.hpp: 32 and 64 channels, dense 128) and its 1/4-channel
// subnet (8, 16, 32).
// Output: one line per case, "tessera NAME BATCH EXAMPLES_PER_S MACS MACS_WITH_INPUT_GRAD" (multiply-adds
// per example: bench/common/cnn.hpp), and the GEMM reference rate.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/train/train.hpp"
#include "../common/cnn.hpp"
#include "../common/timing.hpp"

namespace {

class memory_source final : public tessera::core::batch_source {
 public:
  memory_source(std::int64_t features, std::int64_t batch) : x_(static_cast<std::size_t>(features * batch)), y_(static_cast<std::size_t>(batch)), features_(features) {
    tessera::core::rng r(1);
    for (auto& v : x_) v = r.uniform();
    for (auto& v : y_) v = static_cast<float>(r.below(10));
  }
  std::int64_t feature_count() const noexcept override { return features_; }
  tessera::core::result<void> next(std::span<float> x, std::span<float> y) override {
    std::copy_n(x_.begin(), x.size(), x.begin());
    std::copy_n(y_.begin(), y.size(), y.begin());
    return {};
  }
  std::string describe() const override { return "memory"; }
  std::size_t buffer_bytes() const noexcept override { return 0; }

 private:
  std::vector<float> x_, y_;
  std::int64_t features_;
};

}  // namespace

namespace {

void rows(const std::string& name, const tessera::core::model_spec& spec) {
  using namespace tessera;
  const auto macs = bench::macs_of(spec.full_arch());
  for (std::int64_t batch : {16, 32, 64}) {
    core::local_trainer trainer(spec.full_arch(), batch);
    std::vector<float> params(core::param_count(spec.full_arch()));
    core::initialize(spec, params);
    memory_source source(spec.full_arch().inputs(), batch);
    const std::int64_t steps = 20;
    const core::local_training_options opt{.steps = steps, .sgd = {.learning_rate = 0.01f, .momentum = 0.9f}};
    const double s = bench::best_seconds([&] { if (!trainer.run(params, source, opt).ok()) std::abort(); }, 3, 5);
    std::printf("tessera %s %lld %.0f %.0f %.0f\n", name.c_str(), static_cast<long long>(batch), static_cast<double>(steps * batch) / s,
                macs.all, macs.with_input_grad);
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  using namespace tessera;
  Eigen::setNbThreads(1);
  std::printf("gemm_gflops %.2f\n", std::max(bench::gemm_gflops(1024), bench::gemm_gflops(2048)));
  for (std::int64_t hidden : {64, 128, 512}) {
    core::model_spec spec;
    spec.inputs = 784;
    spec.hidden = {hidden, hidden};
    spec.outputs = 10;
    rows("784-" + std::to_string(hidden) + "-" + std::to_string(hidden) + "-10", spec);
  }
  rows("cnn-32-64-128", bench::fashion_cnn(32, 64, 128));
  rows("cnn-8-16-32", bench::fashion_cnn(8, 16, 32));
  return 0;
}
