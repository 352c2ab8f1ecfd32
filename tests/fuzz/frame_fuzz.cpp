// libFuzzer target for the frame codec: any byte string is decoded as a sequence of frames, each
// control payload parsed and validated. Whatever parses must re-encode and parse again to the same
// type (a round-trip oracle); anything else must be refused with a typed error, never a crash, a read
// out of bounds, undefined behaviour or an allocation sized by the input.
//
// Built and run by tests/fuzz/run-fuzz (clang++ -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"

namespace net = tessera::net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data), size);
  // A small limit so that the fuzzer also reaches the frame_too_large branch cheaply.
  constexpr std::uint32_t limit = 1u << 16;
  while (!rest.empty()) {
    auto f = net::decode_frame(rest, limit);
    if (!f) break;
    const auto& frame = f.value();
    if (frame.frame_bytes > rest.size() || frame.header.payload_bytes > limit) __builtin_trap();
    if (frame.header.type != net::frame_type::chunk) {
      auto m = net::parse_message(frame.header.type, frame.payload);
      if (m) {
        const auto again = net::encode_message(m.value());
        auto f2 = net::decode_frame(again, net::hard_max_payload);
        if (!f2 || f2.value().header.type != frame.header.type) __builtin_trap();
        auto m2 = net::parse_message(f2.value().header.type, f2.value().payload);
        if (!m2 || m2.value().index() != m.value().index()) __builtin_trap();
      }
    } else if (frame.payload.size() + net::chunk_header_bytes != frame.header.payload_bytes) {
      __builtin_trap();
    }
    rest = rest.subspan(frame.frame_bytes);
  }
  return 0;
}
