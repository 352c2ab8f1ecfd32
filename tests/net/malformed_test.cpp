// One named test per malformed frame, over real TLS: each ends the offending session with its typed
// error (REFUSE with the reason where the stream still allows it), and the hub keeps serving others.
#include <doctest/doctest.h>

#include "net_test_util.hpp"

using namespace tessera::test;

namespace {

std::vector<std::byte> hello_frame() { return net::encode_message(hello_for("dev-a")); }

std::vector<std::byte> update_frame(std::uint64_t transfer, std::uint64_t size, const net::digest& sha) {
  return net::encode_message(net::msg::update{.round = 1, .examples = 10, .steps = 1, .loss = 0.5, .transfer = transfer,
                                              .size = size, .blob_codec = net::codec::f32, .sha256 = sha});
}

// Sends HELLO, waits for the WELCOME, then sends `bad`.
void expect_refused(std::vector<std::byte> bad, net::errc expected, bool refuse_frame = true,
                    raw_peer::at_end end = raw_peer::at_end::stay, bool hello_first = true) {
  hub_fixture hub;
  std::vector<raw_peer::step> steps;
  if (hello_first) steps.push_back({0ms, hello_frame()});
  steps.push_back({hello_first ? 50ms : 0ms, std::move(bad)});
  auto p = start_raw(hub, test_pki::get().dev_a, std::move(steps), end);
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty() && p->read_closed; }));
  CHECK(hub.closes[0].code == expected);
  INFO(hub.closes[0].message);
  if (refuse_frame) CHECK(p->got_refuse());
  CHECK(still_serving(hub));
}

}  // namespace

TEST_CASE("session refuses: bad magic") {
  auto f = net::encode_message(net::msg::ping{1});
  f[1] = std::byte{'X'};
  expect_refused(f, net::errc::bad_magic);
}

TEST_CASE("session refuses: unknown version") {
  auto f = net::encode_message(net::msg::ping{1});
  f[4] = std::byte{9};
  expect_refused(f, net::errc::bad_version);
  // An agent of the release before (version 1) hears what to do.
  const auto old = net::decode_header(std::span(f).first(net::header_bytes), net::default_max_payload);
  REQUIRE_FALSE(old.ok());
  f[4] = std::byte{1};
  const auto older = net::decode_header(std::span(f).first(net::header_bytes), net::default_max_payload);
  REQUIRE_FALSE(older.ok());
  CHECK(older.error().message ==
        "protocol version 1, this side speaks 2: the hub and its agents must run the same Tessera release (upgrade the peer that is older)");
}

TEST_CASE("session refuses: unknown type") {
  auto f = net::encode_message(net::msg::ping{1});
  f[5] = std::byte{0x7f};
  expect_refused(f, net::errc::unknown_type);
}

TEST_CASE("session refuses: length over the limit, from the header alone") {
  // Only the header is sent: the hub must decide without waiting for (or allocating) the payload.
  std::vector<std::byte> h(net::header_bytes);
  net::encode_header({net::frame_type::update, 0, 0xfffffff0u}, std::span<std::byte, net::header_bytes>(h.data(), 12));
  expect_refused(h, net::errc::frame_too_large);
}

TEST_CASE("session refuses: truncated header") {
  auto f = net::encode_message(net::msg::ping{1});
  f.resize(5);
  expect_refused(f, net::errc::truncated_header, false, raw_peer::at_end::half_close);
}

TEST_CASE("session refuses: truncated payload") {
  auto f = net::encode_message(net::msg::ping{1});
  f.resize(f.size() - 3);
  expect_refused(f, net::errc::truncated_payload, false, raw_peer::at_end::half_close);
}

TEST_CASE("session refuses: invalid JSON") {
  expect_refused(net::encode_frame(net::frame_type::ping, bytes_of("{\"seq\":")), net::errc::bad_json);
}

TEST_CASE("session refuses: JSON with a missing field") {
  expect_refused(net::encode_frame(net::frame_type::ack, bytes_of(R"({"transfer":1})")), net::errc::bad_field);
}

TEST_CASE("session refuses: JSON with a wrong-typed field") {
  expect_refused(net::encode_frame(net::frame_type::update,
                                   bytes_of(R"({"round":1,"examples":1,"steps":1,"loss":"low","transfer":1,"size":4,)"
                                            R"("codec":"f32","sha256":")" +
                                            std::string(64, '0') + "\"}")),
                 net::errc::bad_field);
}

TEST_CASE("session refuses: a chunk beyond the declared size") {
  const auto data = pattern(20, 1);
  expect_refused(concat({update_frame(5, 1000, {}), chunk_frame(5, 990, data)}), net::errc::chunk_out_of_range);
}

TEST_CASE("session refuses: a chunk that leaves a gap") {
  const auto data = pattern(20, 1);
  expect_refused(concat({update_frame(5, 1000, {}), chunk_frame(5, 100, data)}), net::errc::chunk_out_of_range);
}

TEST_CASE("session refuses: a chunk for a transfer never announced") {
  const auto data = pattern(20, 1);
  expect_refused(chunk_frame(77, 0, data), net::errc::unknown_transfer);
}

TEST_CASE("session refuses: a blob whose digest does not match") {
  const auto data = pattern(1000, 2);
  const auto wrong = digest_of(pattern(1000, 3));
  expect_refused(concat({update_frame(5, 1000, wrong), chunk_frame(5, 0, std::span(data).first(600)),
                         chunk_frame(5, 600, std::span(data).subspan(600))}),
                 net::errc::digest_mismatch);
}

TEST_CASE("session refuses: a frame before HELLO") {
  expect_refused(net::encode_message(net::msg::ping{1}), net::errc::unexpected_message, true, raw_peer::at_end::stay,
                 false);
}

TEST_CASE("session refuses: a message the hub never receives (WELCOME from an agent)") {
  expect_refused(net::encode_message(net::msg::welcome{}), net::errc::unexpected_message);
}

TEST_CASE("session refuses: a second HELLO") {
  expect_refused(net::encode_message(hello_for("dev-a")), net::errc::unexpected_message);
}

TEST_CASE("bounds: control frames queued beyond the limit close the session with queue_full") {
  hub_fixture hub;
  auto cfg = fast_config();
  cfg.max_queued_control = 4;
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a", cfg);
  REQUIRE(run_until(hub.io, [&] { return agent->welcomed; }));
  // From inside the strand nothing is written between the sends, so the queue only grows.
  asio::dispatch(agent->s->strand(), [&] {
    for (int i = 0; i < 10; ++i) agent->s->send(net::msg::ping{static_cast<std::uint64_t>(i)});
  });
  REQUIRE(run_until(hub.io, [&] { return agent->closed.has_value(); }));
  CHECK(agent->closed->code == net::errc::queue_full);
  CHECK(still_serving(hub));
}
