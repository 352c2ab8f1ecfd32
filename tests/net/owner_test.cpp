// A session whose owner lives on another thread (net::session::deliver_on, the hub's strand): its
// handlers run there, reading waits for each message's handler (so what it calls on the session takes
// effect before the next frame), the wait is no silence of the peer, and abandon() ends a session as a
// broken link does.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "net_test_util.hpp"

using namespace tessera::test;

namespace {

std::vector<std::byte> owner_test_bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

// The owner: a strand of an io_context run by a thread of its own, as the hub's.
struct owner_thread {
  asio::io_context io;
  asio::strand<asio::io_context::executor_type> strand = asio::make_strand(io);
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::jthread thread{[this] { io.run(); }};

  void join() {
    work.reset();
    if (thread.joinable()) thread.join();
  }
};

// An agent welcomed by `hub`, whose session (`held`) delivers to `owner`; with `closed_on_owner`, its
// on_closed records the reason as the fixture's does and counts whether it ran on the owner's strand.
std::shared_ptr<agent_probe> welcomed_agent(owner_thread& owner, hub_fixture& hub, std::shared_ptr<net::session>& held,
                                            std::atomic<int>* closed_on_owner = nullptr) {
  hub.extra = [&owner, &hub, &held, closed_on_owner](const std::shared_ptr<net::session>& s) {
    s->deliver_on(owner.strand);
    if (closed_on_owner != nullptr)
      s->on_closed([&owner, &hub, closed_on_owner](const core::error& e) {
        *closed_on_owner += owner.strand.running_in_this_thread() ? 1 : 0;
        hub.closes.push_back(e);
      });
    held = s;
  };
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return agent->welcomed; }));
  REQUIRE(held);
  return agent;
}

}  // namespace

TEST_CASE("session owner: an UPDATE and its blob in one burst arrive whole while the owner's thread is busy past the idle deadline") {
  owner_thread owner;  // outlives the hub's sessions: their last handlers are posted to it
  hub_fixture hub;
  std::atomic<int> received{0}, on_owner{0}, off_owner{0};
  hub.extra = [&](const std::shared_ptr<net::session>& s) {
    s->deliver_on(owner.strand);
    s->on_blob_received([&](const std::shared_ptr<net::incoming_transfer>&) {
      ++(owner.strand.running_in_this_thread() ? on_owner : off_owner);
      ++received;
    });
  };
  const auto up = owner_test_bytes((1u << 20) + 777, 3);
  auto up_t = std::make_shared<net::outgoing_transfer>(9, up);
  bool up_sent = false;
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a", fast_config(),
                           [&](agent_probe& probe, const net::message& m) {
                             if (!std::holds_alternative<net::msg::welcome>(m)) return;
                             // The owner is busy for 600 ms (idle_timeout is 400): the UPDATE's handler,
                             // which registers the blob, waits behind it while the chunks are on the wire.
                             asio::post(owner.strand, [] { std::this_thread::sleep_for(600ms); });
                             probe.s->send(net::msg::update{.round = 1, .examples = 10, .steps = 3, .loss = 0.1, .transfer = 9,
                                                            .size = up_t->size(), .blob_codec = net::codec::f32,
                                                            .sha256 = up_t->sha256()});
                             probe.s->send_blob(up_t);
                           });
  agent->s->on_blob_sent([&](const std::shared_ptr<net::outgoing_transfer>&) { up_sent = true; });
  const bool done = run_until(hub.io, [&] { return received.load() == 1 && up_sent; }, 5000ms);
  const bool agent_closed = agent->closed.has_value();
  agent->s->close();
  run_until(hub.io, [&] { return agent->closed.has_value(); }, 1000ms);
  hub.server->stop();
  run_until(hub.io, [&] { return hub.server->session_count() == 0; }, 1000ms);
  owner.join();  // from here the owner's writes are visible to this thread
  REQUIRE(done);
  CHECK_FALSE(agent_closed);
  CHECK(on_owner.load() == 1);
  CHECK(off_owner.load() == 0);
  CHECK(hub.upload_buf == up);
  REQUIRE(hub.hellos.size() == 1);
  REQUIRE(hub.closes.size() == 1);
  CHECK(hub.closes.front().code != net::errc::idle_timeout);  // the wait was not the peer's silence
}

TEST_CASE("session owner: abandon() cuts the session at once; its on_closed comes on the owner's thread") {
  owner_thread owner;
  hub_fixture hub;
  std::shared_ptr<net::session> held;
  std::atomic<int> closed_on_owner{0};
  auto agent = welcomed_agent(owner, hub, held, &closed_on_owner);
  held->abandon(net::errc::replaced, "a newer connection");
  CHECK(run_until(hub.io, [&] { return held->ended() && agent->closed.has_value(); }, 2000ms));
  const bool ended = held->ended();
  held.reset();
  hub.server->stop();
  run_until(hub.io, [&] { return hub.server->session_count() == 0; }, 1000ms);
  owner.join();
  CHECK(ended);
  CHECK(closed_on_owner.load() == 1);
  REQUIRE(hub.closes.size() == 1);
  CHECK(hub.closes.front().code == net::errc::replaced);
  // No REFUSE, no close_notify: the agent saw its link end, as a broken one does.
  REQUIRE(agent->closed.has_value());
  for (const auto& m : agent->messages) CHECK_FALSE(std::holds_alternative<net::msg::refuse>(m));
}

TEST_CASE("session owner: a probe while reading waits for the owner is not answered 'no': it waits for the PONG behind the pause") {
  owner_thread owner;
  hub_fixture hub;
  std::shared_ptr<net::session> held;
  auto agent = welcomed_agent(owner, hub, held);
  // The owner is busy for 900 ms; the agent's next message waits for it, and reading with it.
  asio::post(owner.strand, [] { std::this_thread::sleep_for(900ms); });
  agent->s->send(net::msg::evaluation{.round = 1, .transfer = 1, .examples = 1, .loss_sum = 0.5, .correct = 1, .masked = {}});
  run_until(hub.io, [] { return false; }, 100ms);
  std::optional<bool> answered;
  const auto asked = std::chrono::steady_clock::now();
  held->probe(300ms, [&](bool yes) { answered = yes; });  // runs on the session's strand: this thread's io
  REQUIRE(run_until(hub.io, [&] { return answered.has_value(); }, 3000ms));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  held.reset();
  hub.server->stop();
  run_until(hub.io, [&] { return hub.server->session_count() == 0; }, 1000ms);
  owner.join();
  MESSAGE("the probe answered after " << waited << " s (the owner was busy 0.8 s more)");
  CHECK(*answered);
  CHECK(waited >= 0.5);  // not before reading went on
}
