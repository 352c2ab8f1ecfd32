#include "tessera/net/error.hpp"

namespace tessera::net {

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "bad_magic", "bad_version", "unknown_type", "bad_flags", "frame_too_large", "truncated_header",
      "truncated_payload", "bad_json", "bad_field", "bad_chunk", "unexpected_message",
      "unknown_transfer", "chunk_out_of_range", "digest_mismatch", "identity_mismatch", "no_device_id",
      "tls_handshake", "handshake_timeout", "idle_timeout", "write_timeout", "queue_full", "refused",
      "closed_by_peer", "connection_lost", "stopped", "connect_failed", "revoked", "replaced", "evicted", "server_full",
      "resolve_failed", "refused_lasting", "duplicate_identity"};
  static const core::table_category category("tessera.net", names);
  return category;
}

}  // namespace tessera::net
