// Tests of tessera/core/train/device_round.hpp: a device's part of a round, as the agent and the simulator
// run it.
#include "tessera/core/train/device_round.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

namespace {

core::training_task small_task() {
  return {.arch = tessera::testing::spec_of(6, {8}, 3).full_arch(), .steps = 5, .batch = 4,
          .sgd = {.learning_rate = 0.1f, .momentum = 0.9f}};
}

// A device's block for `t` after its download: every parameter 0.05, sent with `codec` into the blob
// region and taken from there into the parameters.
struct downloaded {
  core::training_block block;
  std::span<std::byte> blob;  // in the block: its parameters for f32, its staging otherwise
  std::vector<float> sent;
};

downloaded download(const core::training_task& t, core::codec_kind codec) {
  auto block = core::training_block::allocate(core::plan_training_memory(t.arch, t.batch, true, codec)).value();
  const auto blob = core::blob_region(block, codec, core::encoded_bytes(t.arch, codec));
  std::vector<float> sent(core::param_count(t.arch), 0.05f);
  REQUIRE(core::encode(t.arch, codec, sent, blob).ok());
  REQUIRE(core::take_download(block, t.arch, codec, blob).ok());
  return {std::move(block), blob, std::move(sent)};
}

}  // namespace

TEST_CASE("device round: the blob lives in the parameters for f32 and in staging otherwise") {
  const auto t = small_task();
  for (auto codec : {core::codec_kind::f32, core::codec_kind::f16, core::codec_kind::q8}) {
    auto block = core::training_block::allocate(core::plan_training_memory(t.arch, t.batch, true, codec));
    REQUIRE(block.ok());
    const auto bytes = core::encoded_bytes(t.arch, codec);
    const auto blob = core::blob_region(block.value(), codec, bytes);
    CHECK(blob.size() == bytes);
    const auto params = std::as_writable_bytes(block.value().params());
    CHECK((blob.data() == params.data()) == (codec == core::codec_kind::f32));
  }
}

TEST_CASE("device round: take, train, encode — the upload decodes to the trained parameters") {
  const auto t = small_task();
  for (auto codec : {core::codec_kind::f32, core::codec_kind::q8}) {
    INFO(core::to_string(codec));
    auto [block, blob, sent] = download(t, codec);
    CHECK(block.params()[0] == doctest::Approx(0.05f).epsilon(0.01));
    tessera::testing::constant_batches data(6, 0.25f, 2.0f);
    auto report = core::train_for_upload(block, t, codec, blob, data, nullptr);
    REQUIRE(report.ok());
    CHECK(report.value().steps == 5);
    CHECK(report.value().examples == 20);
    std::vector<float> back(core::param_count(t.arch));
    REQUIRE(core::decode(t.arch, codec, blob, back).ok());
    // f32 travels exactly; q8 within half a step of its row's scale (max|x|/127).
    const float tolerance = codec == core::codec_kind::f32 ? 0.0f : 0.02f;
    for (std::size_t i = 0; i < back.size(); ++i) REQUIRE(std::fabs(back[i] - block.params()[i]) <= tolerance);
  }
}

TEST_CASE("device round: a download that is not finite is refused, naming the parameter") {
  const auto t = small_task();
  auto block = core::training_block::allocate(core::plan_training_memory(t.arch, t.batch, true, core::codec_kind::f32)).value();
  const auto blob = core::blob_region(block, core::codec_kind::f32, core::encoded_bytes(t.arch, core::codec_kind::f32));
  std::vector<float> sent(core::param_count(t.arch), 0.05f);
  sent[7] = std::numeric_limits<float>::infinity();
  std::memcpy(blob.data(), sent.data(), blob.size());
  auto ok = core::take_download(block, t.arch, core::codec_kind::f32, blob);
  REQUIRE_FALSE(ok.ok());
  CHECK(ok.error().code == core::errc::not_finite);
  CHECK(ok.error().message == "parameter 7 is not finite");
}

TEST_CASE("device round: with clip_norm the change is clipped to it before the upload, and the report says so") {
  auto t = small_task();
  t.sgd.learning_rate = 0.5f;
  const auto codec = core::codec_kind::f32;
  for (const double clip : {1e-3, 1e3}) {
    CAPTURE(clip);
    t.clip_norm = clip;
    auto [block, blob, sent] = download(t, codec);
    tessera::testing::constant_batches data(6, 0.25f, 2.0f);
    // Without the received parameters clipping cannot be done: an error, not a silent upload.
    tessera::testing::constant_batches again(6, 0.25f, 2.0f);
    CHECK_FALSE(core::train_for_upload(block, t, codec, blob, again, nullptr).ok());
    REQUIRE(core::take_download(block, t.arch, codec, blob).ok());
    std::copy(sent.begin(), sent.end(), block.params().begin());
    auto report = core::train_for_upload(block, t, codec, blob, data, nullptr, sent);
    REQUIRE(report.ok());
    double sq = 0;
    for (std::size_t i = 0; i < sent.size(); ++i) sq += std::pow(static_cast<double>(block.params()[i]) - sent[i], 2);
    CHECK(report.value().clipped == (clip < 1));
    CHECK(std::sqrt(sq) <= clip * (1 + 1e-5));  // to the floats' precision: the hub clips again in double
    if (clip < 1) CHECK(std::sqrt(sq) > 0.999 * clip);  // scaled onto the ball, not below it
  }
  // clip_change alone: inside the ball nothing moves; outside, the direction is kept.
  const std::vector<float> received{0, 0, 0};
  std::vector<float> inside{0.1f, 0.2f, 0.2f}, outside{3, 0, 4};
  CHECK(core::clip_change(received, inside, 1.0) == doctest::Approx(0.3));
  CHECK(inside[1] == 0.2f);
  CHECK(core::clip_change(received, outside, 1.0) == doctest::Approx(5.0));
  CHECK(outside[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(outside[2] == doctest::Approx(0.8).epsilon(1e-5));
}

TEST_CASE("device round: training that diverges is an error, never a report with a loss that is not a number") {
  auto t = small_task();  // features too large for a float once multiplied: the loss overflows
  t.sgd.learning_rate = 1.0f;
  const auto codec = core::codec_kind::f32;
  auto [block, blob, sent] = download(t, codec);
  tessera::testing::constant_batches data(6, 3e38f, 2.0f);
  auto report = core::train_for_upload(block, t, codec, blob, data, nullptr);
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().code == core::errc::not_finite);
  CHECK(report.error().message.find("training diverged") == 0);
}
