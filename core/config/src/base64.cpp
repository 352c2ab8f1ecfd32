#include "tessera/core/config/base64.hpp"

#include <bit>
#include <cstdint>
#include <cstring>

namespace tessera::core {
namespace {

constexpr char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Values as little-endian bytes whatever the host.
template <class T, class U>
std::string encode_values(std::span<const T> values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto bits = std::bit_cast<U>(values[i]);
    for (std::size_t b = 0; b < sizeof(T); ++b) bytes[i * sizeof(T) + b] = static_cast<std::byte>((bits >> (8 * b)) & 0xff);
  }
  return base64_encode(bytes);
}

template <class T, class U>
result<std::vector<T>> decode_values(std::string_view text, std::size_t count, const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, base64_decode(text, count * sizeof(T), what));
  std::vector<T> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    U bits = 0;
    for (std::size_t b = 0; b < sizeof(T); ++b) bits |= static_cast<U>(std::to_integer<unsigned>(bytes[i * sizeof(T) + b])) << (8 * b);
    out[i] = std::bit_cast<T>(bits);
  }
  return out;
}

}  // namespace

std::string base64_encode(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? std::to_integer<std::uint32_t>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out.push_back(k <= n ? k_alphabet[(v >> (18 - 6 * k)) & 0x3f] : '=');
  }
  return out;
}

result<std::vector<std::byte>> base64_decode(std::string_view text, std::size_t expected_bytes, const std::string& what) {
  // The length is checked against the expectation before anything is sized from the text.
  const std::size_t want = (expected_bytes + 2) / 3 * 4;
  if (text.size() != want)
    return make_error(errc::bad_format, what + ": " + std::to_string(text.size()) + " base64 characters, expected " +
                                            std::to_string(want) + " for " + std::to_string(expected_bytes) + " bytes");
  std::vector<std::byte> out;
  out.reserve(expected_bytes);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    std::uint32_t v = 0;
    int pad = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      int s = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
      } else if (pad > 0 || (s = sextet(c)) < 0) {
        return make_error(errc::bad_format, what + ": not base64 at character " + std::to_string(i + k));
      }
      v = (v << 6) | static_cast<std::uint32_t>(s);
    }
    for (int k = 0; k < 3 - pad; ++k) out.push_back(static_cast<std::byte>((v >> (16 - 8 * k)) & 0xff));
  }
  if (out.size() != expected_bytes)
    return make_error(errc::bad_format, what + ": " + std::to_string(out.size()) + " bytes, expected " + std::to_string(expected_bytes));
  return out;
}

std::string encode_doubles(std::span<const double> values) { return encode_values<double, std::uint64_t>(values); }
result<std::vector<double>> decode_doubles(std::string_view text, std::size_t count, const std::string& what) {
  return decode_values<double, std::uint64_t>(text, count, what);
}
std::string encode_floats(std::span<const float> values) { return encode_values<float, std::uint32_t>(values); }
result<std::vector<float>> decode_floats(std::string_view text, std::size_t count, const std::string& what) {
  return decode_values<float, std::uint32_t>(text, count, what);
}

}  // namespace tessera::core
