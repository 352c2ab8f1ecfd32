// tessera/core/math/codec.hpp — how a subnet's parameters travel: f32, f16 or q8.
//
// The blob is the flat parameter layout of mlp.hpp, encoded value by value, little-endian:
//   f32  4 bytes per value (IEEE binary32).
//   f16  2 bytes per value (IEEE binary16, round to nearest even). |x| > 65504 cannot be encoded.
//   q8   per row — each row of a weight matrix, and each bias, gain or shift vector as one row — a
//        binary32 scale s ≥ 0 followed by one int8 q per value, x ≈ q·s, s = max|x| / 127.
// Shapes come from the round's plan (the arch), never from the blob. Decoding checks the exact size
// and that every value (and every q8 scale) is finite, before anything reaches the parameters.
//
//   std::vector<std::byte> blob(core::encoded_bytes(arch, core::codec_kind::q8));
//   core::encode(arch, core::codec_kind::q8, params, blob);
//   auto ok = core::decode(arch, core::codec_kind::q8, blob, params);   // errors name the offset
#pragma once

#include <cstddef>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

// Encodes params (param_count(arch) floats) into out (exactly encoded_bytes(arch, codec) bytes).
// A non-finite value, or one beyond f16's range, is an error naming its index.
[[nodiscard]] result<void> encode(const mlp_arch& arch, codec_kind codec, std::span<const float> params,
                                  std::span<std::byte> out);
// Decodes a blob into params; on error params may be partly written (decode into a staging copy when
// the old values must survive a bad blob).
[[nodiscard]] result<void> decode(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob,
                                  std::span<float> params);

// What a device sends back: the parameters of its trained layers (every layer after arch.frozen, all
// of them when none is frozen), encoded alike (update_bytes(arch, codec) bytes); decode_update
// writes them into the subnet's parameters and leaves the frozen ones as they are.
[[nodiscard]] result<void> encode_update(const mlp_arch& arch, codec_kind codec, std::span<const float> params,
                                         std::span<std::byte> out);
[[nodiscard]] result<void> decode_update(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob,
                                         std::span<float> params);

// IEEE binary16 conversions (round to nearest even), exposed for tests.
[[nodiscard]] std::uint16_t float_to_half(float x) noexcept;
[[nodiscard]] float half_to_float(std::uint16_t h) noexcept;

}  // namespace tessera::core
