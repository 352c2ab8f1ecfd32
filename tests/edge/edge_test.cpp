#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/edge/arena.hpp"
#include "tessera/edge/device_data.hpp"
#include "../core/test_files.hpp"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

using tessera::testing::temp_dir;

core::model_spec small_spec() { return testing::spec_of(16, {24, 12}, 4); }

// 4 classes, 4×4 "images" with a bright quadrant per class.
void write_images(const temp_dir& d, std::int64_t n, const std::string& images, const std::string& labels) {
  core::rng r(5);
  std::vector<std::uint8_t> px, lab;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto cls = static_cast<std::uint8_t>(r.below(4));
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) {
        const int q = (y / 2) * 2 + x / 2;
        px.push_back(static_cast<std::uint8_t>((q == cls ? 200 : 20) + r.below(40)));
      }
    lab.push_back(cls);
  }
  REQUIRE(core::write_idx_images(d.file(images), 4, 4, px).ok());
  REQUIRE(core::write_idx_labels(d.file(labels), lab).ok());
}

}  // namespace

TEST_CASE("arena: it and its products' stack are exactly bytes_needed, and training uses all of the arena") {
  const core::model_spec spec = small_spec();
  const core::mlp_arch arch = spec.full_arch();
  const std::size_t needed = core::bytes_needed(arch, 8, true, core::codec_kind::f32);
  auto arena = edge::training_arena::reserve(arch, 8, true, core::codec_kind::f32, needed);
  REQUIRE(arena.ok());
  CHECK(arena.value()->size_bytes() + arena.value()->layout().stack_bytes == needed);
  // Fill with a canary, train one step, and see which bytes changed.
  auto all = arena.value()->all();
  std::fill(all.begin(), all.end(), std::byte{0xA5});
  core::initialize(spec, arena.value()->params());
  temp_dir d;
  write_images(d, 64, "i", "l");
  auto data = edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i"), .labels = d.file("l")}, .max_batch = 8}, 1);
  REQUIRE(data.ok());
  core::local_trainer trainer(arch, 8, arena.value()->buffers());
  REQUIRE(trainer.run(arena.value()->params(), data.value()->train(), {.steps = 1, .sgd = {}}).ok());
  const auto& m = arena.value()->layout();
  auto touched = [&](std::size_t offset, std::size_t bytes) {
    return std::any_of(all.begin() + static_cast<std::ptrdiff_t>(offset), all.begin() + static_cast<std::ptrdiff_t>(offset + bytes),
                       [](std::byte b) { return b != std::byte{0xA5}; });
  };
  CHECK(touched(m.params, m.params_bytes));
  CHECK(m.grads_bytes == 0);  // momentum: gradients accumulate into the velocity
  CHECK(touched(m.velocity, m.velocity_bytes));
  CHECK(touched(m.workspace, m.workspace_bytes));
  CHECK(touched(m.features, m.features_bytes));
  CHECK(touched(m.targets, m.targets_bytes));
  // The last byte in use is in the last region: nothing beyond the formula exists or is needed.
  std::size_t last = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] != std::byte{0xA5}) last = i;
  CHECK(last >= m.targets);
  CHECK(last < needed);
}

TEST_CASE("refusal: an assignment over the budget states both numbers") {
  const core::mlp_arch arch = small_spec().full_arch();
  const std::size_t needed = core::bytes_needed(arch, 8, true, core::codec_kind::f32);
  auto arena = edge::training_arena::reserve(arch, 8, true, core::codec_kind::f32, needed - 1);
  REQUIRE_FALSE(arena.ok());
  CHECK(arena.error().code == core::make_error_code(core::errc::over_budget));
  CHECK(arena.error().message.find(std::to_string(needed)) != std::string::npos);
  CHECK(arena.error().message.find(std::to_string(needed - 1)) != std::string::npos);
  CHECK(arena.error().message.find("16-24-12-4") != std::string::npos);
}

