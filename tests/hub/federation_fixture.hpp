// The hub service with in-process agents, over mutual TLS on 127.0.0.1: the fixture of tests/hub
// (hub_test, hostile_peer_test, operator_test). The hub runs as tessera-hub runs it, on an io_context of
// its own served by two threads (its state on its strand); the agents share another, run by the test's
// thread. Every agent and the hub log into vectors the tests read. What a test asks of the hub while
// it runs goes through on_hub() (its strand); after run() the hub may be read directly.
//
//   testing::temp_dir dir("hub-service");
//   tessera::hub_testing::federation f(dir);
//   f.start_hub(f.hub_config({{"rounds", 2}}));
//   f.start_agent(test::test_pki::get().dev_a, f.data_for("dev-a", 400));
//   f.run();                                     // until the hub stops
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "../core/test_files.hpp"
#include "../crypto/test_pki.hpp"
#include "support/scripted_agent.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/hub/hub.hpp"

namespace tessera::hub_testing {

using namespace std::chrono_literals;

// 4 classes of 4×4 "images", a bright quadrant per class: learnable in a few rounds.
inline void write_data(const std::string& images, const std::string& labels, std::int64_t n, std::uint64_t seed,
                std::uint64_t classes = 4) {
  core::rng r(seed);
  std::vector<std::uint8_t> px, lab;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto cls = static_cast<std::uint8_t>(r.below(classes));
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x)
        px.push_back(static_cast<std::uint8_t>(((y / 2) * 2 + x / 2 == cls ? 200 : 20) + r.below(40)));
    lab.push_back(cls);
  }
  REQUIRE(core::write_idx_images(images, 4, 4, px).ok());
  REQUIRE(core::write_idx_labels(labels, lab).ok());
}

struct device_files {
  std::string images, labels;
};

// A hub (on two threads) and agents (on the test's); run() drives them until the hub stops (or a deadline).
class federation {
 public:
  explicit federation(const testing::temp_dir& dir) : dir_(dir) {
    write_data(dir.file("val-images"), dir.file("val-labels"), 300, 99);
  }

  hub::hub_config hub_config(nlohmann::json extra = nlohmann::json::object()) const {
    const auto& pki = test::test_pki::get();
    nlohmann::json j = {{"listen", "127.0.0.1:0"},
                        {"tls", {{"ca", pki.ca.cert.string()}, {"cert", pki.hub.cert.string()},
                                 {"key", pki.hub.key.string()}, {"crl", pki.ca.crl.string()}}},
                        {"model", {{"inputs", 16}, {"hidden", {32, 32}}, {"outputs", 4}}},
                        {"rounds", 3}, {"local_steps", 10}, {"batch", 8}, {"min_width", 4}, {"lr", 0.05},
                        {"min_devices", 2}, {"max_devices", 2}, {"device_wait_s", 30}, {"round_deadline_s", 30},
                        {"heartbeat_s", 0.5}, {"idle_timeout_s", 5},
                        {"validation", {{"format", "idx"}, {"features", dir_.file("val-images")}, {"labels", dir_.file("val-labels")}}},
                        {"checkpoint_dir", dir_.file("ckpt")}, {"metrics", dir_.file("metrics.jsonl")},
                        {"output", dir_.file("model.safetensors")}};
    j.update(extra);
    auto c = hub::parse_hub_config(j, "hub.json");
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
    return c.value();
  }

  device_files data_for(const std::string& id, std::int64_t n, std::uint64_t classes = 4) {
    device_files f{dir_.file(id + "-images"), dir_.file(id + "-labels")};
    write_data(f.images, f.labels, n, std::hash<std::string>{}(id), classes);
    return f;
  }

