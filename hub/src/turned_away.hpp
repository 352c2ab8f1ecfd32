// Internal: the devices and connections the hub turned away lately, and why, for the operator's
// status page and /api/status: a device whose budget cannot hold the model, a revoked or duplicate
// certificate, a handshake that failed on a certificate (expired, another CA). Entries are keyed by who
// and why: a device that keeps coming back is one entry with a count, and at most k_most are kept (the
// least recent go first), so a flood cannot grow it. Connections that never said who they are (a port
// scan, a silent socket) are not listed: /metrics counts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::hub {

struct turned_away_entry {
  std::string who{};      // the device id, or for a failed handshake the peer's host
  std::string address{};  // the last connection's address
  std::string serial{};   // its certificate's serial, where known
  std::string code{};     // what /metrics counts it as: "over_budget", "revoked", "tls.unknown_ca", ...
  std::string reason{};   // the hub's sentence
  std::size_t times = 0;
  std::int64_t last_unix = 0;
};

class turned_away_list {
 public:
  static constexpr std::size_t k_most = 32;

  // Counts `e` into its entry (same who and code), which moves to the front; a new one goes first.
  void note(turned_away_entry e);
  [[nodiscard]] const std::deque<turned_away_entry>& entries() const noexcept { return entries_; }
  [[nodiscard]] nlohmann::json to_json() const;

 private:
  std::deque<turned_away_entry> entries_;  // the most recent first
};

// Whether a failed handshake's label (net::session::tls_failure) is a certificate's trouble (one side
// distrusts, a certificate expired, revoked, for another purpose), which the list shows, rather than
// a connection that never presented one (closed, not TLS, an old protocol, no certificate).
[[nodiscard]] bool certificate_trouble(std::string_view tls_failure) noexcept;

// The host of "host:port" or "[v6]:port" (a failed handshake's peer, whose port changes every attempt).
[[nodiscard]] std::string host_of(const std::string& address);

}  // namespace tessera::hub
