// tessera/net/frame.hpp — the wire format: frames, their header, and the CHUNK sub-header. No I/O.
//
// A connection carries a sequence of frames. Every frame is a fixed 12-byte header and a payload:
//
//   offset size  field           meaning
//   0      4     magic           bytes 'T' 'S' 'R' 'A' (u32 0x41525354 little-endian)
//   4      1     version         1
//   5      1     type            frame_type below; anything else is errc::unknown_type
//   6      2     flags           u16 LE; no flag is defined in version 1, so it must be 0
//   8      4     payload_bytes   u32 LE; at most the receiver's limit (default 1 MiB, hard cap 16 MiB)
//   12     ...   payload
//
// The header is validated in full (magic, version, type, flags, length ≤ limit) before a single
// payload byte is read or any buffer is sized from it, so a peer cannot make us allocate.
// Control payloads (every type but CHUNK) are one UTF-8 JSON object (tessera/net/messages.hpp).
// A CHUNK payload is binary, never JSON, so tensor bytes are not re-encoded:
//
//   offset size  field           meaning
//   0      8     transfer        u64 LE, the transfer id declared by ASSIGN or UPDATE
//   8      8     offset          u64 LE, byte offset of this chunk within the blob
//   16     n     bytes           n = payload_bytes - 16 ≥ 1 raw bytes of the blob
//
// Integers are little-endian regardless of the host, written and read byte by byte.
//
//   std::array<std::byte, net::header_bytes> h;
//   net::encode_header({net::frame_type::ping, 0, 12}, h);
//   auto back = net::decode_header(h, net::default_max_payload);   // result<frame_header>
//   // Whole frames from a buffer (tests, the fuzz target); streams use frame_reader.hpp:
//   auto f = net::decode_frame(bytes, net::default_max_payload);   // result<decoded_frame>
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/net/error.hpp"

namespace tessera::net {

inline constexpr std::uint32_t frame_magic = 0x41525354;  // "TSRA" on the wire
// 2: secure aggregation's keys are signed over the round's sample rate and the model's digest, and
// statistics and evaluations travel as masked sums; a peer of version 1 cannot take part.
inline constexpr std::uint8_t protocol_version = 2;
inline constexpr std::size_t header_bytes = 12;
inline constexpr std::size_t chunk_header_bytes = 16;
inline constexpr std::uint32_t default_max_payload = 1u << 20;
// No configuration may raise the limit past this: it bounds what one frame can make us hold.
inline constexpr std::uint32_t hard_max_payload = 16u << 20;

enum class frame_type : std::uint8_t {
  hello = 1,    // agent → hub, first frame
  welcome = 2,  // hub → agent
  assign = 3,   // hub → agent, announces a download
  chunk = 4,    // either way, binary
  ack = 5,      // either way
  update = 6,   // agent → hub, announces an upload
  result = 7,   // hub → agent, verdict on an upload
  ping = 8,
  pong = 9,
  refuse = 10,  // either way, the reason before a close
  stats = 11,        // hub → agent, asks for one pass of the feature statistics
  stats_reply = 12,  // agent → hub, that pass's counts and sums
  evaluation = 13,   // agent → hub, the score of the model an evaluating ASSIGN sent
  // Secure aggregation (crypto/secagg.hpp), around UPDATE:
  secagg_keys = 14,          // agent → hub, the device's signed public keys for the round
  secagg_roster = 15,        // hub → agent, everyone's keys
  secagg_shares = 16,        // agent → hub, encrypted shares for the other devices
  secagg_inbox = 17,         // hub → agent, the shares addressed to it
  secagg_unmask = 18,        // hub → agent, who survived: which shares to reveal
  secagg_unmask_reply = 19,  // agent → hub, the shares
  secagg_check = 20,         // hub → agent, the survivor set to sign before any share is revealed
  secagg_check_reply = 21,   // agent → hub, the signature
  secagg_masked_with = 22,   // agent → hub, before its masked UPDATE: whom it masked with, signed
};
inline constexpr std::uint8_t max_frame_type = 22;

[[nodiscard]] std::string_view to_string(frame_type t) noexcept;

struct frame_header {
  frame_type type = frame_type::ping;
  std::uint16_t flags = 0;
  std::uint32_t payload_bytes = 0;
};

struct chunk_header {
  std::uint64_t transfer = 0;
  std::uint64_t offset = 0;
};

// Writes 12 header bytes.
void encode_header(const frame_header& h, std::span<std::byte, header_bytes> out) noexcept;
// Validates and decodes the first 12 bytes. Fewer than 12 bytes: errc::truncated_header.
[[nodiscard]] core::result<frame_header> decode_header(std::span<const std::byte> bytes, std::uint32_t max_payload);

void encode_chunk_header(const chunk_header& h, std::span<std::byte, chunk_header_bytes> out) noexcept;
// Decodes the 16-byte sub-header of a CHUNK payload of `payload_bytes` (which must exceed 16).
[[nodiscard]] core::result<chunk_header> decode_chunk_header(std::span<const std::byte> bytes,
                                                             std::uint32_t payload_bytes);

// Header + payload in one buffer (for control frames, which are small).
[[nodiscard]] std::vector<std::byte> encode_frame(frame_type type, std::span<const std::byte> payload);

// One whole frame decoded from the front of `bytes`: the header, and for CHUNK the sub-header and a view
// of the data; for control frames a view of the JSON payload (parse it with parse_message).
// It drives frame_reader over the buffer, so it accepts and refuses exactly what a session does; an
// error is reported as soon as the bytes that prove it are read (a bad sub-header before a short tail).
struct decoded_frame {
  frame_header header;
  chunk_header chunk;                  // CHUNK only
  std::span<const std::byte> payload;  // control: JSON text; CHUNK: the data bytes after the sub-header
  std::size_t frame_bytes = 0;         // bytes consumed from the input
};
[[nodiscard]] core::result<decoded_frame> decode_frame(std::span<const std::byte> bytes, std::uint32_t max_payload);

}  // namespace tessera::net