TEST_CASE("device data: plain IDX is read at random with a held-out validation split") {
  temp_dir d;
  write_images(d, 200, "i", "l");
  auto data = edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i"), .labels = d.file("l")}, .validation_fraction = 0.1, .max_batch = 16}, 3);
  REQUIRE(data.ok());
  CHECK(data.value()->train_examples() == 180);
  CHECK(data.value()->has_validation());
  // The batch's index buffer and the list of the 20 held-out rows: nothing grows with the file.
  CHECK(data.value()->buffer_bytes() == (16 + 20) * sizeof(std::uint32_t));
  // Train a little and validate inside an arena: the held-out examples are learnable.
  const core::model_spec spec = small_spec();
  auto arena = edge::training_arena::reserve(spec.full_arch(), 16, true, core::codec_kind::f32, 1 << 20);
  REQUIRE(arena.ok());
  core::initialize(spec, arena.value()->params());
  core::local_trainer trainer(spec.full_arch(), 16, arena.value()->buffers());
  REQUIRE(trainer.run(arena.value()->params(), data.value()->train(), {.steps = 150, .sgd = {.learning_rate = 0.05f}}).ok());
  auto ev = data.value()->validate(trainer.net(), arena.value()->params(), arena.value()->buffers(), 16);
  REQUIRE(ev.ok());
  CHECK(ev.value().examples == 20);
  CHECK(ev.value().accuracy > 0.9);
}

TEST_CASE("device data: CSV streams through a bounded shuffle buffer, every k-th record held out") {
  temp_dir d;
  {
    std::ofstream f(d.file("data.csv"));
    for (int i = 0; i < 100; ++i) f << (i % 3) << "," << (i % 3 == 0 ? 1 : 0) << "," << (i % 3 == 1 ? 1 : 0) << "," << i * 0.01 << "\n";
  }
  auto data = edge::device_data::open({.source = {.format = core::data_format::csv, .features = d.file("data.csv"), .labels = "", .norm = core::normalization::none}, .shuffle_buffer = 10, .validation_fraction = 0.2, .max_batch = 8}, 1);
  REQUIRE(data.ok());
  CHECK(data.value()->train_examples() == 80);
  CHECK(data.value()->feature_count() == 3);
  CHECK(data.value()->buffer_bytes() >= 10 * 4 * sizeof(float));
}

TEST_CASE("refusal: a truncated data file is named with its record, and the device stays usable") {
  temp_dir d;
  write_images(d, 50, "i", "l");
  fs::resize_file(d.file("i"), fs::file_size(d.file("i")) - 10);
  auto bad = edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i"), .labels = d.file("l")}}, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find(d.file("i")) != std::string::npos);
  CHECK(bad.error().message.find("record 49") != std::string::npos);
  write_images(d, 50, "i2", "l2");
  CHECK(edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i2"), .labels = d.file("l2")}}, 1).ok());
}

TEST_CASE("refusal: a data file with a wrong magic is named") {
  temp_dir d;
  write_images(d, 10, "i", "l");
  { std::fstream f(d.file("i"), std::ios::in | std::ios::out | std::ios::binary); f.put('\x12'); }
  auto bad = edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i"), .labels = d.file("l")}}, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::make_error_code(core::errc::bad_format));
  CHECK(bad.error().message.find(d.file("i")) != std::string::npos);
}

TEST_CASE("refusal: data of the wrong shape for the model is named") {
  temp_dir d;
  write_images(d, 20, "i", "l");
  auto data = edge::device_data::open({.source = {.format = core::data_format::idx, .features = d.file("i"), .labels = d.file("l")}, .max_batch = 4}, 1);
  REQUIRE(data.ok());
  core::model_spec spec = small_spec();
  spec.inputs = 784;
  core::local_trainer trainer(spec.full_arch(), 4);
  std::vector<float> params(core::param_count(spec.full_arch()));
  auto r = trainer.run(params, data.value()->train(), {.steps = 1, .sgd = {}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("16 features") != std::string::npos);
  CHECK(r.error().message.find("784") != std::string::npos);
}

TEST_CASE("refusal: a non-numeric CSV cell is named with line and column") {
  temp_dir d;
  {
    std::ofstream f(d.file("bad.csv"));
    f << "0,1,2\n1,3,4\n0,x5,6\n";
  }
  auto bad = edge::device_data::open({.source = {.format = core::data_format::csv, .features = d.file("bad.csv"), .labels = "", .norm = core::normalization::none}}, 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("bad.csv") != std::string::npos);
  CHECK(bad.error().message.find("line 3") != std::string::npos);
  CHECK(bad.error().message.find("column 2") != std::string::npos);
}

TEST_CASE("refusal: bad data options are named") {
  CHECK_FALSE(edge::device_data::open({.source = {.format = core::data_format::idx, .features = "x", .labels = "y"}, .validation_fraction = 0.9}, 1).ok());
  auto missing = edge::device_data::open({.source = {.format = core::data_format::idx, .features = "/nonexistent/images", .labels = "/nonexistent/labels"}}, 1);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("/nonexistent/") != std::string::npos);
}
