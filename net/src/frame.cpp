#include "tessera/net/frame.hpp"

#include <cstring>
#include <string>

#include "tessera/core/base/endian.hpp"

namespace tessera::net {

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
    case frame_type::secagg_check: return "SECAGG_CHECK";
    case frame_type::secagg_check_reply: return "SECAGG_CHECK_REPLY";
    case frame_type::secagg_masked_with: return "SECAGG_MASKED_WITH";
  }
  return "?";
}

void encode_header(const frame_header& h, std::span<std::byte, header_bytes> out) noexcept {
  core::le_writer(out).u32(frame_magic).u8(protocol_version).u8(static_cast<std::uint8_t>(h.type)).u16(h.flags).u32(h.payload_bytes);
}

core::result<frame_header> decode_header(std::span<const std::byte> bytes, std::uint32_t max_payload) {
  core::le_reader r(bytes);
  std::uint32_t magic = 0;
  std::uint8_t version = 0, type = 0;
  frame_header h;
  if (!r.u32(magic) || !r.u8(version) || !r.u8(type) || !r.u16(h.flags) || !r.u32(h.payload_bytes))
    return make_error(errc::truncated_header, "frame header needs 12 bytes, got " + std::to_string(bytes.size()));
  if (magic != frame_magic) return make_error(errc::bad_magic, "frame magic is not 'TSRA'");
  if (version != protocol_version)
    return make_error(errc::bad_version, "protocol version " + std::to_string(version) + ", this side speaks " + std::to_string(protocol_version) +
                                             ": the hub and its agents must run the same Tessera release (upgrade the " +
                                             (version < protocol_version ? "peer" : "side") + " that is older)");
  if (type == 0 || type > max_frame_type) return make_error(errc::unknown_type, "frame type " + std::to_string(type));
  h.type = static_cast<frame_type>(type);
  if (h.flags != 0) return make_error(errc::bad_flags, "frame flags " + std::to_string(h.flags) + " in version " + std::to_string(protocol_version));
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
  core::le_writer(out).u64(h.transfer).u64(h.offset);
}

core::result<chunk_header> decode_chunk_header(std::span<const std::byte> bytes, std::uint32_t payload_bytes) {
  core::le_reader r(bytes);
  chunk_header h;
  if (payload_bytes <= chunk_header_bytes || !r.u64(h.transfer) || !r.u64(h.offset))
    return make_error(errc::bad_chunk, "CHUNK too short for its sub-header and data");
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
