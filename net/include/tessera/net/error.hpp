// tessera/net/error.hpp — the net module's typed errors.
//
// Every way a frame, a message, a transfer or a connection can fail has its own code, so tests and the
// hub can tell a bad magic from an idle peer without parsing text. A session reports exactly one of
// these (plus one line of detail) when it closes.
//
//   session->on_closed([](const core::error& why) {
//     if (why.code == net::errc::idle_timeout) log("peer went silent");
//   });
#pragma once

#include <string>
#include <system_error>

#include "tessera/core/base/error.hpp"

namespace tessera::net {

enum class errc {
  // Frame header (checked before any payload byte is read or any buffer is sized).
  bad_magic = 1,
  bad_version,
  unknown_type,
  bad_flags,
  frame_too_large,
  truncated_header,    // the stream ended inside a header
  truncated_payload,   // the stream ended inside a payload
  // Payloads and messages.
  bad_json,            // not JSON, nested too deeply, or not an object
  bad_field,           // a field is missing, of the wrong type or out of range; the detail names it
  bad_chunk,           // a CHUNK payload too short for its sub-header or carrying no bytes
  unexpected_message,  // a valid message at the wrong time (e.g. not HELLO first)
  // Transfers.
  unknown_transfer,    // CHUNK or ACK for a transfer this side does not know
  chunk_out_of_range,  // a chunk beyond the declared size, or leaving a gap
  digest_mismatch,     // the whole blob's SHA-256 differs from the declared one
  // Connection.
  identity_mismatch,   // HELLO's device id differs from the certificate's
  no_device_id,        // the peer certificate carries no device id
  tls_handshake,       // certificate or protocol failure during the handshake
  handshake_timeout,
  idle_timeout,        // no byte received for idle_timeout
  write_timeout,       // a write made no progress for write_timeout
  queue_full,          // too many frames queued for a peer that does not read
  refused,             // the peer sent REFUSE
  closed_by_peer,      // orderly close at a frame boundary
  connection_lost,     // the transport failed (reset, truncated TLS stream)
  stopped,             // closed by our side (server stop, session close)
  connect_failed,      // the TCP connect failed or timed out (client)
  revoked,             // the peer's certificate was revoked while it was connected
  replaced,            // a newer connection of the same device took this one's place
  evicted,             // a pending handshake pushed out to make room for newer connections
  server_full,         // verified, but the server holds max_sessions sessions already
  resolve_failed,      // the host name did not resolve: not found, no answer by the deadline, bad resolver setup
  refused_lasting,     // the peer sent REFUSE for a cause reconnecting will not cure (revoked, a duplicate id)
  duplicate_identity,  // another session of the same device identity is live and answering
};

[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.net"
using core::make_error, core::make_error_code;

}  // namespace tessera::net

template <>
struct std::is_error_code_enum<tessera::net::errc> : std::true_type {};
