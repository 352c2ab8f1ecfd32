// tessera/core/config/base64.hpp — binary arrays inside JSON messages: base64 (RFC 4648) of little-endian values.
//
// Per-feature statistics and the input normalization travel in control messages. As text they would be
// long and only round-trip exactly with care; as base64 of the values' bytes they are a third longer
// than binary and exact. Decoding checks the alphabet, the padding and the exact count expected.
//
//   std::string text = core::encode_doubles(sums);
//   TESSERA_ASSIGN_OR_RETURN(std::vector<double> back, core::decode_doubles(text, features, "STATS: field 'sum'"));
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::core {

[[nodiscard]] std::string base64_encode(std::span<const std::byte> bytes);
// Exactly `expected_bytes` bytes, or an error naming `what`.
[[nodiscard]] result<std::vector<std::byte>> base64_decode(std::string_view text, std::size_t expected_bytes,
                                                          const std::string& what);

[[nodiscard]] std::string encode_doubles(std::span<const double> values);
[[nodiscard]] result<std::vector<double>> decode_doubles(std::string_view text, std::size_t count, const std::string& what);
[[nodiscard]] std::string encode_floats(std::span<const float> values);
[[nodiscard]] result<std::vector<float>> decode_floats(std::string_view text, std::size_t count, const std::string& what);

}  // namespace tessera::core
