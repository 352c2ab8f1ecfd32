// Drives a frame_reader over a byte string that arrives in pieces and records every event with what it
// carried. frame_reader_test.cpp and the fuzz target (tests/fuzz/frame_fuzz.cpp) replay the same bytes
// cut in different places and require identical records: how a stream is cut into reads must never
// change what it means. Depends on the reader alone (no doctest, no Asio), so the fuzzer can use it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "tessera/net/frame_reader.hpp"

namespace tessera::test {

struct reader_event {
  net::frame_event kind = net::frame_event::need_more;
  bool at_end = false;  // not an event: the input ended inside a frame (the truncation error below)
  net::frame_type type{};
  std::uint32_t payload_bytes = 0;
  std::uint64_t transfer = 0, offset = 0;
  std::vector<std::byte> bytes;  // control: the payload; chunk_end: what landed in the destination
  std::error_code error;
  std::string message;
  bool operator==(const reader_event&) const = default;
};

// How a replay routes a CHUNK, the same way at every cut: transfers with bit 0 set are discarded; the
// others land in a fresh destination after skipping (offset % 7) leading bytes, as if already held.
inline std::uint64_t replay_skip(const net::frame_reader& r) {
  return std::min<std::uint64_t>(r.chunk().offset % 7, r.chunk_data_bytes());
}

// `next_piece()` gives the size of each piece the input arrives in (0 counts as 1; the last piece is
// cut short). Each piece is handed over as a socket read would: in as many commits as the reader's
// buffers need.
template <class NextPiece>
std::vector<reader_event> replay(std::span<const std::byte> input, std::uint32_t limit, NextPiece&& next_piece) {
  net::frame_reader r(limit);
  std::vector<reader_event> out;
  std::vector<std::byte> dest;
  std::size_t at = 0;
  while (at < input.size()) {
    std::size_t piece = std::min<std::size_t>(std::max<std::size_t>(1, next_piece()), input.size() - at);
    while (piece > 0) {
      const std::span<std::byte> into = r.buffer();
      const std::size_t n = std::min(into.size(), piece);
      std::memcpy(into.data(), input.data() + at, n);
      at += n;
      piece -= n;
      const net::frame_event e = r.commit(n);
      if (e == net::frame_event::need_more) continue;
      reader_event rec;
      rec.kind = e;
      rec.type = r.header().type;
      rec.payload_bytes = r.header().payload_bytes;
      switch (e) {
        case net::frame_event::need_more: break;
        case net::frame_event::control: rec.bytes.assign(r.payload().begin(), r.payload().end()); break;
        case net::frame_event::chunk_begin: {
          rec.transfer = r.chunk().transfer;
          rec.offset = r.chunk().offset;
          if ((r.chunk().transfer & 1) != 0) {
            dest.clear();
            r.discard_chunk();
          } else {
            const std::uint64_t skip = replay_skip(r);
            dest.assign(static_cast<std::size_t>(r.chunk_data_bytes() - skip), std::byte{0});
            r.accept_chunk(skip, dest);
          }
          break;
        }
        case net::frame_event::chunk_end:
          rec.transfer = r.chunk().transfer;
          rec.offset = r.chunk().offset;
          rec.bytes = dest;
          break;
        case net::frame_event::failed:
          rec.error = r.error().code;
          rec.message = r.error().message;
          out.push_back(std::move(rec));
          return out;
      }
      out.push_back(std::move(rec));
    }
  }
  if (!r.at_boundary()) {
    const core::error e = r.truncated();
    reader_event rec;
    rec.kind = net::frame_event::failed;
    rec.at_end = true;
    rec.error = e.code;
    rec.message = e.message;
    out.push_back(std::move(rec));
  }
  return out;
}

inline std::vector<reader_event> replay_whole(std::span<const std::byte> input, std::uint32_t limit) {
  return replay(input, limit, [] { return SIZE_MAX; });
}
inline std::vector<reader_event> replay_bytewise(std::span<const std::byte> input, std::uint32_t limit) {
  return replay(input, limit, [] { return std::size_t{1}; });
}
// Two pieces: [0, cut) and the rest (0 < cut < input.size()).
inline std::vector<reader_event> replay_split(std::span<const std::byte> input, std::uint32_t limit, std::size_t cut) {
  bool first = true;
  return replay(input, limit, [&] {
    const std::size_t n = first ? cut : SIZE_MAX;
    first = false;
    return n;
  });
}

}  // namespace tessera::test
