// The session's state machine without a socket: which transitions exist, what a graceful and a hard
// close do, the close steps, what happens to queued chunks, who may say what, and the watchdog.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "fixed_clock.hpp"
#include "tessera/net/session_lifecycle.hpp"
#include "tessera/net/write_queue.hpp"

namespace net = tessera::net;
using namespace std::chrono_literals;
using tessera::test::t0;
using state = net::session_state;

namespace {

tessera::core::error why(net::errc e) { return net::make_error(e, "test"); }

net::session_lifecycle open_agent() {
  net::session_lifecycle l(net::role::agent);
  REQUIRE(l.start());
  l.handshake_done();
  REQUIRE(l.state() == state::open);
  return l;
}

net::msg::hello hello(const std::string& id) {
  return {.device_id = id, .version = 1, .memory_budget_bytes = 1, .examples = 1, .codecs = {}, .resume = {}};
}

}  // namespace

TEST_CASE("session_lifecycle: created → handshaking → greeting → open on the hub, straight to open on the agent") {
  net::session_lifecycle hub(net::role::hub);
  CHECK(hub.state() == state::created);
  CHECK(!hub.established());
  CHECK(!hub.stopped());
  CHECK(hub.start());
  CHECK(hub.state() == state::handshaking);
  CHECK(!hub.start());  // once
  CHECK(!hub.may_write());
  hub.handshake_done();
  CHECK(hub.state() == state::greeting);
  CHECK(hub.established());
  CHECK(hub.ever_established());
  CHECK(hub.admit(hello("dev-a"), "dev-a"));
  CHECK(hub.state() == state::open);

  auto agent = open_agent();
  CHECK(agent.established());
  CHECK(agent.may_write());
}

TEST_CASE("session_lifecycle: the hub's first frame must be a HELLO naming the certificate's device") {
  SUBCASE("anything else first") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    l.handshake_done();
    auto r = l.admit(net::msg::ping{1}, "dev-a");
    REQUIRE(!r);
    CHECK(r.error().code == net::errc::unexpected_message);
    CHECK(r.error().message == "PING before HELLO");
    CHECK(l.state() == state::greeting);
  }
  SUBCASE("a HELLO with another id") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    l.handshake_done();
    auto r = l.admit(hello("dev-b"), "dev-a");
    REQUIRE(!r);
    CHECK(r.error().code == net::errc::identity_mismatch);
    CHECK(l.state() == state::greeting);
  }
  SUBCASE("a second HELLO, and messages only agents receive") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    l.handshake_done();
    REQUIRE(l.admit(hello("dev-a"), "dev-a"));
    CHECK(l.admit(hello("dev-a"), "dev-a").error().code == net::errc::unexpected_message);
    CHECK(l.admit(net::msg::welcome{}, "dev-a").error().message == "WELCOME is not expected by the hub");
    CHECK(l.admit(net::msg::update{}, "dev-a"));
    CHECK(l.admit(net::msg::ack{}, "dev-a"));
  }
  SUBCASE("the agent's side of the same rules") {
    auto l = open_agent();
    CHECK(l.admit(net::msg::assign{}, ""));
    CHECK(l.admit(net::msg::welcome{}, ""));
    CHECK(l.admit(net::msg::refuse{}, ""));
    CHECK(l.admit(hello("x"), "").error().message == "HELLO is not expected by the agent");
    CHECK(l.admit(net::msg::update{}, "").error().code == net::errc::unexpected_message);
  }
}

TEST_CASE("session_lifecycle: a graceful close flushes, cancels the read, exchanges close_notify, then closes") {
  auto l = open_agent();
  CHECK(l.close(why(net::errc::stopped), net::close_mode::graceful, t0) == net::close_action::flush);
  CHECK(l.state() == state::flushing);
  CHECK(l.closing());
  CHECK(l.stopped());
  CHECK(!l.established());  // no new frames: send() is dropped from here on
  CHECK(l.may_write());     // ...but what is queued still goes out
  CHECK(l.close_started() == t0);
  // One step at a time, as completions come back.
  CHECK(l.next_close_step(true, true, false) == net::close_step::wait);  // a write in flight
  CHECK(l.next_close_step(false, true, false) == net::close_step::write);
  CHECK(l.next_close_step(false, true, true) == net::close_step::cancel_io);  // the queue is out: stop reading
  CHECK(l.state() == state::flushing);
  CHECK(l.next_close_step(false, false, true) == net::close_step::shutdown);
  CHECK(l.state() == state::shutting_down);
  CHECK(!l.may_write());
  CHECK(l.next_close_step(false, false, true) == net::close_step::wait);  // close_notify once
  CHECK(l.finish().code == net::errc::stopped);
  CHECK(l.state() == state::closed);
  CHECK(l.closed());
  CHECK(l.stopped());
  CHECK(l.ever_established());
}