  void start_hub(const hub::hub_config& config) {
    auto h = hub::hub_service::create(hub_io_, config, [this](core::log_level, const std::string& line) {
      const std::lock_guard lock(hub_log_mutex_);
      hub_log_.push_back(line);
    });
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.error().message));
    hub_ = std::move(h.value());
    hub_->on_round([this](const rounds::round_metrics& m) {
      const std::lock_guard lock(hub_log_mutex_);
      rounds_.push_back(m);
    });
    auto port = hub_->start();
    REQUIRE(port.ok());
    port_ = port.value();
  }

  // A protocol-level device (tests/support/scripted_agent.hpp) with `cert`'s identity; set its hooks,
  // then start() it.
  testing::scripted_agent& start_scripted(const crypto::cert_files& cert, testing::scripted_agent_config config) {
    const auto& pki = test::test_pki::get();
    tls_.push_back(std::make_unique<crypto::tls_context>(pki.agent_tls(cert, "127.0.0.1")));
    config.client = {.host = "127.0.0.1", .port = port_, .backoff_initial = 20ms, .backoff_max = 200ms, .jitter = 0.5, .seed = 1};
    scripted_.push_back(std::make_unique<testing::scripted_agent>(io_, *tls_.back(), std::move(config)));
    return *scripted_.back();
  }

  edge::agent& start_agent(const crypto::cert_files& cert, const device_files& data, std::size_t budget_bytes = 16u << 20,
                           double validation_fraction = 0) {
    const auto& pki = test::test_pki::get();
    edge::agent_config c;
    c.hub = {"127.0.0.1", port_};
    c.tls = {.ca_cert = pki.ca.cert, .cert = cert.cert, .key = cert.key, .hub_name = "127.0.0.1"};
    c.data.source = {.format = core::data_format::idx, .features = data.images, .labels = data.labels};
    c.data.validation_fraction = validation_fraction;
    c.budget_bytes = budget_bytes;
    c.backoff_initial = 20ms;
    c.backoff_max = agent_backoff_max_;
    c.link.heartbeat_s = 0.5;
    c.link.idle_timeout_s = 5;
    if (agent_tweak_) agent_tweak_(c);
    auto a = edge::agent::create(io_, c, [this](core::log_level, const std::string& line) { agent_log_.push_back(line); });
    REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.error().message));
    agents_.push_back(std::move(a.value()));
    agents_.back()->start();
    return *agents_.back();
  }

  // Runs until the hub has stopped and the agents have let go; fails after `limit`. The agents get a
  // moment after the hub stops to read what it flushed (the last RESULT) before they stop too.
  void run(std::chrono::seconds limit = 60s) {
    boost::asio::steady_timer deadline(io_, limit), grace(io_);
    bool timed_out = false;
    deadline.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      timed_out = true;
      on_hub([this] { hub_->stop(); });
    });
    hub_->on_stopped([this, &deadline, &grace] {
      boost::asio::post(io_, [this, &deadline, &grace] {
        deadline.cancel();
        grace.expires_after(300ms);
        grace.async_wait([this](const boost::system::error_code&) {
          for (auto& a : agents_) a->stop();
          for (auto& a : scripted_) a->stop();
        });
      });
    });
    {
      std::vector<std::jthread> hub_threads;
      for (int i = 0; i < 2; ++i) hub_threads.emplace_back([this] { hub_io_.run(); });
      io_.run();
    }  // joined: the hub's sessions are closed, its io_context out of work
    io_.restart();
    hub_io_.restart();
    REQUIRE_FALSE(timed_out);
  }

  // Runs `f` on the hub's strand, as a call from another thread must while the hub runs.
  void on_hub(std::function<void()> f) { boost::asio::post(hub_->executor(), std::move(f)); }

  [[nodiscard]] hub::hub_service& hub() { return *hub_; }
  [[nodiscard]] boost::asio::io_context& io() { return io_; }
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] const std::vector<rounds::round_metrics>& recorded() const { return rounds_; }
  // Everything the hub and the agents logged, for a failed check.
  [[nodiscard]] std::string logs() const {
    const std::lock_guard lock(hub_log_mutex_);
    std::string out = "--- hub ---\n";
    for (const auto& l : hub_log_) out += l + "\n";
    out += "--- agents ---\n";
    for (const auto& l : agent_log_) out += l + "\n";
    return out;
  }
  [[nodiscard]] std::size_t hub_lines_with(std::string_view needle) const {
    const std::lock_guard lock(hub_log_mutex_);
    return lines_with(hub_log_, needle);
  }
  [[nodiscard]] std::size_t agent_lines_with(std::string_view needle) const { return lines_with(agent_log_, needle); }
  // The longest backoff of the agents started after this (200 ms unless set).
  void set_agent_backoff_max(std::chrono::milliseconds most) { agent_backoff_max_ = most; }
  // Changes the configuration of the agents started after this (their privacy policy, say).
  void configure_agents(std::function<void(edge::agent_config&)> tweak) { agent_tweak_ = std::move(tweak); }
  void clear() {
    agents_.clear();
    hub_.reset();
    rounds_.clear();
  }

 private:
  const testing::temp_dir& dir_;
  boost::asio::io_context io_, hub_io_;
  std::unique_ptr<hub::hub_service> hub_;
  std::uint16_t port_ = 0;
  std::vector<std::unique_ptr<edge::agent>> agents_;
  std::vector<std::unique_ptr<crypto::tls_context>> tls_;
  std::vector<std::unique_ptr<testing::scripted_agent>> scripted_;
  mutable std::mutex hub_log_mutex_;  // the hub's log and rounds: written on its threads
  std::vector<std::string> hub_log_, agent_log_;
  std::vector<rounds::round_metrics> rounds_;
  std::chrono::milliseconds agent_backoff_max_ = 200ms;
  std::function<void(edge::agent_config&)> agent_tweak_;

  static std::size_t lines_with(const std::vector<std::string>& log, std::string_view needle) {
    std::size_t n = 0;
    for (const auto& l : log) n += l.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

}  // namespace tessera::hub_testing
