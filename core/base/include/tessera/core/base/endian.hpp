// tessera/core/base/endian.hpp — little-endian integers and floats to and from bytes, whatever the host.
//
// Every byte layout Tessera defines or reads (frame headers, safetensors and .npy files, checkpoints,
// base64 arrays, secure aggregation's signed messages and boxes) is little-endian and is packed here,
// byte by byte, not by memcpy of host integers. The writer either fills a buffer its caller sized (a
// span or an array: running past its end is a bug and asserts) or appends to a growing one (a vector,
// a string: anything with push_back). The reader never reads past its end: a read that does not fit
// returns false and takes nothing, so a truncated input is an answer, not an overrun.
//
//   std::array<std::byte, 12> header{};
//   core::le_writer w(header);
//   w.u32(0x41525354).u8(1).u8(type).u16(0).u32(length);   // fills header
//
//   std::vector<std::byte> message;
//   core::le_writer(message).u64(round).u32(segment);      // appends 12 bytes
//
//   core::le_reader r(bytes);
//   std::uint32_t magic = 0, length = 0;
//   if (!r.u32(magic) || !r.skip(4) || !r.u32(length)) return truncated();
//   if (!r.done()) return trailing_bytes();
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "tessera/core/base/assert.hpp"

namespace tessera::core {

namespace detail {
template <class T>
inline constexpr bool is_span_v = false;
template <class B, std::size_t E>
inline constexpr bool is_span_v<std::span<B, E>> = true;
}  // namespace detail

// The byte types a buffer may hold: std::byte, unsigned char (std::uint8_t) and char.
template <class B>
concept byte_like = std::is_same_v<B, std::byte> || std::is_same_v<B, unsigned char> || std::is_same_v<B, char>;

// Writes into `Out`: a std::span of bytes it fills from the start (its size is a bound the caller
// chose), or a container it appends to. Each call returns the writer, so that a layout reads as one line.
template <class Out>
class le_writer {
  static constexpr bool fills = detail::is_span_v<Out>;

 public:
  using byte_type = std::remove_cv_t<typename Out::value_type>;
  static_assert(byte_like<byte_type>, "le_writer writes bytes: std::byte, unsigned char or char");

  explicit le_writer(std::conditional_t<fills, Out, Out&> out) noexcept : out_(out) {}

  le_writer& u8(std::uint8_t v) { return uint(v, 1); }
  le_writer& u16(std::uint16_t v) { return uint(v, 2); }
  le_writer& u32(std::uint32_t v) { return uint(v, 4); }
  le_writer& u64(std::uint64_t v) { return uint(v, 8); }
  le_writer& f32(float v) { return u32(std::bit_cast<std::uint32_t>(v)); }
  le_writer& f64(double v) { return u64(std::bit_cast<std::uint64_t>(v)); }
  // The low `n` bytes of v (n ≤ 8), for widths a format chooses at run time.
  le_writer& uint(std::uint64_t v, std::size_t n) {
    TESSERA_ASSERT(n <= 8);
    reserve(n);
    for (std::size_t i = 0; i < n; ++i) put(static_cast<byte_type>((v >> (8 * i)) & 0xffu));
    return *this;
  }
  // Bytes as they are (a magic, a key, a string's characters).
  template <class B, std::size_t E>
    requires byte_like<std::remove_const_t<B>>
  le_writer& bytes(std::span<B, E> b) {
    reserve(b.size());
    for (const auto c : b) put(static_cast<byte_type>(static_cast<unsigned char>(c)));
    return *this;
  }

  [[nodiscard]] std::size_t written() const noexcept { return at_; }

 private:
  void reserve(std::size_t n) {
    if constexpr (fills) TESSERA_ASSERT(out_.size() - at_ >= n);  // the caller sized the buffer: a bug otherwise
  }
  void put(byte_type b) {
    if constexpr (fills) out_[at_] = b;
    else out_.push_back(b);
    ++at_;
  }

  std::conditional_t<fills, Out, Out&> out_;
  std::size_t at_ = 0;
};

// A span or an array is filled; anything else is appended to.
template <class B, std::size_t E>
le_writer(std::span<B, E>) -> le_writer<std::span<B>>;
template <class B, std::size_t N>
le_writer(std::array<B, N>&) -> le_writer<std::span<B>>;
template <class C>
le_writer(C&) -> le_writer<C>;

// Reads from bytes it does not own, in order. A read that does not fit takes nothing and returns false.
class le_reader {
 public:
  explicit le_reader(std::span<const std::byte> in) noexcept : in_(in) {}
  explicit le_reader(std::span<const unsigned char> in) noexcept : in_(std::as_bytes(in)) {}
  explicit le_reader(std::span<const char> in) noexcept : in_(std::as_bytes(in)) {}

  [[nodiscard]] bool u8(std::uint8_t& v) noexcept { return read(v); }
  [[nodiscard]] bool u16(std::uint16_t& v) noexcept { return read(v); }
  [[nodiscard]] bool u32(std::uint32_t& v) noexcept { return read(v); }
  [[nodiscard]] bool u64(std::uint64_t& v) noexcept { return read(v); }
  [[nodiscard]] bool f32(float& v) noexcept {
    std::uint32_t bits = 0;
    if (!read(bits)) return false;
    v = std::bit_cast<float>(bits);
    return true;
  }
  [[nodiscard]] bool f64(double& v) noexcept {
    std::uint64_t bits = 0;
    if (!read(bits)) return false;
    v = std::bit_cast<double>(bits);
    return true;
  }
  // `n` bytes (n ≤ 8) as an unsigned integer, for widths a format chooses at run time.
  [[nodiscard]] bool uint(std::uint64_t& v, std::size_t n) noexcept {
    TESSERA_ASSERT(n <= 8);
    if (remaining() < n) return false;
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < n; ++i) x |= std::uint64_t{std::to_integer<unsigned char>(in_[at_ + i])} << (8 * i);
    at_ += n;
    v = x;
    return true;
  }
  // The next out.size() bytes as they are.
  template <byte_like B, std::size_t E>
  [[nodiscard]] bool bytes(std::span<B, E> out) noexcept {
    if (remaining() < out.size()) return false;
    for (auto& b : out) b = static_cast<B>(std::to_integer<unsigned char>(in_[at_++]));
    return true;
  }
  [[nodiscard]] bool skip(std::size_t n) noexcept {
    if (remaining() < n) return false;
    at_ += n;
    return true;
  }

  [[nodiscard]] std::size_t position() const noexcept { return at_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return in_.size() - at_; }
  [[nodiscard]] bool done() const noexcept { return at_ == in_.size(); }

 private:
  template <class U>
  bool read(U& v) noexcept {
    std::uint64_t x = 0;
    if (!uint(x, sizeof(U))) return false;
    v = static_cast<U>(x);
    return true;
  }

  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

}  // namespace tessera::core