TEST_CASE("session_lifecycle: a hard close closes now; before TLS is up every close is one") {
  SUBCASE("hard from open") {
    auto l = open_agent();
    CHECK(l.close(why(net::errc::idle_timeout), net::close_mode::hard, t0) == net::close_action::finish);
    CHECK(l.finish().code == net::errc::idle_timeout);
  }
  SUBCASE("graceful while handshaking: nothing can be flushed") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    CHECK(l.close(why(net::errc::stopped), net::close_mode::graceful, t0) == net::close_action::finish);
    CHECK(l.finish().code == net::errc::stopped);
    CHECK(!l.ever_established());
  }
  SUBCASE("before start") {
    net::session_lifecycle l(net::role::agent);
    CHECK(l.close(why(net::errc::stopped), net::close_mode::refuse, t0) == net::close_action::finish);
    (void)l.finish();
    CHECK(!l.start());  // a closed session never starts
  }
}

TEST_CASE("session_lifecycle: while closing only a hard close changes anything; the first reason stays") {
  auto l = open_agent();
  REQUIRE(l.close(why(net::errc::bad_json), net::close_mode::refuse, t0) == net::close_action::flush);
  CHECK(l.close(why(net::errc::stopped), net::close_mode::graceful, t0 + 1s) == net::close_action::none);
  CHECK(l.close(why(net::errc::refused), net::close_mode::refuse, t0 + 1s) == net::close_action::none);
  CHECK(l.close_started() == t0);
  CHECK(l.close(why(net::errc::connection_lost), net::close_mode::hard, t0 + 1s) == net::close_action::finish);
  CHECK(l.finish().code == net::errc::bad_json);
  CHECK(l.close(why(net::errc::connection_lost), net::close_mode::hard, t0) == net::close_action::none);
  CHECK(l.state() == state::closed);
}

TEST_CASE("session_lifecycle: a write that fails while closing aborts: cancel what is pending, send nothing") {
  auto l = open_agent();
  REQUIRE(l.close(why(net::errc::stopped), net::close_mode::graceful, t0) == net::close_action::flush);
  l.transport_failed();
  CHECK(l.state() == state::aborting);
  CHECK(!l.may_write());
  CHECK(l.next_close_step(false, true, false) == net::close_step::cancel_io);
  CHECK(l.next_close_step(true, false, false) == net::close_step::cancel_io);
  CHECK(l.next_close_step(false, false, false) == net::close_step::finish);
  // Not closing: a failed transport changes nothing here (the hard close is the caller's).
  auto other = open_agent();
  other.transport_failed();
  CHECK(other.state() == state::open);
  CHECK(other.next_close_step(false, false, true) == net::close_step::wait);
}

TEST_CASE("session_lifecycle: on a graceful close queued chunks go, control frames and a REFUSE are written") {
  const std::vector<std::byte> data(300, std::byte{1});
  auto t = std::make_shared<net::outgoing_transfer>(1, data);
  net::write_queue q(2);
  q.push_chunk(t, 0, std::span(data).first(100));  // being written
  REQUIRE(q.push_control(net::encode_message(net::msg::ack{2, 0})));
  q.push_chunk(t, 100, std::span(data).subspan(100, 100));
  REQUIRE(q.push_control(net::encode_message(net::msg::ping{1})));
  q.push_chunk(t, 200, std::span(data).subspan(200, 100));
  q.consume(10);

  auto l = open_agent();
  REQUIRE(l.close(why(net::errc::bad_field), net::close_mode::refuse, t0) == net::close_action::flush);
  // What session::fail does with a flush: drop what has not begun, then the REFUSE, past the bound.
  q.drop_unsent_chunks(false);
  q.push_final(net::encode_message(net::msg::refuse{l.reason().message}));
  std::vector<bool> chunks;
  while (!q.empty()) {
    REQUIRE(l.next_close_step(false, false, q.empty()) == net::close_step::write);
    chunks.push_back(q.front_is_chunk());
    while (!q.consume(q.pending().size())) {
    }
  }
  CHECK(chunks == std::vector<bool>{true, false, false, false});  // the begun chunk, ACK, PING, REFUSE
  CHECK(l.next_close_step(false, false, true) == net::close_step::shutdown);
}

