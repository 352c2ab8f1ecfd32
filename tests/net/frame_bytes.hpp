// Byte strings and frames the net suites build by hand: test data, a string's bytes, several pieces
// joined, a CHUNK frame. No sockets, so the codec-only suites (frame, frame_reader, transfer_table,
// write_queue) share them with the rest.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "tessera/net/frame.hpp"

namespace tessera::test {

// `n` bytes of test data that look random (xorshift32's low bytes), a different sequence for each
// `seed`: a byte lost, doubled or moved shows.
inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<std::byte>(x & 0xff);
  }
  return v;
}

inline std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

inline std::vector<std::byte> concat(std::vector<std::vector<std::byte>> parts) {
  std::vector<std::byte> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

inline std::vector<std::byte> chunk_frame(std::uint64_t transfer, std::uint64_t offset, std::span<const std::byte> data) {
  std::vector<std::byte> payload(net::chunk_header_bytes + data.size());
  net::encode_chunk_header({transfer, offset},
                           std::span<std::byte, net::chunk_header_bytes>(payload.data(), net::chunk_header_bytes));
  if (!data.empty()) std::memcpy(payload.data() + net::chunk_header_bytes, data.data(), data.size());
  return net::encode_frame(net::frame_type::chunk, payload);
}

}  // namespace tessera::test
