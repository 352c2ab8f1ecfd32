#include "tessera/net/frame.hpp"

#include <cstring>
#include <string>

namespace tessera::net {
namespace {

void put_u16(std::byte* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::byte>(v & 0xff);
  p[1] = static_cast<std::byte>(v >> 8);
}
void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint16_t get_u16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}
std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

}  // namespace

std::string_view to_string(frame_type t) noexcept {
  switch (t) {
    case frame_type::hello: return "HELLO";
    case frame_type::welcome: return "WELCOME";
    case frame_type::assign: return "ASSIGN";
    case frame_type::chunk: return "CHUNK";
    case frame_type::ack: return "ACK";
    case frame_type::update: return "UPDATE";
    case frame_type::result: return "RESULT";
    case frame_type::ping: return "PING";
    case frame_type::pong: return "PONG";
    case frame_type::refuse: return "REFUSE";
    case frame_type::stats: return "STATS";
    case frame_type::stats_reply: return "STATS_REPLY";
    case frame_type::evaluation: return "EVALUATION";
    case frame_type::secagg_keys: return "SECAGG_KEYS";
    case frame_type::secagg_roster: return "SECAGG_ROSTER";
    case frame_type::secagg_shares: return "SECAGG_SHARES";
    case frame_type::secagg_inbox: return "SECAGG_INBOX";
    case frame_type::secagg_unmask: return "SECAGG_UNMASK";
    case frame_type::secagg_unmask_reply: return "SECAGG_UNMASK_REPLY";
  }
  return "?";
}

void encode_header(const frame_header& h, std::span<std::byte, header_bytes> out) noexcept {
  put_u32(out.data(), frame_magic);
  out[4] = static_cast<std::byte>(protocol_version);
  out[5] = static_cast<std::byte>(h.type);
  put_u16(out.data() + 6, h.flags);
  put_u32(out.data() + 8, h.payload_bytes);
}

core::result<frame_header> decode_header(std::span<const std::byte> bytes, std::uint32_t max_payload) {
  if (bytes.size() < header_bytes)
    return make_error(errc::truncated_header, "frame header needs 12 bytes, got " + std::to_string(bytes.size()));
  if (get_u32(bytes.data()) != frame_magic) return make_error(errc::bad_magic, "frame magic is not 'TSRA'");
  const auto version = std::to_integer<unsigned>(bytes[4]);
  if (version != protocol_version)
    return make_error(errc::bad_version, "protocol version " + std::to_string(version) + ", expected 1");
  const auto type = std::to_integer<unsigned>(bytes[5]);
  if (type == 0 || type > max_frame_type) return make_error(errc::unknown_type, "frame type " + std::to_string(type));
  frame_header h;
  h.type = static_cast<frame_type>(type);
  h.flags = get_u16(bytes.data() + 6);
  if (h.flags != 0) return make_error(errc::bad_flags, "frame flags " + std::to_string(h.flags) + " in version 1");
  h.payload_bytes = get_u32(bytes.data() + 8);
  const std::uint32_t limit = max_payload < hard_max_payload ? max_payload : hard_max_payload;
  if (h.payload_bytes > limit)
    return make_error(errc::frame_too_large, std::string(to_string(h.type)) + " payload of " +
                                                 std::to_string(h.payload_bytes) + " bytes over the limit of " +
                                                 std::to_string(limit));
  if (h.type == frame_type::chunk && h.payload_bytes <= chunk_header_bytes)
    return make_error(errc::bad_chunk, "CHUNK payload of " + std::to_string(h.payload_bytes) +
                                           " bytes leaves no data after its 16-byte sub-header");
  return h;
}

void encode_chunk_header(const chunk_header& h, std::span<std::byte, chunk_header_bytes> out) noexcept {
  put_u64(out.data(), h.transfer);
  put_u64(out.data() + 8, h.offset);
}

core::result<chunk_header> decode_chunk_header(std::span<const std::byte> bytes, std::uint32_t payload_bytes) {
  if (payload_bytes <= chunk_header_bytes || bytes.size() < chunk_header_bytes)
    return make_error(errc::bad_chunk, "CHUNK too short for its sub-header and data");
  chunk_header h;
  h.transfer = get_u64(bytes.data());
  h.offset = get_u64(bytes.data() + 8);
  const std::uint64_t n = payload_bytes - chunk_header_bytes;
  if (h.offset > UINT64_MAX - n) return make_error(errc::chunk_out_of_range, "CHUNK offset + length overflows");
  return h;
}

std::vector<std::byte> encode_frame(frame_type type, std::span<const std::byte> payload) {
  // Callers build payloads far below the hard cap; a larger one is our bug, not the peer's.
  TESSERA_ASSERT(payload.size() <= hard_max_payload);
  std::vector<std::byte> out(header_bytes + payload.size());
  encode_header({type, 0, static_cast<std::uint32_t>(payload.size())}, std::span<std::byte, header_bytes>(out.data(), header_bytes));
  if (!payload.empty()) std::memcpy(out.data() + header_bytes, payload.data(), payload.size());
  return out;
}

// decode_frame is frame_reader.cpp's: the incremental reader is the only decoder.

}  // namespace tessera::net
