// Tests of tessera/crypto/masking.hpp: HKDF against RFC 5869, fixed-point error bounds, counted clipping,
// sums that never wrap, and masks that cancel exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/masking.hpp"

using namespace tessera;

namespace {

std::vector<std::byte> from_hex(const std::string& hex) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<std::byte>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

crypto::key256 key_of(std::uint8_t fill) {
  crypto::key256 k;
  k.fill(static_cast<std::byte>(fill));
  return k;
}

}  // namespace

TEST_CASE("HKDF-SHA256: RFC 5869 test case 1, and one key per purpose") {
  std::vector<std::byte> ikm22(22, std::byte{0x0b});
  const auto salt = from_hex("000102030405060708090a0b0c");
  const auto info = from_hex("f0f1f2f3f4f5f6f7f8f9");
  std::vector<std::byte> okm(42);
  REQUIRE(crypto::hkdf_sha256(ikm22, salt, std::string(reinterpret_cast<const char*>(info.data()), info.size()), okm).ok());
  CHECK(crypto::to_hex(std::span(reinterpret_cast<const std::uint8_t*>(okm.data()), okm.size())) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
  const auto a = crypto::derive_key(ikm22, "tessera mask").value();
  const auto b = crypto::derive_key(ikm22, "tessera rounding").value();
  CHECK(a != b);
  CHECK(a == crypto::derive_key(ikm22, "tessera mask").value());
  CHECK(crypto::random_key().value() != crypto::random_key().value());
  std::vector<std::byte> too_long(255 * 32 + 1);
  CHECK_FALSE(crypto::hkdf_sha256(ikm22, salt, "x", too_long).ok());
}

TEST_CASE("keystream: one key, one stream; another key, another; its bytes look uniform") {
  crypto::keystream a(key_of(1)), b(key_of(1)), c(key_of(2));
  std::vector<std::uint64_t> va(1000), vb(1000), vc(1000);
  a.fill(std::span(va).first(7));  // in pieces of any size: the same stream
  a.fill(std::span(va).subspan(7));
  b.fill(vb);
  c.fill(vc);
  CHECK(va == vb);
  CHECK(va != vc);
  // Chi-square over the 8000 bytes' 256 values: 255 degrees of freedom, mean 255, sd ~22.6.
  std::array<double, 256> counts{};
  for (auto v : vc)
    for (int i = 0; i < 8; ++i) ++counts[(v >> (8 * i)) & 255];
  double chi = 0;
  for (double n : counts) chi += (n - 8000.0 / 256) * (n - 8000.0 / 256) / (8000.0 / 256);
  CHECK(chi < 255 + 6 * 22.6);
  CHECK(chi > 255 - 6 * 22.6);
}

TEST_CASE("fixed point: nearest rounding errs by at most half a step, stochastic by less than one and without bias") {
  const auto fp = crypto::fixed_point::create(0.5, 32, 12).value();
  CHECK(fp.limit() == ((std::int64_t{1} << 31) - 1) / 12);
  CHECK(fp.step() == doctest::Approx(0.5 / static_cast<double>(fp.limit())));
  core::rng r(4);
  std::vector<float> in(5000);
  for (auto& v : in) v = static_cast<float>(r.uniform_double() - 0.5);
  std::vector<std::uint64_t> q(in.size());
  std::vector<double> back(in.size());
  CHECK(fp.encode(in, q, nullptr) == 0);
  fp.decode_sum(q, back);
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(std::abs(back[i] - in[i]) <= fp.step() / 2 * (1 + 1e-9));
  crypto::keystream rounding(key_of(3));
  CHECK(fp.encode(in, q, &rounding) == 0);
  fp.decode_sum(q, back);
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(std::abs(back[i] - in[i]) < fp.step());
  // Unbiased: a value 0.3 steps above a grid point rounds up 30% of the time.
  const auto coarse = crypto::fixed_point::create(1.0, 8, 1).value();  // step 1/127
  const std::vector<float> one(20000, static_cast<float>(10.3 * coarse.step()));
  std::vector<std::uint64_t> qs(one.size());
  std::vector<double> bs(one.size());
  CHECK(coarse.encode(one, qs, &rounding) == 0);
  coarse.decode_sum(qs, bs);
  double mean = 0;
  for (double v : bs) mean += v / coarse.step();
  mean /= static_cast<double>(bs.size());
  CHECK(mean == doctest::Approx(10.3).epsilon(0.003));
}

TEST_CASE("fixed point: values beyond the clip are clipped and counted, a NaN too; the largest sums do not wrap") {
  const auto fp = crypto::fixed_point::create(1.0, 16, 4).value();
  const std::vector<float> in{0.5f, 3.0f, -7.0f, std::nanf(""), -1.0f};
  std::vector<std::uint64_t> q(in.size());
  std::vector<double> back(in.size());
  CHECK(fp.encode(in, q, nullptr) == 3);
  fp.decode_sum(q, back);
  CHECK(back[1] == doctest::Approx(1.0));
  CHECK(back[2] == doctest::Approx(-1.0));
  CHECK(back[3] == 0.0);
  CHECK(back[4] == doctest::Approx(-1.0));  // exactly at the clip: not counted
  // Four inputs all at +clip, and all at −clip: the ring holds both sums.
  for (const float v : {1.0f, -1.0f}) {
    std::vector<std::uint64_t> sum(1, 0), x(1);
    const std::vector<float> one{v};
    for (int d = 0; d < 4; ++d) {
      (void)fp.encode(one, x, nullptr);
      crypto::add_into(sum, x, 16);
    }
    std::vector<double> s(1);
    fp.decode_sum(sum, s);
    CHECK(s[0] == doctest::Approx(4.0 * v));
  }
  CHECK_FALSE(crypto::fixed_point::create(1.0, 8, 200).ok());  // 200 inputs cannot share 127 steps
  CHECK_FALSE(crypto::fixed_point::create(0.0, 32, 2).ok());
  CHECK_FALSE(crypto::fixed_point::create(1.0, 65, 2).ok());
  CHECK(crypto::fixed_point::create(1.0, 64, 1000).ok());
}

TEST_CASE("masks: pairwise and self masks cancel, and the sum of masked inputs is the sum of the inputs exactly") {
  // Three devices in a 32-bit ring: y_u = x_u + PRG(b_u) + Σ_{v>u} PRG(s_uv) − Σ_{v<u} PRG(s_vu).
  const int bits = 32;
  const auto fp = crypto::fixed_point::create(0.25, bits, 3).value();
  core::rng r(9);
  std::vector<std::vector<float>> x(3, std::vector<float>(257));
  for (auto& v : x)
    for (auto& f : v) f = static_cast<float>(0.5 * (r.uniform_double() - 0.5));
  const crypto::key256 pair[3][3] = {{{}, key_of(12), key_of(13)}, {key_of(12), {}, key_of(23)}, {key_of(13), key_of(23), {}}};
  const crypto::key256 self[3] = {key_of(101), key_of(102), key_of(103)};
  std::vector<std::uint64_t> sum(257, 0), plain(257, 0);
  for (int u = 0; u < 3; ++u) {
    std::vector<std::uint64_t> y(257);
    (void)fp.encode(x[static_cast<std::size_t>(u)], y, nullptr);
    crypto::add_into(plain, y, bits);
    crypto::apply_mask(y, bits, self[u], crypto::mask_sign::add);
    for (int v = 0; v < 3; ++v) {
      if (v == u) continue;
      crypto::apply_mask(y, bits, pair[u][v], v > u ? crypto::mask_sign::add : crypto::mask_sign::subtract);
    }
    // A masked input is far from its plain encoding.
    std::vector<std::uint64_t> enc(257);
    (void)fp.encode(x[static_cast<std::size_t>(u)], enc, nullptr);
    std::size_t same = 0;
    for (std::size_t i = 0; i < y.size(); ++i) same += y[i] == enc[i] ? 1 : 0;
    CHECK(same < 3);
    crypto::add_into(sum, y, bits);
  }
  for (const auto& b : self) crypto::apply_mask(sum, bits, b, crypto::mask_sign::subtract);
  CHECK(sum == plain);  // exactly: the masks cancel in the ring
  std::vector<double> total(257);
  fp.decode_sum(sum, total);
  for (std::size_t i = 0; i < total.size(); ++i)
    CHECK(std::abs(total[i] - (static_cast<double>(x[0][i]) + x[1][i] + x[2][i])) <= 1.5 * fp.step() * (1 + 1e-9));
}
