// The hub under measurement: tessera-hub as a child process, its configuration, and what /proc and
// wait4() say about it.
//
// Each line the hub prints is timestamped as it arrives (steady clock) and sampled with the hub's CPU
// time (utime + stime from /proc/<pid>/stat) and peak RSS (VmHWM from /proc/<pid>/status) at that
// moment; the lines are echoed as "  hub | ...". Its standard error goes to hub.log in the run's folder.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"
#include "support/child_process.hpp"
#include "support/test_pki.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::bench::hub_scale {

// Steady-clock nanoseconds.
[[nodiscard]] std::int64_t now_ns();
[[nodiscard]] inline double seconds_between(std::int64_t from_ns, std::int64_t to_ns) {
  return static_cast<double>(to_ns - from_ns) / 1e9;
}
// utime + stime of a live process in seconds, from /proc/<pid>/stat; -1 if it cannot be read.
[[nodiscard]] double proc_cpu_seconds(pid_t pid);
using testing::proc_status_kib;  // a field of /proc/<pid>/status in KiB (tests/support)
// utime + stime of a rusage, and of this process so far.
[[nodiscard]] double cpu_seconds(const rusage& ru);
[[nodiscard]] double self_cpu_seconds();

// Writes the hub's configuration for this run (every agent in every round, a checkpoint after each
// round, no validation, metrics to metrics.jsonl) as `dir`/hub.json; empty on success, else why not.
[[nodiscard]] std::string write_hub_config(const std::filesystem::path& dir, const options& o, const core::model_spec& spec,
                                           const testing::test_pki& pki);

class hub_process {
 public:
  struct line {
    std::int64_t at_ns = 0;  // when the benchmark read it
    std::string text;
    double cpu_s = -1;   // the hub's utime + stime then
    long hwm_kib = -1;   // its VmHWM then
  };

  // Starts `exe` with `dir`/hub.json and waits up to `limit` for the port in its first line. Empty on
  // success, else why not (the hub is stopped then).
  [[nodiscard]] std::string start(const std::string& exe, const std::filesystem::path& dir, std::chrono::milliseconds limit);
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  // The operator endpoint's port, from the same line (0 if it has none).
  [[nodiscard]] std::uint16_t http_port() const noexcept { return http_port_; }
  [[nodiscard]] std::int64_t started_ns() const noexcept { return started_ns_; }  // when it was spawned
  [[nodiscard]] pid_t pid() const noexcept { return pid_.load(); }
  [[nodiscard]] testing::child_process& process() { return *child_; }
  [[nodiscard]] std::vector<line> lines() const;
  [[nodiscard]] const std::filesystem::path& log() const noexcept { return log_; }

 private:
  void on_line(const std::string& text);

  std::unique_ptr<testing::child_process> child_;
  std::atomic<pid_t> pid_{0};  // set once start() has it; the first line may come before
  std::uint16_t port_ = 0, http_port_ = 0;
  std::int64_t started_ns_ = 0;
  std::filesystem::path log_;
  mutable std::mutex mutex_;
  std::vector<line> lines_;
};

// Lines of the hub's log tagged "warning: " and "error: ".
[[nodiscard]] std::pair<std::size_t, std::size_t> count_log_problems(const std::filesystem::path& log);
// The last `count` lines of the hub's log on standard error, for a failed run.
void print_log_tail(const std::filesystem::path& log, std::size_t count);

}  // namespace tessera::bench::hub_scale
