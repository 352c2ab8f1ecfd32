#include "tessera/net/error.hpp"

namespace tessera::net {
namespace {

class net_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tessera.net"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::bad_magic: return "bad frame magic";
      case errc::bad_version: return "unknown protocol version";
      case errc::unknown_type: return "unknown frame type";
      case errc::bad_flags: return "undefined frame flags";
      case errc::frame_too_large: return "frame over the size limit";
      case errc::truncated_header: return "truncated frame header";
      case errc::truncated_payload: return "truncated frame payload";
      case errc::bad_json: return "invalid JSON payload";
      case errc::bad_field: return "missing or invalid message field";
      case errc::bad_chunk: return "malformed chunk";
      case errc::unexpected_message: return "unexpected message";
      case errc::unknown_transfer: return "unknown transfer";
      case errc::chunk_out_of_range: return "chunk outside the declared blob";
      case errc::digest_mismatch: return "blob digest mismatch";
      case errc::identity_mismatch: return "device id differs from certificate";
      case errc::no_device_id: return "no device id in peer certificate";
      case errc::tls_handshake: return "TLS handshake failed";
      case errc::handshake_timeout: return "handshake timed out";
      case errc::idle_timeout: return "peer idle too long";
      case errc::write_timeout: return "write made no progress";
      case errc::queue_full: return "write queue full";
      case errc::refused: return "refused by peer";
      case errc::closed_by_peer: return "closed by peer";
      case errc::connection_lost: return "connection lost";
      case errc::stopped: return "stopped";
      case errc::connect_failed: return "connect failed";
    }
    return "unknown net error";
  }
};

}  // namespace

const std::error_category& net_category() noexcept {
  static const net_category_impl category;
  return category;
}

}  // namespace tessera::net
