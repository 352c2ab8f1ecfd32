// What bench_hub_scale prints: the run's header, a table row per round, and the summary. Every figure
// is measured (see hub_scale.cpp for what each column measures); none is derived by subtracting one
// clock's interval from another's.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "agent_fleet.hpp"
#include "hub_process.hpp"
#include "options.hpp"

namespace tessera::bench::hub_scale {

struct round_row {
  std::int64_t round = 0;
  std::uint64_t devices = 0, groups = 0, bytes_down = 0, bytes_up = 0, stragglers = 0, refused = 0, rejected = 0;
  double hub_seconds = 0;  // the hub's own: from the start of planning to after the checkpoint
  double wall_s = -1;      // from the previous round's line (round 1: the last WELCOME) to this one's
  double plan_s = -1;      // from the same start to the first ASSIGN at an agent
  double cpu_s = -1;       // the hub's CPU time over the wall interval
  double hwm_mib = -1;     // the hub's VmHWM at this round's line
};

// One row per line of the hub's metrics file, with the intervals between the hub's progress lines
// ("round N ...") and the fleet's observations.
[[nodiscard]] std::vector<round_row> collect_rounds(const std::filesystem::path& metrics, const std::vector<hub_process::line>& lines,
                                                    const fleet_stats& stats);

void print_header(const options& o, std::size_t params, double setup_s);
void print_rounds(const std::vector<round_row>& rows);

// Everything the summary reports, gathered after the hub exited and the agents stopped.
struct run_facts {
  const options& o;
  std::size_t params = 0;
  const std::vector<round_row>& rows;
  bool timed_out = false;
  std::string hub_exit;     // "status 0", "signal 9", ...
  bool hub_exit_ok = false;  // exited by itself with status 0
  rusage hub_usage{};
  std::int64_t spawned_ns = 0, exited_ns = 0;
  const fleet_stats& stats;
  fleet_totals totals;
  double bench_run_cpu_s = 0, setup_cpu_s = 0;
  std::filesystem::path hub_log;
};

// Prints the summary; true if every round completed with every agent's update accepted.
bool print_summary(const run_facts& f);

}  // namespace tessera::bench::hub_scale
