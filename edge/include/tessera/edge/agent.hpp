// tessera/edge/agent.hpp — the device agent as a long-lived service: connect, train, upload, repeat.
//
// The agent dials the hub over mutual TLS (net::client: reconnects with capped exponential backoff and
// jitter), says HELLO (its id from its certificate, the memory it offers for training, its example
// count, its codecs, and what it holds of an assignment), and then serves assignments:
//
//   ASSIGN ──▶ check it (the task parses, inputs match the data, codec known, batch within the data
//   │          reader's bound, and bytes_needed fits the budget: otherwise REFUSE with the reason)
//   ▼
//   download ──▶ straight into the training arena (f32) or its staging (f16/q8); resumes from the
//   │            last acknowledged byte after a reconnect
//   ▼
//   train ──▶ on a worker thread, local_steps SGD steps on the device's own batches; the link keeps
//   │         its heartbeats meanwhile
//   ▼
//   upload ──▶ UPDATE + the trained subnet in the assignment's codec; resumes after a reconnect
//   ▼
//   RESULT ──▶ accepted or rejected (logged); the arena is released until the next assignment
//
// Before round 1 of a model that standardizes its inputs the hub asks for STATS, twice: the agent
// measures its training examples on the worker thread (core/data/fed_stats.hpp: counts and sums, then
// squared deviations about the fleet's mean) and answers STATS_REPLY. Data that does not suit the
// model (feature count, labels) is refused instead, once, with the reason.
//
// A newer ASSIGN supersedes the current one (training is cancelled within one step). Nothing the hub
// sends can crash the agent: every field is bounded before use and a bad assignment is refused.
// Run io.run() on one thread; training has its own.
//
//   auto cfg = core::load_config("agent.json", overrides, edge::read_agent_config).value();
//   auto a = edge::agent::create(io, cfg, log).value();
//   a->start();
//   io.run();
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "tessera/core/config/log.hpp"
#include "tessera/core/data/fed_stats.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/edge/agent_config.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/job.hpp"
#include "tessera/net/client.hpp"
#include "tessera/net/task.hpp"

namespace tessera::edge {

struct agent_stats {
  std::int64_t assignments = 0, accepted = 0, rejected = 0, refused = 0, cancelled = 0, evaluations = 0;
  std::uint64_t bytes_down = 0, bytes_up = 0;
};

class agent {
 public:
  [[nodiscard]] static core::result<std::unique_ptr<agent>> create(boost::asio::io_context& io, const agent_config& config,
                                                                   core::log_sink log);
  ~agent();
  agent(const agent&) = delete;
  agent& operator=(const agent&) = delete;

  void start();
  // Cancels training, closes the link; io.run() returns once the work is drained.
  void stop();
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  [[nodiscard]] const std::string& device_id() const noexcept { return id_; }
  [[nodiscard]] const agent_stats& stats() const noexcept { return stats_; }
  // Bytes offered to the hub for the training arena (the budget less the data reader's buffers).
  [[nodiscard]] std::size_t arena_budget() const noexcept { return arena_budget_; }

 private:
  agent(boost::asio::io_context& io, const agent_config& config, core::log_sink log);
  void log(core::log_level level, const std::string& text) const;
  void log_link_ended(const core::error& why, std::chrono::milliseconds next);
  void attach(const std::shared_ptr<net::session>& s);
  void on_ready(const std::shared_ptr<net::session>& s);
  void on_welcome(const std::shared_ptr<net::session>& s);
  void on_assign(const net::msg::assign& a);
  void on_downloaded(const std::shared_ptr<net::incoming_transfer>& in);
  void on_trained(std::uint64_t generation, core::result<core::local_training_report> report, const net::digest& sha);
  void on_result(const net::msg::result& r);
  void on_evaluated(std::uint64_t generation, core::result<net::msg::evaluation> score);
  void on_stats(const net::msg::stats& q);
  // Secure aggregation's steps (secure_round.hpp).
  void on_secure(const net::message& m);
  void send_masked();
  // A statistics pass as measured (pass 1's sums or pass 2's spread).
  struct measurement {
    core::stats_sums sums;
    core::stats_spread spread;
  };
  void on_measured(std::uint64_t generation, const net::msg::stats& q, core::result<measurement> measured);
  // A sum under secure aggregation (statistics, an evaluation): its vector masked once the inbox is in,
  // and sent in its message.
  void send_masked_sum();
  // An evaluation under secure aggregation: its protocol begins beside the job.
  void start_masked_evaluation(const net::msg::assign& a);
  // Stops the job in progress: its worker is joined, the link lets go of its transfers, and its arena
  // is released as soon as nothing holds it (a CHUNK being read into it or written from it).
  void cancel_job();
  // Reserves and starts an assignment; only when no earlier job's arena is alive.
  void start_assignment(const net::msg::assign& a);
  // The superseded job's arena is gone: the assignment that waited for it starts.
  void on_job_released();
  // REFUSE{code, reason} for the assignment of `round`, logged.
  void refuse_job(std::uint64_t round, const core::error& why);
  // REFUSE{code, "<what>: reason"}, logged; the hub closes the link and the agent dials again.
  void refuse(const std::string& what, const core::error& why);

  boost::asio::io_context& io_;
  agent_config config_;
  core::log_sink log_;
  std::string id_;
  crypto::tls_context tls_;
  std::unique_ptr<device_data> data_;
  std::size_t arena_budget_ = 0;
  std::shared_ptr<net::client> client_;
  std::shared_ptr<net::session> session_;  // the current link, once ready
  std::shared_ptr<job> job_;
  // One arena at a time: a superseded job until its last holder lets go, and the newest assignment that
  // waits for it (a later ASSIGN replaces it).
  std::weak_ptr<job> retiring_;
  std::optional<net::msg::assign> waiting_;
  std::shared_ptr<int> lifeline_ = std::make_shared<int>(0);  // release callbacks outliving the agent do nothing
  std::unique_ptr<secure_identity> secure_;        // null: secure_aggregation off
  std::unique_ptr<privacy_budget> budget_;         // null: no privacy.max_epsilon
  std::unique_ptr<secure_round> unmasking_;        // a round's protocol after its RESULT, until SECAGG_UNMASK
  // A sum under secure aggregation outside a training round (core/data/stats_vector.hpp): a statistics
  // pass (its protocol goes by round 0) or an evaluation (by its round). What it is for the log, the
  // protocol, what was asked (statistics) or, with pass 0, the score's scale (an evaluation: its
  // max_examples and bounds {loss_bound}), the message that carries the masked vector, and the vector
  // once measured.
  struct masked_sum {
    std::string label;
    std::unique_ptr<secure_round> round;
    net::msg::stats request;
    std::function<net::message(std::vector<std::byte>)> reply;
    std::optional<std::vector<float>> values;
  };
  std::optional<masked_sum> summing_;
  std::uint64_t generation_ = 0;
  std::thread worker_;
  std::atomic<bool> cancel_{false};
  agent_stats stats_;
  bool stopped_ = false;
  bool leaving_ = false;  // exit_after_rounds reached: exits after the hub's evaluation or the link's end
  // The hub said its run is finished (REFUSE run_finished) and no link came up since; said: logged.
  enum class run_end { none, told, said } run_over_ = run_end::none;
};

}  // namespace tessera::edge
