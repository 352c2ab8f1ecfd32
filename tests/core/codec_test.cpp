#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"

using namespace tessera::core;

namespace {

mlp_arch small_arch(bool layer_norm = true) {
  mlp_arch a;
  a.widths = {7, 5, 4, 3};
  a.layer_norm = layer_norm;
  a.input_scale.assign(3, 1.0f);
  return a;
}

std::vector<float> random_params(const mlp_arch& a, float spread, std::uint64_t seed) {
  std::vector<float> p(param_count(a));
  rng r(seed);
  for (auto& v : p) v = (r.uniform() - 0.5f) * 2.0f * spread;
  return p;
}

std::vector<std::byte> encoded(const mlp_arch& a, codec_kind c, const std::vector<float>& p) {
  std::vector<std::byte> blob(encoded_bytes(a, c));
  REQUIRE(encode(a, c, p, blob).ok());
  return blob;
}

// What a blob decodes to; decoding must succeed.
std::vector<float> decoded(const mlp_arch& a, codec_kind c, const std::vector<std::byte>& blob) {
  std::vector<float> back(param_count(a));
  REQUIRE(decode(a, c, blob, back).ok());
  return back;
}

}  // namespace

TEST_CASE("codec f32: the round trip is exact") {
  const auto a = small_arch();
  const auto p = random_params(a, 3.0f, 1);
  const auto blob = encoded(a, codec_kind::f32, p);
  CHECK(blob.size() == 4 * p.size());
  CHECK(decoded(a, codec_kind::f32, blob) == p);
}

TEST_CASE("codec f16: relative error at most 2^-11 in the normal range, exact conversions at the edges") {
  const auto a = small_arch();
  const auto p = random_params(a, 100.0f, 2);
  const auto blob = encoded(a, codec_kind::f16, p);
  CHECK(blob.size() == 2 * p.size());
  const auto back = decoded(a, codec_kind::f16, blob);
  for (std::size_t i = 0; i < p.size(); ++i)
    if (std::fabs(p[i]) >= 0x1p-14f) CHECK(std::fabs(back[i] - p[i]) <= std::fabs(p[i]) * 0x1p-11f);
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(0x1p-24f) == 0x0001);              // smallest subnormal
  CHECK(float_to_half(0x1p-25f) == 0x0000);              // a tie rounds to even (zero)
  CHECK(float_to_half(1.0f + 0x1p-11f) == 0x3c00);       // a tie between 1 and its successor: even
  CHECK(float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02);   // a tie rounding up to even
  for (std::uint32_t h = 0; h < 0x7c00; ++h) CHECK(float_to_half(half_to_float(static_cast<std::uint16_t>(h))) == h);
}

TEST_CASE("codec q8: error at most half a step of each row's scale") {
  const auto a = small_arch();
  const auto p = random_params(a, 2.0f, 3);
  const auto blob = encoded(a, codec_kind::q8, p);
  const auto back = decoded(a, codec_kind::q8, blob);
  // The first row of W1 (7 values) has its scale in the first 4 bytes.
  float scale = 0;
  std::memcpy(&scale, blob.data(), 4);
  float max_abs = 0;
  for (int i = 0; i < 7; ++i) max_abs = std::max(max_abs, std::fabs(p[static_cast<std::size_t>(i)]));
  CHECK(scale == doctest::Approx(max_abs / 127.0f));
  for (int i = 0; i < 7; ++i) CHECK(std::fabs(back[static_cast<std::size_t>(i)] - p[static_cast<std::size_t>(i)]) <= 0.5f * scale * 1.0001f);
  // Every value, with its own row's scale bounded by the largest magnitude in the model.
  for (std::size_t i = 0; i < p.size(); ++i) CHECK(std::fabs(back[i] - p[i]) <= 0.5f * (2.0f / 127.0f) * 1.0001f);
  // A row of zeros encodes with scale 0 and decodes to zeros.
  const std::vector<float> zeros(p.size(), 0.0f);
  CHECK(decoded(a, codec_kind::q8, encoded(a, codec_kind::q8, zeros)) == zeros);
}

