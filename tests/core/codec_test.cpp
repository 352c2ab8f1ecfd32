#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tessera/core/codec.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/rng.hpp"

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

}  // namespace

TEST_CASE("codec f32: the round trip is exact") {
  const auto a = small_arch();
  const auto p = random_params(a, 3.0f, 1);
  const auto blob = encoded(a, codec_kind::f32, p);
  CHECK(blob.size() == 4 * p.size());
  std::vector<float> back(p.size());
  REQUIRE(decode(a, codec_kind::f32, blob, back).ok());
  CHECK(back == p);
}

TEST_CASE("codec f16: relative error at most 2^-11 in the normal range, exact conversions at the edges") {
  const auto a = small_arch();
  const auto p = random_params(a, 100.0f, 2);
  const auto blob = encoded(a, codec_kind::f16, p);
  CHECK(blob.size() == 2 * p.size());
  std::vector<float> back(p.size());
  REQUIRE(decode(a, codec_kind::f16, blob, back).ok());
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
  std::vector<float> back(p.size());
  REQUIRE(decode(a, codec_kind::q8, blob, back).ok());
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
  std::vector<float> zeros(p.size(), 0.0f);
  REQUIRE(decode(a, codec_kind::q8, encoded(a, codec_kind::q8, zeros), back).ok());
  CHECK(back == zeros);
}

TEST_CASE("codec: a blob of the wrong size is refused, naming both sizes") {
  const auto a = small_arch();
  const auto p = random_params(a, 1.0f, 4);
  for (auto c : {codec_kind::f32, codec_kind::f16, codec_kind::q8}) {
    auto blob = encoded(a, c, p);
    blob.pop_back();
    std::vector<float> back(p.size());
    auto r = decode(a, c, blob, back);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == make_error_code(errc::bad_format));
    CHECK(r.error().message.find(std::to_string(blob.size())) != std::string::npos);
    CHECK(r.error().message.find(std::to_string(blob.size() + 1)) != std::string::npos);
  }
}

TEST_CASE("codec: a NaN in an f32 blob is refused, naming the parameter") {
  const auto a = small_arch();
  auto blob = encoded(a, codec_kind::f32, random_params(a, 1.0f, 5));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(blob.data() + 4 * 9, &nan, 4);
  std::vector<float> back(param_count(a));
  auto r = decode(a, codec_kind::f32, blob, back);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == make_error_code(errc::not_finite));
  CHECK(r.error().message.find("parameter 9") != std::string::npos);
}

TEST_CASE("codec: an infinity in an f16 blob is refused") {
  const auto a = small_arch();
  auto blob = encoded(a, codec_kind::f16, random_params(a, 1.0f, 6));
  const std::uint16_t inf = 0x7c00;
  std::memcpy(blob.data() + 2 * 3, &inf, 2);
  std::vector<float> back(param_count(a));
  auto r = decode(a, codec_kind::f16, blob, back);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("parameter 3") != std::string::npos);
}

TEST_CASE("codec: a q8 row scale that is negative or not finite is refused, naming its byte") {
  const auto a = small_arch();
  for (float bad : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto blob = encoded(a, codec_kind::q8, random_params(a, 1.0f, 7));
    std::memcpy(blob.data() + 11, &bad, 4);  // the second row's scale: after 4 + 7 bytes
    std::vector<float> back(param_count(a));
    auto r = decode(a, codec_kind::q8, blob, back);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("byte 11") != std::string::npos);
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
