// Tests of tessera/core/base/endian.hpp: the bytes each width writes, by hand; appending and filling; reads
// that do not fit take nothing.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/base/endian.hpp"

namespace core = tessera::core;

namespace {

std::vector<unsigned> values_of(std::span<const std::byte> b) {
  std::vector<unsigned> v;
  for (const std::byte x : b) v.push_back(std::to_integer<unsigned>(x));
  return v;
}

}  // namespace

TEST_CASE("le_writer: each width's bytes, lowest first, by hand") {
  std::vector<std::byte> out;
  core::le_writer w(out);
  w.u8(0xab).u16(0x1234).u32(0x41525354).u64(0x0102030405060708);
  CHECK(values_of(out) == std::vector<unsigned>{0xab, 0x34, 0x12, 0x54, 0x53, 0x52, 0x41,
                                                  0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01});
  CHECK(w.written() == 15);
  out.clear();
  core::le_writer(out).f32(1.0f).f64(-2.0).uint(0x0a0b0c0d0e0f10, 7);
  // 1.0f is 0x3f800000; -2.0 is 0xc000000000000000; then 7 bytes of the 56-bit value.
  CHECK(values_of(out) == std::vector<unsigned>{0x00, 0x00, 0x80, 0x3f, 0, 0, 0, 0, 0, 0, 0x00, 0xc0,
                                                  0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a});
}

TEST_CASE("le_writer fills a fixed buffer from its start, and appends to a string") {
  std::array<std::byte, 6> header{};
  core::le_writer w(header);
  w.u16(0xbeef).bytes(std::span<const char>("TSRA", 4));
  CHECK(values_of(header) == std::vector<unsigned>{0xef, 0xbe, 'T', 'S', 'R', 'A'});
  std::string text = "x";
  core::le_writer(text).u16(0x0201);
  CHECK(text == std::string("x\x01\x02"));
}

TEST_CASE("le_reader reads back what le_writer wrote, then nothing") {
  std::vector<std::byte> out;
  core::le_writer(out).u8(7).u16(0xfffe).u32(0xdeadbeef).u64(~std::uint64_t{0} - 1).f32(-0.5f).f64(1e300).uint(0x123456, 3);
  core::le_reader r(out);
  std::uint8_t a = 0;
  std::uint16_t b = 0;
  std::uint32_t c = 0;
  std::uint64_t d = 0, g = 0;
  float e = 0;
  double f = 0;
  REQUIRE(r.u8(a));
  REQUIRE(r.u16(b));
  REQUIRE(r.u32(c));
  REQUIRE(r.u64(d));
  REQUIRE(r.f32(e));
  REQUIRE(r.f64(f));
  REQUIRE(r.uint(g, 3));
  CHECK(a == 7);
  CHECK(b == 0xfffe);
  CHECK(c == 0xdeadbeef);
  CHECK(d == ~std::uint64_t{0} - 1);
  CHECK(e == -0.5f);
  CHECK(f == 1e300);
  CHECK(g == 0x123456);
  CHECK(r.done());
  CHECK_FALSE(r.u8(a));
  CHECK(a == 7);  // a failed read writes nothing
}

TEST_CASE("le_reader: a truncated read takes nothing and leaves the rest readable") {
  const std::array<unsigned char, 5> bytes{0x01, 0x02, 0x03, 0x04, 0x05};
  core::le_reader r(bytes);
  std::uint64_t wide = 42;
  CHECK_FALSE(r.u64(wide));  // 5 bytes left, 8 wanted
  CHECK(wide == 42);
  CHECK(r.position() == 0);
  CHECK(r.remaining() == 5);
  std::uint32_t v = 0;
  REQUIRE(r.u32(v));
  CHECK(v == 0x04030201);
  std::uint16_t half = 9;
  CHECK_FALSE(r.u16(half));  // one byte left
  CHECK(half == 9);
  CHECK_FALSE(r.skip(2));
  std::array<std::byte, 2> two{};
  CHECK_FALSE(r.bytes(std::span(two)));
  std::array<std::byte, 1> one{};
  REQUIRE(r.bytes(std::span(one)));
  CHECK(std::to_integer<unsigned>(one[0]) == 5);
  CHECK(r.done());
  core::le_reader empty(std::span<const std::byte>{});
  float f = 1;
  CHECK_FALSE(empty.f32(f));
  CHECK(f == 1);
}
