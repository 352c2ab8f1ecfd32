#include "tessera/net/link_config.hpp"

namespace tessera::net {

void read_link_settings(core::config_reader& r, link_settings& s, bool rate_limits) {
  s.heartbeat_s = r.number("heartbeat_s", s.heartbeat_s, 0.05, 3600, "seconds of silence before a PING keeps the link alive");
  s.idle_timeout_s = r.number("idle_timeout_s", s.idle_timeout_s, 0.2, 86400,
                              "seconds without a byte received (or a write without progress) before the link is dropped");
  if (s.idle_timeout_s <= s.heartbeat_s)
    r.fail("idle_timeout_s", "must exceed heartbeat_s, or idle links are cut between heartbeats");
  s.chunk_kib = static_cast<std::uint32_t>(r.integer("chunk_kib", s.chunk_kib, 1, 1000, "KiB of blob per CHUNK frame"));
  s.window_kib = static_cast<std::uint32_t>(r.integer("window_kib", s.window_kib, 1, 1 << 20,
                                                      "KiB of a blob sent ahead of the receiver's ACK (small on slow links: a cut resends at most this)"));
  if (s.window_kib < s.chunk_kib) r.fail("window_kib", "is below chunk_kib");
  if (!rate_limits) return;
  if (const auto* rl = r.object("rate_limit", "caps for metered links (0: none)")) {
    core::config_reader lr = r.child("rate_limit", *rl);
    s.upload_bytes_per_s = static_cast<std::uint64_t>(lr.integer("upload_bytes_per_s", 0, 0, INT64_MAX, "bytes per second sent, at most"));
    s.download_bytes_per_s =
        static_cast<std::uint64_t>(lr.integer("download_bytes_per_s", 0, 0, INT64_MAX, "bytes per second received, at most"));
    // A cap below a few hundred bytes per second could not even carry the heartbeats.
    if (s.upload_bytes_per_s != 0 && s.upload_bytes_per_s < 512) lr.fail("upload_bytes_per_s", "below 512 (0 means no cap)");
    if (s.download_bytes_per_s != 0 && s.download_bytes_per_s < 512) lr.fail("download_bytes_per_s", "below 512 (0 means no cap)");
    if (auto done = lr.finish(); !done) r.fail(std::move(done).error());
  }
}

session_config to_session_config(const link_settings& s) {
  session_config c;
  c.heartbeat_interval = core::seconds_to_ms(s.heartbeat_s);
  c.idle_timeout = core::seconds_to_ms(s.idle_timeout_s);
  c.write_timeout = core::seconds_to_ms(s.idle_timeout_s);
  c.chunk_bytes = s.chunk_kib << 10;
  c.transfer_window_bytes = std::uint64_t{s.window_kib} << 10;
  c.send_rate = s.upload_bytes_per_s;
  c.receive_rate = s.download_bytes_per_s;
  return c;
}

}  // namespace tessera::net
