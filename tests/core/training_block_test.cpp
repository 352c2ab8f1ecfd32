// The trainer's memory in one aligned block (training_block.cpp): every region where the layout says,
// aligned and zeroed, a trainer working inside it, and a failed allocation as an error.
#include "tessera/core/train/training_block.hpp"

#include <doctest/doctest.h>

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
using namespace tessera::testing;

namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// `span` lies at byte `offset` of the block and holds `bytes` bytes.
template <class T>
void check_region(core::training_block& block, std::span<T> span, std::size_t offset, std::size_t bytes) {
  CHECK(span.size_bytes() == bytes);
  if (bytes == 0) return;
  CHECK(address(span.data()) == address(block.all().data()) + offset);
  CHECK(address(span.data()) % core::k_arena_alignment == 0);
}

}  // namespace

TEST_CASE("training_block: regions where the layout puts them, aligned, zeroed, inside the block") {
  const auto arch = arch_of({20, 16, 12, 4}, true);
  for (const bool momentum : {true, false}) {
    for (const auto codec : {core::codec_kind::f32, core::codec_kind::q8}) {
      CAPTURE(momentum);
      const core::training_memory layout = core::plan_training_memory(arch, 8, momentum, codec);
      auto block = core::training_block::allocate(layout);
      REQUIRE(block.ok());
      core::training_block& b = block.value();
      CHECK(b.size_bytes() == layout.total);
      CHECK(b.all().size() == layout.total);
      CHECK(address(b.all().data()) % core::k_arena_alignment == 0);
      CHECK(std::all_of(b.all().begin(), b.all().end(), [](std::byte x) { return x == std::byte{0}; }));
      check_region(b, b.params(), layout.params, layout.params_bytes);
      check_region(b, b.staging(), layout.staging, layout.staging_bytes);
      const core::training_buffers buf = b.buffers();
      check_region(b, buf.grads, layout.grads, layout.grads_bytes);
      check_region(b, buf.velocity, layout.velocity, layout.velocity_bytes);
      check_region(b, buf.workspace, layout.workspace, layout.workspace_bytes);
      check_region(b, buf.features, layout.features, layout.features_bytes);
      check_region(b, buf.targets, layout.targets, layout.targets_bytes);
      CHECK(buf.velocity.empty() != momentum);  // momentum keeps a velocity and no gradient buffer
      CHECK(buf.grads.empty() == momentum);
      CHECK(b.staging().empty() == (codec == core::codec_kind::f32));
    }
  }
}

TEST_CASE("training_block: a trainer runs inside the block, the same steps giving the same floats") {
  const auto arch = arch_of({4, 8, 3}, true);
  core::rng r(9);
  std::vector<float> x;
  std::vector<float> y;
  for (int i = 0; i < 64; ++i) {
    for (int f = 0; f < 4; ++f) x.push_back(r.uniform());
    y.push_back(static_cast<float>(r.below(3)));
  }
  core::memory_table data(4, x, y, "random");
  const core::model_spec spec = spec_of(4, {8}, 3);
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 2; ++run) {
    auto block = core::training_block::allocate(core::plan_training_memory(arch, 8, true, core::codec_kind::f32));
    REQUIRE(block.ok());
    core::initialize(spec, block.value().params());
    core::local_trainer trainer(arch, 8, block.value().buffers());
    core::table_batches batches(data, 5, 8);
    const auto report = trainer.run(block.value().params(), batches, {.steps = 20, .sgd = {.learning_rate = 0.1f}});
    REQUIRE(report.ok());
    CHECK(report.value().steps == 20);
    const auto p = block.value().params();
    results.emplace_back(p.begin(), p.end());
  }
  CHECK(results[0] == results[1]);
  std::vector<float> initial(results[0].size());
  core::initialize(spec, initial);
  CHECK(results[0] != initial);
}

