// The benchmark's devices: N scripted agents (tests/support) in this process, each with its own device
// certificate and TLS context, dealt round-robin over T io_contexts of one thread each. They speak the
// protocol as tessera-edge does (HELLO, WELCOME, ASSIGN + download, UPDATE + upload, RESULT; resuming
// after a broken link) but do not train: each sends its downloaded subnet straight back as its update,
// declaring every assigned step of batch 32 (no hashing: the figures are the hub's).
//
// What the fleet observes of the hub: when the last agent got its first WELCOME (the hub plans round 1
// at once) with the hub's CPU time and VmHWM at that moment, and per round when the first ASSIGN reached
// any agent.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "options.hpp"
#include "support/scripted_agent.hpp"
#include "support/test_pki.hpp"

namespace tessera::bench::hub_scale {

// What the agents share; each agent's own state is touched only by its io_context's thread.
struct fleet_stats {
  explicit fleet_stats(std::size_t rounds) : first_assign_ns(rounds + 1) {}
  std::atomic<std::size_t> welcomed{0};  // agents past their first WELCOME
  std::atomic<std::int64_t> all_welcomed_ns{0};
  std::atomic<double> welcomed_cpu_s{-1};
  std::atomic<long> welcomed_hwm_kib{-1};
  std::atomic<std::uint64_t> links_lost{0}, connect_failures{0};  // before an agent's last RESULT
  std::atomic<std::size_t> reports{0};
  // Per round (1-based): when its first ASSIGN reached any agent, i.e. when the hub, done planning,
  // had its first message out.
  std::vector<std::atomic<std::int64_t>> first_assign_ns;

  void note_assign(std::uint64_t round);
  void report(const std::string& text);  // the first few problems are printed, the rest only counted
};

// Sums over the agents once they are stopped.
struct fleet_totals {
  std::uint64_t assignments = 0, accepted = 0, rejected = 0, refused_here = 0, hub_refusals = 0;
};

class agent_fleet {
 public:
  explicit agent_fleet(const options& o);
  ~agent_fleet();
  agent_fleet(const agent_fleet&) = delete;
  agent_fleet& operator=(const agent_fleet&) = delete;

  // A throwaway PKI in `dir` (CA, the hub's certificate for 127.0.0.1, one certificate per agent) and
  // every agent's TLS context. Empty on success, else why not.
  [[nodiscard]] std::string prepare(const std::filesystem::path& dir);
  [[nodiscard]] const testing::test_pki& pki() const { return *pki_; }
  // Connects every agent to the hub on `port`, whose process is `hub_pid`.
  void start(std::uint16_t port, pid_t hub_pid);
  // Stops the agents (they would redial a hub that is gone), lets their io_contexts drain for up to
  // 10 s, joins the threads. Returns this process's CPU seconds from start() to now.
  double stop();

  [[nodiscard]] const fleet_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] fleet_totals totals() const;

 private:
  [[nodiscard]] testing::scripted_agent_config agent_config(std::size_t i, std::uint16_t port) const;
  void hook(testing::scripted_agent& a);

  options o_;
  pid_t hub_pid_ = 0;
  fleet_stats stats_;
  std::optional<testing::test_pki> pki_;
  std::vector<std::string> ids_;
  std::vector<crypto::tls_context> tls_;
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::unique_ptr<testing::scripted_agent>> agents_;  // after ios_: destroyed before them
  std::vector<std::thread> threads_;
  std::atomic<std::size_t> io_running_{0};
  double cpu_at_start_ = 0;
};

}  // namespace tessera::bench::hub_scale