TEST_CASE("session_lifecycle: the watchdog") {
  net::session_config c;
  c.handshake_timeout = 1000ms;
  c.idle_timeout = 400ms;
  c.write_timeout = 300ms;
  c.heartbeat_interval = 100ms;
  c.shutdown_timeout = 200ms;
  const net::session_activity a{t0, t0, t0, t0};

  SUBCASE("handshake deadline from start") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    CHECK(l.check(c, a, false, true, t0 + 999ms) == net::watchdog_verdict::ok);
    CHECK(l.check(c, a, false, true, t0 + 1000ms) == net::watchdog_verdict::handshake_timeout);
    CHECK(net::deadline_error(net::watchdog_verdict::handshake_timeout, c).code == net::errc::handshake_timeout);
  }
  SUBCASE("the hub waits for HELLO no longer than for the handshake, counted from the connection") {
    net::session_lifecycle l(net::role::hub);
    l.start();
    l.handshake_done();
    REQUIRE(l.state() == net::session_state::greeting);
    const net::session_activity talking{t0, t0 + 990ms, t0 + 990ms, t0 + 990ms};  // bytes, but no HELLO
    CHECK(l.check(c, talking, false, true, t0 + 999ms) == net::watchdog_verdict::ok);
    CHECK(l.check(c, talking, false, true, t0 + 1000ms) == net::watchdog_verdict::hello_timeout);
    CHECK(l.check(c, a, false, true, t0 + 400ms) == net::watchdog_verdict::idle_timeout);  // the idle deadline still holds
    CHECK(net::deadline_error(net::watchdog_verdict::hello_timeout, c).message == "no HELLO within 1000 ms of connecting");
    const auto h = net::message(net::msg::hello{.device_id = "pi-1"});
    REQUIRE(l.admit(h, "pi-1").ok());
    CHECK(l.check(c, talking, false, true, t0 + 1000ms) == net::watchdog_verdict::ok);
  }
  SUBCASE("open: heartbeat, write progress, idle peer") {
    auto l = open_agent();
    CHECK(l.check(c, a, false, true, t0 + 99ms) == net::watchdog_verdict::ok);
    CHECK(l.check(c, a, false, true, t0 + 100ms) == net::watchdog_verdict::ping);
    CHECK(l.check(c, a, false, false, t0 + 100ms) == net::watchdog_verdict::ok);  // something is queued anyway
    CHECK(l.check(c, a, true, false, t0 + 300ms) == net::watchdog_verdict::write_timeout);
    CHECK(l.check(c, a, false, true, t0 + 400ms) == net::watchdog_verdict::idle_timeout);
    const net::session_activity busy{t0, t0 + 350ms, t0 + 350ms, t0 + 350ms};
    CHECK(l.check(c, busy, true, false, t0 + 600ms) == net::watchdog_verdict::ok);  // progress, not completion
    CHECK(net::deadline_error(net::watchdog_verdict::idle_timeout, c).message == "no byte received for 400 ms");
    CHECK(net::deadline_error(net::watchdog_verdict::write_timeout, c).code == net::errc::write_timeout);
  }
  SUBCASE("closing: only the shutdown deadline counts") {
    auto l = open_agent();
    REQUIRE(l.close(why(net::errc::stopped), net::close_mode::graceful, t0 + 1s) == net::close_action::flush);
    CHECK(l.check(c, a, true, false, t0 + 1199ms) == net::watchdog_verdict::ok);
    CHECK(l.check(c, a, true, false, t0 + 1200ms) == net::watchdog_verdict::shutdown_timeout);
    (void)l.finish();
    CHECK(l.check(c, a, true, false, t0 + 1h) == net::watchdog_verdict::ok);
  }
  SUBCASE("it looks a quarter of the shortest deadline apart, within [5 ms, 1 s]") {
    CHECK(net::watchdog_period(c) == 25ms);
    net::session_config tiny = c;
    tiny.shutdown_timeout = 4ms;
    CHECK(net::watchdog_period(tiny) == 5ms);
    CHECK(net::watchdog_period(net::session_config{}) == 500ms);
  }
}

TEST_CASE("session_lifecycle: every state has a name") {
  for (int s = 0; s <= static_cast<int>(state::closed); ++s)
    CHECK(net::to_string(static_cast<state>(s)) != std::string_view("?"));
}