TEST_CASE("codec q8: a row too small for a normal scale encodes finite steps and decodes within half of one") {
  // Largest magnitude 1e-37: its scale (7.9e-40) is subnormal and 1/scale overflows; a zero beside it
  // must not turn into 0 · inf.
  const auto a = small_arch();
  std::vector<float> p(param_count(a), 0.0f);
  p[0] = 1e-37f;
  p[1] = -4e-38f;
  p[3] = 1e-39f;
  const auto blob = encoded(a, codec_kind::q8, p);
  const auto back = decoded(a, codec_kind::q8, blob);
  float scale = 0;
  std::memcpy(&scale, blob.data(), 4);
  REQUIRE(scale > 0);
  CHECK(std::to_integer<int>(blob[4]) == 127);
  for (std::size_t i = 0; i < p.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isfinite(back[i]));
    CHECK(std::fabs(back[i] - p[i]) <= 0.5f * scale * 1.01f);
  }
}

// ---- every way decode must refuse a blob: one enum, one generator, one table -----------------------

namespace {

// A way a received blob of small_arch()'s parameters can be wrong. bad_blob_bytes() makes each from a
// valid blob; blob_rejections() says how decode must refuse it.
enum class bad_blob {
  f32_short,          // one byte missing
  f32_long,           // one byte more
  f16_short,
  q8_short,
  f32_nan,            // parameter 9
  f16_infinity,       // parameter 3
  q8_negative_scale,  // the second row's scale, at byte 4 + 7 = 11
  q8_infinite_scale,
  q8_nan_scale,
};
constexpr std::size_t k_bad_blob_kinds = static_cast<std::size_t>(bad_blob::q8_nan_scale) + 1;

struct blob_rejection {
  bad_blob kind;
  codec_kind codec;
  errc code;
  std::string says;
};

std::vector<std::byte> bad_blob_bytes(bad_blob kind, const mlp_arch& a, codec_kind c) {
  auto blob = encoded(a, c, random_params(a, 1.0f, 5));
  const auto put = [&](std::size_t at, auto value) { std::memcpy(blob.data() + at, &value, sizeof value); };
  switch (kind) {
    case bad_blob::f32_short:
    case bad_blob::f16_short:
    case bad_blob::q8_short: blob.pop_back(); break;
    case bad_blob::f32_long: blob.push_back(std::byte{0}); break;
    case bad_blob::f32_nan: put(4 * 9, std::numeric_limits<float>::quiet_NaN()); break;
    case bad_blob::f16_infinity: put(2 * 3, std::uint16_t{0x7c00}); break;
    case bad_blob::q8_negative_scale: put(11, -1.0f); break;
    case bad_blob::q8_infinite_scale: put(11, std::numeric_limits<float>::infinity()); break;
    case bad_blob::q8_nan_scale: put(11, std::numeric_limits<float>::quiet_NaN()); break;
  }
  return blob;
}

// How decode must refuse each kind, in the order of the enum.
std::vector<blob_rejection> blob_rejections(const mlp_arch& a) {
  const auto sizes = [&](codec_kind c, std::size_t got) {
    return std::string(to_string(c)) + " blob of " + std::to_string(got) + " bytes, expected exactly " +
           std::to_string(encoded_bytes(a, c));
  };
  using enum bad_blob;
  return {
      {f32_short, codec_kind::f32, errc::bad_format, sizes(codec_kind::f32, encoded_bytes(a, codec_kind::f32) - 1)},
      {f32_long, codec_kind::f32, errc::bad_format, sizes(codec_kind::f32, encoded_bytes(a, codec_kind::f32) + 1)},
      {f16_short, codec_kind::f16, errc::bad_format, sizes(codec_kind::f16, encoded_bytes(a, codec_kind::f16) - 1)},
      {q8_short, codec_kind::q8, errc::bad_format, sizes(codec_kind::q8, encoded_bytes(a, codec_kind::q8) - 1)},
      {f32_nan, codec_kind::f32, errc::not_finite, "f32 blob: parameter 9 decodes to nan, not a finite value"},
      {f16_infinity, codec_kind::f16, errc::not_finite, "f16 blob: parameter 3 decodes to inf, not a finite value"},
      {q8_negative_scale, codec_kind::q8, errc::not_finite, "q8 blob: row scale at byte 11 is -1.000000, must be finite"},
      {q8_infinite_scale, codec_kind::q8, errc::not_finite, "q8 blob: row scale at byte 11 is inf, must be finite"},
      {q8_nan_scale, codec_kind::q8, errc::not_finite, "q8 blob: row scale at byte 11 is nan, must be finite"},
  };
}

}  // namespace

