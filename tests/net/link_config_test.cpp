// Tests of tessera/net/link_config.hpp: the link fields hub and agent share, and their session_config.
#include "tessera/net/link_config.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/crypto/error.hpp"
#include "tessera/net/error.hpp"

using namespace tessera;
using json = nlohmann::json;

namespace {

std::string error_of(const json& j, bool rate_limits) {
  core::config_reader r(j, "agent.json");
  net::link_settings s;
  net::read_link_settings(r, s, rate_limits);
  auto done = r.finish();
  return done.ok() ? std::string() : done.error().message;
}

}  // namespace

TEST_CASE("link settings: the fields become the session's deadlines, chunking and rate caps") {
  const json j = {{"heartbeat_s", 2.5}, {"idle_timeout_s", 20}, {"chunk_kib", 8}, {"window_kib", 32},
                  {"rate_limit", {{"upload_bytes_per_s", 125000}, {"download_bytes_per_s", 0}}}};
  core::config_reader r(j, "agent.json");
  net::link_settings s;
  net::read_link_settings(r, s, /*rate_limits=*/true);
  REQUIRE(r.finish().ok());
  const net::session_config c = net::to_session_config(s);
  CHECK(c.heartbeat_interval == std::chrono::milliseconds(2500));
  CHECK(c.idle_timeout == std::chrono::milliseconds(20000));
  CHECK(c.write_timeout == std::chrono::milliseconds(20000));
  CHECK(c.chunk_bytes == 8u << 10);
  CHECK(c.transfer_window_bytes == 32u << 10);
  CHECK(c.send_rate == 125000);
  CHECK(c.receive_rate == 0);
  const net::session_config defaults = net::to_session_config({});
  CHECK(defaults.chunk_bytes == 256u << 10);
  CHECK(defaults.transfer_window_bytes == 2u << 20);
}

TEST_CASE("link settings: inconsistent values are refused with the field named") {
  CHECK(error_of({{"heartbeat_s", 10}, {"idle_timeout_s", 5}}, false) ==
        "agent.json: field 'idle_timeout_s': must exceed heartbeat_s, or idle links are cut between heartbeats");
  CHECK(error_of({{"chunk_kib", 64}, {"window_kib", 32}}, false) == "agent.json: field 'window_kib': is below chunk_kib");
  CHECK(error_of({{"rate_limit", {{"upload_bytes_per_s", 100}}}}, true) ==
        "agent.json: field 'rate_limit.upload_bytes_per_s': below 512 (0 means no cap)");
  CHECK(error_of({{"rate_limit", {{"upload_bytes_per_s", 1000}}}}, false) == "agent.json: field 'rate_limit': unknown field");
}

TEST_CASE("net and crypto error codes have stable names, the first and the last") {
  CHECK(core::error_name(net::errc::bad_magic) == "net.bad_magic");
  CHECK(core::error_name(net::errc::connect_failed) == "net.connect_failed");
  CHECK(core::error_name(crypto::errc::openssl) == "crypto.openssl");
  CHECK(core::error_name(crypto::errc::already_revoked) == "crypto.already_revoked");
}
