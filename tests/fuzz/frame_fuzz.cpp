// libFuzzer target for the frame codec: any byte string is decoded as a sequence of frames, each
// control payload parsed and validated. Whatever parses must re-encode and parse again to the same
// type (a round-trip oracle); anything else must be refused with a typed error, never a crash, a read
// out of bounds, undefined behaviour or an allocation sized by the input.
//
// The same bytes are also fed to the incremental frame_reader (the decoder a session uses, and the one
// decode_frame drives) whole, one byte at a time, in pieces whose sizes follow from the input, and split
// in two at every position (short inputs) or at positions drawn from the input: every replay must give
// identical events, as a stream must mean the same however its reads are cut. Those events must also
// agree with decode_frame's frames.
//
// Built and run by tests/fuzz/run-fuzz (clang++ -fsanitize=fuzzer,address,undefined).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../net/frame_replay.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"

namespace net = tessera::net;
namespace test = tessera::test;

namespace {

// A small limit so that the fuzzer also reaches the frame_too_large branch cheaply.
constexpr std::uint32_t limit = 1u << 16;
// Inputs up to this size are also split in two at every position (quadratic, so bounded); longer ones
// at `sampled_splits` positions drawn from the input.
constexpr std::size_t every_split_max = 128;
constexpr int sampled_splits = 16;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Piece sizes for one more replay, drawn from a generator seeded by the input itself, so the fuzzer
// steers the cuts as it steers the bytes: mostly small pieces, sometimes a large one.
struct input_cuts {
  std::uint64_t state;
  std::size_t operator()() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (state & 7) == 0 ? static_cast<std::size_t>(state >> 40) % 4096 : static_cast<std::size_t>(state >> 32) % 24;
  }
};

std::uint64_t seed_of(std::span<const std::byte> bytes) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const auto b : bytes) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return h | 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);

  std::vector<net::decoded_frame> frames;
  std::span<const std::byte> rest = input;
  while (!rest.empty()) {
    auto f = net::decode_frame(rest, limit);
    if (!f) break;
    const auto& frame = f.value();
    check(frame.frame_bytes <= rest.size() && frame.header.payload_bytes <= limit);
    if (frame.header.type != net::frame_type::chunk) {
      auto m = net::parse_message(frame.header.type, frame.payload);
      if (m) {
        const auto again = net::encode_message(m.value());
        auto f2 = net::decode_frame(again, net::hard_max_payload);
        check(f2 && f2.value().header.type == frame.header.type);
        auto m2 = net::parse_message(f2.value().header.type, f2.value().payload);
        check(m2 && m2.value().index() == m.value().index());
      }
    } else {
      check(frame.payload.size() + net::chunk_header_bytes == frame.header.payload_bytes);
    }
    frames.push_back(frame);
    rest = rest.subspan(frame.frame_bytes);
  }

  // The reader, cut every which way, means the same each time.
  const auto whole = test::replay_whole(input, limit);
  check(test::replay_bytewise(input, limit) == whole);
  input_cuts cuts{seed_of(input)};
  check(test::replay(input, limit, cuts) == whole);
  if (size <= every_split_max) {
    for (std::size_t cut = 1; cut < size; ++cut) check(test::replay_split(input, limit, cut) == whole);
  } else {
    for (int i = 0; i < sampled_splits; ++i)
      check(test::replay_split(input, limit, 1 + (cuts() * 2654435761u) % (size - 1)) == whole);
  }

  // ...and what decode_frame found, frame by frame.
  std::size_t next = 0;
  for (const auto& e : whole) {
    if (e.kind == net::frame_event::control || e.kind == net::frame_event::chunk_end) {
      check(next < frames.size());
      const auto& f = frames[next++];
      check(f.header.type == e.type && f.header.payload_bytes == e.payload_bytes);
      if (e.kind == net::frame_event::control)
        check(std::equal(f.payload.begin(), f.payload.end(), e.bytes.begin(), e.bytes.end()));
      else
        check(f.chunk.transfer == e.transfer && f.chunk.offset == e.offset);
    }
  }
  check(next == frames.size());
  // decode_frame stops at the first frame it refuses; the reader must have refused (or run out) there too.
  check(rest.empty() == (whole.empty() || whole.back().kind != net::frame_event::failed));
  return 0;
}
