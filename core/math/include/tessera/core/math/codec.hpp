// tessera/core/math/codec.hpp — how a subnet's parameters travel: f32, f16 or q8.
//
// The blob is the flat parameter layout of mlp.hpp, encoded value by value, little-endian:
//   f32  4 bytes per value (IEEE binary32).
//   f16  2 bytes per value (IEEE binary16, round to nearest even). |x| > 65504 cannot be encoded.
//   q8   per row — each row of a weight matrix, and each bias, gain or shift vector as one row — a
//        binary32 scale s ≥ 0 followed by one int8 q per value, x ≈ q·s, s = max|x| / 127.
// Shapes come from the round's plan (the arch), never from the blob. Decoding checks the exact size
// and that every value (and every q8 scale) is finite, before anything reaches the parameters.
// A subnet whose frozen layers are compact (compact_frozen: successive layer training) has them first
// in arch.frozen_codec, the trained layers after them in the round's codec.
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
// writes them into the subnet's parameters and leaves the frozen ones as they are. `params` is all of
// the subnet's parameters, or only its trained ones (a device holding its frozen layers encoded).
[[nodiscard]] result<void> encode_update(const mlp_arch& arch, codec_kind codec, std::span<const float> params,
                                         std::span<std::byte> out);
[[nodiscard]] result<void> decode_update(const mlp_arch& arch, codec_kind codec, std::span<const std::byte> blob,
                                         std::span<float> params);

// The frozen layers' values (params: all of the subnet's, or the full model's with arch.frozen layers
// frozen) replaced by what their encoding in arch.frozen_codec decodes to: what a device holding them
// so computes with. Nothing changes unless compact_frozen(arch). Errors as encode's.
[[nodiscard]] result<void> round_frozen(const mlp_arch& arch, std::span<float> params);
// Checks a compact frozen blob (frozen_bytes(arch) bytes in arch.frozen_codec): every f16 value finite,
// every q8 scale finite and at most the largest float / 128, so that decode_rows yields finite values.
[[nodiscard]] result<void> check_frozen(const mlp_arch& arch, std::span<const std::byte> blob);
// Bytes of one row of `cols` values (q8: its scale, then the values).
[[nodiscard]] std::size_t row_bytes(codec_kind codec, std::size_t cols) noexcept;
// Decodes `rows` consecutive rows of `cols` values each, encoded from `at`, into out (rows × cols);
// the blob was checked (decode, check_frozen).
void decode_rows(codec_kind codec, const std::byte* at, std::size_t rows, std::size_t cols, float* out) noexcept;

// IEEE binary16 conversions (round to nearest even), exposed for tests.
[[nodiscard]] std::uint16_t float_to_half(float x) noexcept;
[[nodiscard]] float half_to_float(std::uint16_t h) noexcept;

}  // namespace tessera::core