TEST_CASE("codec: every malformed blob is refused with its code, naming the size, parameter or byte") {
  const auto a = small_arch();
  const auto rows = blob_rejections(a);
  REQUIRE(rows.size() == k_bad_blob_kinds);
  for (std::size_t i = 0; i < k_bad_blob_kinds; ++i) {
    const blob_rejection& c = rows[i];
    REQUIRE(static_cast<std::size_t>(c.kind) == i);  // the table follows the enum
    CAPTURE(c.says);
    std::vector<float> back(param_count(a));
    auto r = decode(a, c.codec, bad_blob_bytes(c.kind, a, c.codec), back);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == make_error_code(c.code));
    CHECK(r.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("codec: values that cannot be sent are refused at encode time") {
  const auto a = small_arch();
  auto p = random_params(a, 1.0f, 8);
  std::vector<std::byte> blob(encoded_bytes(a, codec_kind::f16));
  p[2] = 70000.0f;
  auto r = encode(a, codec_kind::f16, p, blob);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("parameter 2") != std::string::npos);
  p[2] = std::numeric_limits<float>::infinity();
  std::vector<std::byte> blob32(encoded_bytes(a, codec_kind::f32));
  CHECK_FALSE(encode(a, codec_kind::f32, p, blob32).ok());
}

TEST_CASE("codec: an update holds the layers after the frozen ones, and decoding it leaves the frozen values as they are") {
  for (const codec_kind codec : {codec_kind::f32, codec_kind::f16, codec_kind::q8}) {
    CAPTURE(to_string(codec));
    mlp_arch arch = small_arch();
    arch.frozen = 1;
    const auto slots = param_slots(arch);
    const std::size_t off = slots[1].weight;
    rng r(3);
    std::vector<float> values(param_count(arch));
    for (auto& v : values) v = r.uniform() - 0.5f;
    // What the update holds: layers 2 and 3, counted as a model of those layers alone (5 inputs).
    mlp_arch trained_part;
    trained_part.widths = {5, 4, 3};
    trained_part.layer_norm = true;
    trained_part.input_scale.assign(2, 1.0f);
    CHECK(update_bytes(arch, codec) < encoded_bytes(arch, codec));
    CHECK(update_bytes(arch, codec) == encoded_bytes(trained_part, codec));
    std::vector<std::byte> whole(encoded_bytes(arch, codec)), update(update_bytes(arch, codec));
    REQUIRE(encode(arch, codec, values, whole).ok());
    REQUIRE(encode_update(arch, codec, values, update).ok());
    // The update's bytes are the whole blob's last ones: the same rows, encoded alike.
    CHECK(std::equal(update.begin(), update.end(), whole.end() - static_cast<std::ptrdiff_t>(update.size())));
    std::vector<float> back(values.size(), 7.0f), whole_back(values.size());
    REQUIRE(decode_update(arch, codec, update, back).ok());
    REQUIRE(decode(arch, codec, whole, whole_back).ok());
    CHECK(std::all_of(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(off), [](float v) { return v == 7.0f; }));
    CHECK(std::equal(back.begin() + static_cast<std::ptrdiff_t>(off), back.end(), whole_back.begin() + static_cast<std::ptrdiff_t>(off)));
    // A blob of the whole subnet is not an update.
    auto bad = decode_update(arch, codec, whole, back);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("expected exactly " + std::to_string(update.size())) != std::string::npos);
  }
}
