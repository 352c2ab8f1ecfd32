#include "tessera/core/math/codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

// f32 blobs are the parameters' bytes copied whole; the other codecs pack value by value (endian.hpp).
static_assert(std::endian::native == std::endian::little, "f32 blobs copy the host's floats as little-endian bytes");

constexpr float k_half_max = 65504.0f;

// Calls f(first, count) for every q8 row of layers [from, to): weight rows, then each vector as one row.
template <class F>
void for_each_row(const mlp_arch& arch, std::size_t from, std::size_t to, F&& f) {
  const auto slots = param_slots(arch);
  for (std::size_t l = from; l < to; ++l) {
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

// Layers [from, to) of an arch, and where their parameters start and end in its flat layout.
struct layer_range {
  std::size_t from = 0, to = 0;
  std::size_t first = 0, end = 0;
};
layer_range range_of(const mlp_arch& arch, std::size_t from, std::size_t to) {
  const auto slots = param_slots(arch);
  return {.from = from, .to = to, .first = layer_start(slots, from), .end = layer_start(slots, to)};
}

// A download's two parts: the frozen layers held encoded (none unless compact_frozen), then the rest.
struct download_parts {
  layer_range held, rest;
  std::size_t held_bytes = 0;
};
download_parts parts_of(const mlp_arch& arch) {
  const std::size_t frozen = compact_frozen(arch) ? static_cast<std::size_t>(arch.frozen) : 0;
  return {.held = range_of(arch, 0, frozen), .rest = range_of(arch, frozen, arch.layer_count()), .held_bytes = frozen_bytes(arch)};
}

// The layers' parameters (values: exactly theirs) encoded into out.
result<void> encode_range(const mlp_arch& arch, const layer_range& range, codec_kind codec, std::span<const float> values, std::span<std::byte> out) {
  TESSERA_ASSERT(values.size() == range.end - range.first);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return bad_value(range.first + i, values[i], "only finite values are sent");
    if (codec == codec_kind::f16 && std::fabs(values[i]) > k_half_max) return bad_value(range.first + i, values[i], "beyond the range of f16");
  }
  switch (codec) {
    case codec_kind::f32:
      if (out.data() != reinterpret_cast<const std::byte*>(values.data())) std::memcpy(out.data(), values.data(), values.size_bytes());
      return {};
    case codec_kind::f16: {
      le_writer w(out);
      for (const float p : values) w.u16(float_to_half(p));
      return {};
    }
    case codec_kind::q8: {
      le_writer w(out);
      for_each_row(arch, range.from, range.to, [&](std::size_t first, std::size_t count) {
        first -= range.first;
        float max_abs = 0;
        for (std::size_t i = 0; i < count; ++i) max_abs = std::max(max_abs, std::fabs(values[first + i]));
        const float scale = max_abs / 127.0f;
        w.f32(scale);
        // A row below ~3.7e-37 has a subnormal scale whose inverse overflows (0 · inf would be NaN):
        // there the values are divided by the scale instead, which stays within ±127 and finite.
        const bool normal = std::isnormal(scale);
        const float inv = normal ? 1.0f / scale : 0.0f;
        for (std::size_t i = 0; i < count; ++i) {
          const float x = normal ? values[first + i] * inv : (scale > 0 ? values[first + i] / scale : 0.0f);
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

error bad_size(codec_kind codec, std::size_t got, std::size_t expected) {
  return make_error(errc::bad_format, std::string(to_string(codec)) + " blob of " + std::to_string(got) + " bytes, expected exactly " +
                                          std::to_string(expected));
}

// A q8 row's scale: finite, not negative, and small enough that any int8 of it (-128 too, which no
// encoder writes but a hostile blob may hold) stays finite.
std::optional<error> bad_scale(float scale, std::size_t at) {
  if (std::isfinite(scale) && scale >= 0 && std::isfinite(128.0f * scale)) return std::nullopt;
  return make_error(errc::not_finite, "q8 blob: row scale at byte " + std::to_string(at) + " is " + std::to_string(scale) +
                                          ", must be finite, >= 0 and at most the largest float / 128");
}

// The blob (its size checked) decoded into the layers' parameters (values: exactly theirs).
result<void> decode_range(const mlp_arch& arch, const layer_range& range, codec_kind codec, std::span<const std::byte> blob, std::span<float> values) {
  TESSERA_ASSERT(values.size() == range.end - range.first);
  switch (codec) {
    case codec_kind::f32:
      if (blob.data() != reinterpret_cast<const std::byte*>(values.data())) std::memcpy(values.data(), blob.data(), blob.size());
      break;
    case codec_kind::f16:
      decode_rows(codec, blob.data(), 1, values.size(), values.data());
      break;
    case codec_kind::q8: {
      std::size_t at = 0;
      std::optional<error> failed;
      for_each_row(arch, range.from, range.to, [&](std::size_t first, std::size_t count) {
        float scale = 0;
        std::memcpy(&scale, blob.data() + at, sizeof scale);
        if (!failed) failed = bad_scale(scale, at);
        decode_rows(codec, blob.data() + at, 1, count, values.data() + (first - range.first));
        at += row_bytes(codec, count);
      });
      TESSERA_ASSERT(at == blob.size());
      if (failed) return *failed;
      break;
    }
  }
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      return make_error(errc::not_finite, std::string(to_string(codec)) + " blob: parameter " + std::to_string(range.first + i) +
                                              " decodes to " + std::to_string(values[i]) + ", not a finite value");
  return {};
}

// The trained layers' values out of `params`: all of the subnet's, or only the trained ones.
template <class T>
std::span<T> trained_part(const mlp_arch& arch, const layer_range& range, std::span<T> params) {
  if (params.size() == param_count(arch)) return params.subspan(range.first);
  TESSERA_ASSERT(params.size() == range.end - range.first);
  return params;
}

}  // namespace

std::size_t row_bytes(codec_kind codec, std::size_t cols) noexcept {
  switch (codec) {
    case codec_kind::f32: return 4 * cols;
    case codec_kind::f16: return 2 * cols;
    case codec_kind::q8: return 4 + cols;
  }
  return 4 * cols;
}

void decode_rows(codec_kind codec, const std::byte* at, std::size_t rows, std::size_t cols, float* out) noexcept {
  switch (codec) {
    case codec_kind::f32:
      std::memcpy(out, at, rows * cols * sizeof(float));
      return;
    case codec_kind::f16:
      for (std::size_t i = 0; i < rows * cols; ++i)
        out[i] = half_to_float(static_cast<std::uint16_t>(std::to_integer<unsigned>(at[2 * i]) | (std::to_integer<unsigned>(at[2 * i + 1]) << 8)));
      return;
    case codec_kind::q8:
      for (std::size_t r = 0; r < rows; ++r, at += 4 + cols, out += cols) {
        float scale = 0;
        std::memcpy(&scale, at, sizeof scale);
        for (std::size_t i = 0; i < cols; ++i) out[i] = static_cast<float>(static_cast<std::int8_t>(std::to_integer<std::uint8_t>(at[4 + i]))) * scale;
      }
      return;
  }
}

result<void> encode(const mlp_arch& arch, codec_kind codec, std::span<const float> params, std::span<std::byte> out) {
  TESSERA_ASSERT(params.size() == param_count(arch) && out.size() == encoded_bytes(arch, codec));
  const download_parts p = parts_of(arch);
  TESSERA_TRY(encode_range(arch, p.held, arch.frozen_codec, params.first(p.held.end), out.first(p.held_bytes)));
  return encode_range(arch, p.rest, codec, params.subspan(p.rest.first), out.subspan(p.held_bytes));
}

result<void> decode(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob, std::span<float> params) {
  TESSERA_ASSERT(params.size() == param_count(arch));
  if (blob.size() != encoded_bytes(arch, codec)) return bad_size(codec, blob.size(), encoded_bytes(arch, codec));
  const download_parts p = parts_of(arch);
  TESSERA_TRY(decode_range(arch, p.held, arch.frozen_codec, blob.first(p.held_bytes), params.first(p.held.end)));
  return decode_range(arch, p.rest, codec, blob.subspan(p.held_bytes), params.subspan(p.rest.first));
}

result<void> encode_update(const mlp_arch& arch, codec_kind codec, std::span<const float> params, std::span<std::byte> out) {
  TESSERA_ASSERT(out.size() == update_bytes(arch, codec));
  const layer_range trained = range_of(arch, static_cast<std::size_t>(arch.frozen), arch.layer_count());
  return encode_range(arch, trained, codec, trained_part(arch, trained, params), out);
}

result<void> decode_update(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob, std::span<float> params) {
  if (blob.size() != update_bytes(arch, codec)) return bad_size(codec, blob.size(), update_bytes(arch, codec));
  const layer_range trained = range_of(arch, static_cast<std::size_t>(arch.frozen), arch.layer_count());
  return decode_range(arch, trained, codec, blob, trained_part(arch, trained, params));
}

result<void> round_frozen(const mlp_arch& arch, std::span<float> params) {
  TESSERA_ASSERT(params.size() == param_count(arch));
  if (!compact_frozen(arch)) return {};
  const download_parts p = parts_of(arch);
  std::vector<std::byte> blob(p.held_bytes);
  TESSERA_TRY(encode_range(arch, p.held, arch.frozen_codec, params.first(p.held.end), blob));
  return decode_range(arch, p.held, arch.frozen_codec, blob, params.first(p.held.end));
}

result<void> check_frozen(const mlp_arch& arch, std::span<const std::byte> blob) {
  if (blob.size() != frozen_bytes(arch)) return bad_size(arch.frozen_codec, blob.size(), frozen_bytes(arch));
  if (!compact_frozen(arch)) return {};  // none held encoded
  if (arch.frozen_codec == codec_kind::f16) {
    for (std::size_t i = 0; i + 1 < blob.size(); i += 2)
      if ((std::to_integer<unsigned>(blob[i + 1]) & 0x7cu) == 0x7cu)
        return make_error(errc::not_finite, "frozen layers (f16): value " + std::to_string(i / 2) + " is not finite");
    return {};
  }
  std::size_t at = 0;
  std::optional<error> failed;
  for_each_row(arch, 0, static_cast<std::size_t>(arch.frozen), [&](std::size_t, std::size_t count) {
    float scale = 0;
    std::memcpy(&scale, blob.data() + at, sizeof scale);
    if (!failed) failed = bad_scale(scale, at);
    at += row_bytes(codec_kind::q8, count);
  });
  if (failed) return *failed;
  return {};
}

}  // namespace tessera::core