namespace {

// Bytes of stack that fn() touches, measured on a thread of its own whose 8 MiB stack is painted with a
// pattern first: from the top down to the lowest byte that no longer holds it.
template <class F>
std::size_t stack_used(F fn) {
  constexpr std::size_t size = 8u << 20;
  constexpr unsigned char paint = 0xC5;
  void* stack = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(stack != MAP_FAILED);
  std::memset(stack, paint, size);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, size);
  pthread_t thread;
  auto run = [](void* f) -> void* {
    (*static_cast<F*>(f))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, run, &fn) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  const auto* bytes = static_cast<const unsigned char*>(stack);
  std::size_t untouched = 0;
  while (untouched < size && bytes[untouched] == paint) ++untouched;
  munmap(stack, size);
  return size - untouched;
}

core::mlp_arch conv_arch() {
  core::mlp_arch a;
  a.input = {.height = 28, .width = 28, .channels = 1};
  a.layers = {{.kind = core::layer_kind::conv2d, .units = 32, .kernel = 3},
              {.kind = core::layer_kind::max_pool, .pool = 2},
              {.kind = core::layer_kind::conv2d, .units = 64, .kernel = 3},
              {.kind = core::layer_kind::max_pool, .pool = 2},
              {.kind = core::layer_kind::flatten},
              {.kind = core::layer_kind::dense, .units = 128}};
  a.widths = {1, 32, 64, 128, 10};
  a.input_scale = {1.0f, 1.0f, 1.0f, 1.0f};
  return a;
}

}  // namespace

// The memory formula counts the stack Eigen's matrix products pack their operands on
// (core::product_stack_bytes, with the blocking core/math/CMakeLists.txt fixes): a training step on a
// wide MLP and on a CNN touches at least that much stack (the count is not idle) and at most that
// plus the frames of the training code (64 KiB; the products' buffers are the only large ones).
TEST_CASE("training_block: a step's stack is the matrix products' packing buffers that the plan counts") {
  struct model {
    core::mlp_arch arch;
    std::int64_t batch;
  };
  for (const model& m : {model{arch_of({784, 512, 512, 10}, true), 64}, model{conv_arch(), 32}}) {
    const auto layout = core::plan_training_memory(m.arch, m.batch, true, core::codec_kind::f32);
    INFO("widths ", m.arch.widths.size(), " layers, batch ", m.batch, ", counted ", layout.stack_bytes, " bytes of stack");
    CHECK(layout.stack_bytes > 100'000);  // wide enough that the products' blocks dominate the frames
    CHECK(layout.needed() == layout.total + layout.stack_bytes);
    CHECK(core::bytes_needed(m.arch, m.batch, true, core::codec_kind::f32) == layout.needed());
    auto block = core::training_block::allocate(layout);
    REQUIRE(block.ok());
    const auto inputs = static_cast<std::size_t>(m.arch.inputs());
    core::rng r(5);
    std::vector<float> x(static_cast<std::size_t>(m.batch) * inputs * 2);
    std::vector<float> y(static_cast<std::size_t>(m.batch) * 2);
    for (auto& v : x) v = r.uniform();
    for (auto& v : y) v = static_cast<float>(r.below(10));
    core::memory_table data(static_cast<std::int64_t>(inputs), x, y, "random");
    bool ok = false;
    const std::size_t used = stack_used([&] {
      core::local_trainer trainer(m.arch, m.batch, block.value().buffers());
      core::table_batches batches(data, 5, m.batch);
      ok = trainer.run(block.value().params(), batches, {.steps = 2, .sgd = {.learning_rate = 0.01f, .momentum = 0.9f}}).ok();
    });
    INFO("used ", used, " bytes of stack");
    CHECK(ok);
    CHECK(used >= layout.stack_bytes);
#if !defined(__SANITIZE_ADDRESS__)  // its redzones widen every frame
    CHECK(used <= layout.stack_bytes + 64 * 1024);
#endif
  }
}

#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer aborts on an impossible allocation instead of failing it
TEST_CASE("training_block: an allocation that cannot be made is an error, not a crash") {
  core::training_memory impossible;
  impossible.total = std::numeric_limits<std::size_t>::max() / core::k_arena_alignment * core::k_arena_alignment;
  const auto e = error_of(core::training_block::allocate(impossible));
  CHECK(e.code == core::errc::over_budget);
  CHECK(e.message == "cannot allocate " + std::to_string(impossible.total) + " bytes of training memory");
}
#endif
