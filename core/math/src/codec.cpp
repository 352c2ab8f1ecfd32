#include "tessera/core/math/codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

// f32 blobs are the parameters' bytes copied whole; the other codecs pack value by value (endian.hpp).
static_assert(std::endian::native == std::endian::little, "f32 blobs copy the host's floats as little-endian bytes");

constexpr float k_half_max = 65504.0f;

// Calls f(first, count) for every q8 row of layers `from` and after: weight rows, then each vector as
// one row.
template <class F>
void for_each_row(const mlp_arch& arch, std::size_t from, F&& f) {
  const auto slots = param_slots(arch);
  for (std::size_t l = from; l < slots.size(); ++l) {
    const layer_slots& s = slots[l];
    const auto rows = static_cast<std::size_t>(s.rows);
    const auto cols = static_cast<std::size_t>(s.cols);
    for (std::size_t r = 0; r < rows; ++r) f(s.weight + r * cols, cols);
    f(s.bias, rows);
    if (s.has_norm) {
      f(s.gain, rows);
      f(s.shift, rows);
    }
  }
}

error bad_value(std::size_t index, float v, const char* what) {
  return make_error(errc::not_finite, "parameter " + std::to_string(index) + " is " + std::to_string(v) + ": " + what);
}

}  // namespace

std::uint16_t float_to_half(float x) noexcept {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  const std::uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half of the smallest subnormal
    const std::uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 .. 24 here
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    const std::uint32_t rounded = q + ((rest > halfway || (rest == halfway && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 → 15) and round the 23-bit mantissa to 10 bits, nearest even.
  const std::uint32_t base = abs - 0x38000000u;  // exponent rebiased, mantissa unchanged
  const std::uint32_t q = base >> 13;
  const std::uint32_t rest = base & 0x1fffu;
  const std::uint32_t rounded = q + ((rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | rounded);
}

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-24f;  // exact: subnormal halves are multiples of 2^-24
    return sign != 0 ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// The first parameter of layer `from` (param_count for none).
std::size_t layer_offset(const mlp_arch& arch, std::size_t from) {
  const auto slots = param_slots(arch);
  return from < slots.size() ? slots[from].weight : param_count(arch);
}

// encode and encode_update: the parameters of layers `from` and after, out of all the subnet's.
result<void> encode_from(const mlp_arch& arch, std::size_t from, codec_kind codec, std::span<const float> all, std::span<std::byte> out) {
  TESSERA_ASSERT(all.size() == param_count(arch));
  const std::size_t offset = layer_offset(arch, from);
  const std::span<const float> params = all.subspan(offset);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!std::isfinite(params[i])) return bad_value(offset + i, params[i], "only finite values are sent");
    if (codec == codec_kind::f16 && std::fabs(params[i]) > k_half_max) return bad_value(offset + i, params[i], "beyond the range of f16");
  }
  switch (codec) {
    case codec_kind::f32:
      std::memcpy(out.data(), params.data(), params.size_bytes());
      return {};
    case codec_kind::f16: {
      le_writer w(out);
      for (const float p : params) w.u16(float_to_half(p));
      return {};
    }
    case codec_kind::q8: {
      le_writer w(out);
      for_each_row(arch, from, [&](std::size_t first, std::size_t count) {
        first -= offset;
        float max_abs = 0;
        for (std::size_t i = 0; i < count; ++i) max_abs = std::max(max_abs, std::fabs(params[first + i]));
        const float scale = max_abs / 127.0f;
        w.f32(scale);
        // A row below ~3.7e-37 has a subnormal scale whose inverse overflows (0 · inf would be NaN):
        // there the values are divided by the scale instead, which stays within ±127 and finite.
        const bool normal = std::isnormal(scale);
        const float inv = normal ? 1.0f / scale : 0.0f;
        for (std::size_t i = 0; i < count; ++i) {
          const float x = normal ? params[first + i] * inv : (scale > 0 ? params[first + i] / scale : 0.0f);
          const float q = std::clamp(std::nearbyint(x), -127.0f, 127.0f);
          w.u8(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)));
        }
      });
      TESSERA_ASSERT(w.written() == out.size());
      return {};
    }
  }
  return {};
}

// decode and decode_update: into the parameters of layers `from` and after, `expected` bytes.
result<void> decode_from(const mlp_arch& arch, std::size_t from, codec_kind codec, std::span<const std::byte> blob, std::span<float> all,
                         std::size_t expected) {
  TESSERA_ASSERT(all.size() == param_count(arch));
  const std::size_t offset = layer_offset(arch, from);
  const std::span<float> params = all.subspan(offset);
  if (blob.size() != expected)
    return make_error(errc::bad_format, std::string(to_string(codec)) + " blob of " + std::to_string(blob.size()) +
                                            " bytes, expected exactly " + std::to_string(expected));
  switch (codec) {
    case codec_kind::f32:
      std::memcpy(params.data(), blob.data(), blob.size());
      break;
    case codec_kind::f16: {
      // The size was checked above: every read fits.
      le_reader r(blob);
      for (float& p : params) {
        std::uint16_t h = 0;
        const bool read = r.u16(h);
        TESSERA_ASSERT(read);
        p = half_to_float(h);
      }
      break;
    }
    case codec_kind::q8: {
      le_reader r(blob);
      std::optional<error> failed;
      for_each_row(arch, from, [&](std::size_t first, std::size_t count) {
        first -= offset;
        const std::size_t at = r.position();
        float scale = 0;
        bool read = r.f32(scale);
        if (!failed && !(std::isfinite(scale) && scale >= 0))
          failed = make_error(errc::not_finite, "q8 blob: row scale at byte " + std::to_string(at) + " is " +
                                                    std::to_string(scale) + ", must be finite and >= 0");
        for (std::size_t i = 0; i < count; ++i) {
          std::uint8_t q = 0;
          read = r.u8(q) && read;
          params[first + i] = static_cast<float>(static_cast<std::int8_t>(q)) * scale;
        }
        TESSERA_ASSERT(read);
      });
      if (failed) return *failed;
      break;
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!std::isfinite(params[i]))
      return make_error(errc::not_finite, std::string(to_string(codec)) + " blob: parameter " + std::to_string(offset + i) +
                                              " decodes to " + std::to_string(params[i]) + ", not a finite value");
  return {};
}

}  // namespace

result<void> encode(const mlp_arch& arch, codec_kind codec, std::span<const float> params, std::span<std::byte> out) {
  TESSERA_ASSERT(out.size() == encoded_bytes(arch, codec));
  return encode_from(arch, 0, codec, params, out);
}

result<void> decode(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob, std::span<float> params) {
  return decode_from(arch, 0, codec, blob, params, encoded_bytes(arch, codec));
}

result<void> encode_update(const mlp_arch& arch, codec_kind codec, std::span<const float> params, std::span<std::byte> out) {
  TESSERA_ASSERT(out.size() == update_bytes(arch, codec));
  return encode_from(arch, static_cast<std::size_t>(arch.frozen), codec, params, out);
}

result<void> decode_update(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob, std::span<float> params) {
  return decode_from(arch, static_cast<std::size_t>(arch.frozen), codec, blob, params, update_bytes(arch, codec));
}

}  // namespace tessera::core
