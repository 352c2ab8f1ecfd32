// A training step must not allocate (DESIGN.md §4). This executable replaces malloc and friends with
// counting versions (glibc lets a program interpose them) and runs steps in an arena with the counter
// armed. Eigen's own runtime malloc check is armed too, though it only fires in builds with assertions.
// Under AddressSanitizer, which owns malloc itself, the test is compiled out.
#include <doctest/doctest.h>

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_COUNT_MALLOC 0
#else
#define TESSERA_COUNT_MALLOC 1
#endif

#if TESSERA_COUNT_MALLOC
namespace {
std::atomic<bool> armed{false};
std::atomic<long> allocations{0};
void count() noexcept {
  if (armed.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) noexcept {
  count();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t m) noexcept {
  count();
  return __libc_calloc(n, m);
}
void* realloc(void* p, std::size_t n) noexcept {
  count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  count();
  return __libc_memalign(a, n);
}
void* memalign(std::size_t a, std::size_t n) noexcept {
  count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  count();
  *out = __libc_memalign(a, n);
  return *out != nullptr ? 0 : 12;  // ENOMEM
}
}
#endif

#include <Eigen/Core>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/edge/arena.hpp"

using namespace tessera;

namespace {

// Random examples in memory, served without allocation.
class random_source final : public core::batch_source {
 public:
  explicit random_source(std::int64_t features) : features_(features) {}
  std::int64_t feature_count() const noexcept override { return features_; }
  core::result<void> next(std::span<float> x, std::span<float> y) override {
    for (auto& v : x) v = r_.uniform();
    for (auto& v : y) v = static_cast<float>(r_.below(10));
    return {};
  }
  std::string describe() const override { return "random"; }
  std::size_t buffer_bytes() const noexcept override { return 0; }

 private:
  std::int64_t features_;
  core::rng r_{1};
};

}  // namespace

TEST_CASE("a training step and an evaluation in the arena allocate nothing, whatever the shapes" * doctest::skip(!TESSERA_COUNT_MALLOC) *
          doctest::description("AddressSanitizer owns malloc in this build; the native build counts")) {
#if TESSERA_COUNT_MALLOC
  std::vector<core::mlp_arch> archs;
  for (auto hidden : {std::vector<std::int64_t>{64, 64}, std::vector<std::int64_t>{512, 512}, std::vector<std::int64_t>{2048}}) {
    core::model_spec spec;
    spec.inputs = 784;
    spec.hidden = hidden;
    spec.outputs = 10;
    archs.push_back(spec.full_arch());
  }
  // Convolutional networks on the same 784 inputs: an image (28×28×1) and a sequence (28 steps of 28).
  core::mlp_arch image{.widths = {1, 16, 32, 64, 10}, .task = core::task_kind::classification, .layer_norm = true,
                       .input_scale = {1, 1, 1, 1}, .input = {.height = 28, .width = 28, .channels = 1}, .layers = {}};
  image.layers = {{.kind = core::layer_kind::conv2d, .units = 16, .kernel = 3}, {.kind = core::layer_kind::max_pool, .pool = 2},
                  {.kind = core::layer_kind::conv2d, .units = 32, .kernel = 3, .stride = 2}, {.kind = core::layer_kind::flatten},
                  {.kind = core::layer_kind::dense, .units = 64}};
  archs.push_back(image);
  core::mlp_arch sequence{.widths = {28, 32, 10}, .task = core::task_kind::classification, .layer_norm = true,
                          .input_scale = {1, 1}, .input = {.height = 1, .width = 28, .channels = 28}, .layers = {}};
  sequence.layers = {{.kind = core::layer_kind::conv1d, .units = 32, .kernel = 5}, {.kind = core::layer_kind::global_avg_pool}};
  archs.push_back(sequence);
  // Shapes where Eigen turns a product into a matrix-vector one (a result of one row or one column):
  // a regression's single output, and a convolution of one channel with a dense layer of one neuron.
  core::model_spec regression;
  regression.inputs = 784;
  regression.hidden = {64};
  regression.outputs = 1;
  regression.task = core::task_kind::regression;
  archs.push_back(regression.full_arch());
  core::mlp_arch thin{.widths = {1, 1, 1, 10}, .task = core::task_kind::classification, .layer_norm = false,
                      .input_scale = {1, 2, 1}, .input = {.height = 28, .width = 28, .channels = 1}, .layers = {}};
  thin.layers = {{.kind = core::layer_kind::conv2d, .units = 1, .kernel = 3}, {.kind = core::layer_kind::max_pool, .pool = 2},
                 {.kind = core::layer_kind::flatten}, {.kind = core::layer_kind::dense, .units = 1}};
  archs.push_back(thin);
  for (const core::mlp_arch& arch : archs) {
    // Batches of 64 and of one example (one row: the matrix-vector case for every layer).
    for (const std::int64_t batch : {64, 1}) {
      INFO("widths ", arch.widths.size(), " layers, ", arch.layers.size(), " layer specs, batch ", batch);
      REQUIRE(core::validate(arch, "arch").ok());
      auto arena = edge::training_arena::reserve(arch, batch, true, core::codec_kind::f32, std::size_t{1} << 30);
      REQUIRE(arena.ok());
      core::rng init(3);
      for (float& v : arena.value()->params()) v = (init.uniform() - 0.5f) * 0.1f;
      core::local_trainer trainer(arch, batch, arena.value()->buffers());
      random_source source(784);
      const core::local_training_options opt{.steps = 3, .sgd = {.learning_rate = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f}};
      REQUIRE(trainer.run(arena.value()->params(), source, opt).ok());  // warm-up outside the armed region
      // An evaluation whose last batch holds one example.
      std::vector<float> x(static_cast<std::size_t>(784 * (batch + 1))), y(static_cast<std::size_t>(batch + 1), 1.0f);
      for (float& v : x) v = init.uniform();
      core::memory_table held_out(784, x, y, "held out");
      REQUIRE(core::evaluate_in(trainer.net(), arena.value()->params(), held_out, arena.value()->buffers(), batch, nullptr).ok());

      Eigen::internal::set_is_malloc_allowed(false);
      allocations = 0;
      armed = true;
      auto report = trainer.run(arena.value()->params(), source, opt);
      auto scored = core::evaluate_in(trainer.net(), arena.value()->params(), held_out, arena.value()->buffers(), batch, nullptr);
      armed = false;
      Eigen::internal::set_is_malloc_allowed(true);
      REQUIRE(report.ok());
      REQUIRE(scored.ok());
      CHECK(report.value().steps == 3);
      CHECK(scored.value().examples == batch + 1);
      CHECK(allocations.load() == 0);
    }
  }
  // The counter does count: an allocation while armed is seen.
  allocations = 0;
  armed = true;
  void* p = std::malloc(100);
  armed = false;
  std::free(p);
  CHECK(allocations.load() == 1);
#endif
}
