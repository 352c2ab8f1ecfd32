#include "tessera/core/config/base64.hpp"

#include <cstdint>
#include <cstring>

#include "tessera/core/base/endian.hpp"

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
template <class T>
std::string encode_values(std::span<const T> values) {
  std::vector<std::byte> bytes;
  bytes.reserve(values.size() * sizeof(T));
  le_writer w(bytes);
  for (const T v : values) {
    if constexpr (sizeof(T) == 4) w.f32(v);
    else w.f64(v);
  }
  return base64_encode(bytes);
}

template <class T>
result<std::vector<T>> decode_values(std::string_view text, std::size_t count, const std::string& what) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, base64_decode(text, count * sizeof(T), what));
  std::vector<T> out(count);
  le_reader r(bytes);
  for (T& v : out) {
    bool ok = false;
    if constexpr (sizeof(T) == 4) ok = r.f32(v);
    else ok = r.f64(v);
    TESSERA_ASSERT(ok);  // base64_decode returned exactly count values' bytes
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

std::string encode_doubles(std::span<const double> values) { return encode_values<double>(values); }
result<std::vector<double>> decode_doubles(std::string_view text, std::size_t count, const std::string& what) {
  return decode_values<double>(text, count, what);
}
std::string encode_floats(std::span<const float> values) { return encode_values<float>(values); }
result<std::vector<float>> decode_floats(std::string_view text, std::size_t count, const std::string& what) {
  return decode_values<float>(text, count, what);
}

}  // namespace tessera::core
