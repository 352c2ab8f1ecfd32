#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace tessera::bench::hub_scale {
namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::vector<round_row> read_metrics(const std::filesystem::path& metrics) {
  std::vector<round_row> rows;
  std::ifstream in(metrics);
  std::string text;
  while (std::getline(in, text)) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    round_row r;
    r.round = j.value("round", std::int64_t{0});
    r.devices = j.value("devices", std::uint64_t{0});
    r.groups = j.value("groups", std::uint64_t{0});
    r.bytes_down = j.value("bytes_down", std::uint64_t{0});
    r.bytes_up = j.value("bytes_up", std::uint64_t{0});
    r.stragglers = j.value("stragglers", std::uint64_t{0});
    r.refused = j.value("refused", std::uint64_t{0});
    r.rejected = j.value("rejected", std::uint64_t{0});
    r.hub_seconds = j.value("seconds", 0.0);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

std::vector<round_row> collect_rounds(const std::filesystem::path& metrics, const std::vector<hub_process::line>& lines,
                                      const fleet_stats& stats) {
  std::vector<round_row> rows = read_metrics(metrics);
  std::vector<hub_process::line> round_lines;
  for (const auto& l : lines)
    if (l.text.rfind("round ", 0) == 0) round_lines.push_back(l);
  const std::int64_t welcomed_ns = stats.all_welcomed_ns.load();
  const double welcomed_cpu_s = stats.welcomed_cpu_s.load();
  for (std::size_t i = 0; i < rows.size() && i < round_lines.size(); ++i) {
    const std::int64_t from_ns = i == 0 ? welcomed_ns : round_lines[i - 1].at_ns;
    const double from_cpu = i == 0 ? welcomed_cpu_s : round_lines[i - 1].cpu_s;
    if (from_ns != 0) rows[i].wall_s = seconds_between(from_ns, round_lines[i].at_ns);
    const auto r = static_cast<std::size_t>(rows[i].round);
    if (from_ns != 0 && r < stats.first_assign_ns.size() && stats.first_assign_ns[r].load() != 0)
      rows[i].plan_s = seconds_between(from_ns, stats.first_assign_ns[r].load());
    if (round_lines[i].hwm_kib >= 0) rows[i].hwm_mib = static_cast<double>(round_lines[i].hwm_kib) / 1024.0;
    if (from_cpu >= 0 && round_lines[i].cpu_s >= 0) rows[i].cpu_s = round_lines[i].cpu_s - from_cpu;
  }
  return rows;
}

void print_header(const options& o, std::size_t params, double setup_s) {
  std::printf("bench_hub_scale: %zu agents, %lld rounds of IST, model %s (%zu parameters, %.2f MiB in f32), "
              "min_width %lld, %lld local step(s) of batch %d, %zu agent thread(s), hub io_threads %zu (0: one per core), %u cores\n",
              o.agents, static_cast<long long>(o.rounds), widths_text(o.widths).c_str(), params,
              mib(static_cast<double>(params) * 4), static_cast<long long>(o.min_width), static_cast<long long>(o.steps),
              k_batch, o.threads, o.hub_threads, std::thread::hardware_concurrency());
  std::printf("  setup: CA, hub and %zu device certificates and agent TLS contexts in %.2f s\n", o.agents, setup_s);
  std::fflush(stdout);
}

void print_rounds(const std::vector<round_row>& rows) {
  std::printf("\n| round | devices | groups | wall s | to 1st ASSIGN s | hub: plan to checkpoint s | hub CPU s | hub VmHWM MiB | "
              "MB down | MB up | stragglers / refused / rejected |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %lld | %llu | %llu | %.3f | %.3f | %.3f | %.2f | %.1f | %.2f | %.2f | %llu / %llu / %llu |\n",
                static_cast<long long>(r.round), static_cast<unsigned long long>(r.devices),
                static_cast<unsigned long long>(r.groups), r.wall_s, r.plan_s, r.hub_seconds, r.cpu_s, r.hwm_mib,
                static_cast<double>(r.bytes_down) / 1e6, static_cast<double>(r.bytes_up) / 1e6,
                static_cast<unsigned long long>(r.stragglers), static_cast<unsigned long long>(r.refused),
                static_cast<unsigned long long>(r.rejected));
}

namespace {

// Means, maxima and sums over the rounds.
struct round_sums {
  double wall = 0, wall_max = 0, hub_s = 0, hub_s_max = 0, plan = 0, cpu = 0, down = 0, up = 0;
  std::size_t complete = 0;  // rounds with every device's update accepted
  double n = 1;              // rows, at least 1 so that means of nothing are 0
};

round_sums sum_rounds(const std::vector<round_row>& rows, std::size_t agents) {
  round_sums s;
  for (const auto& r : rows) {
    s.wall += r.wall_s;
    s.wall_max = std::max(s.wall_max, r.wall_s);
    s.hub_s += r.hub_seconds;
    s.hub_s_max = std::max(s.hub_s_max, r.hub_seconds);
    s.plan += std::max(r.plan_s, 0.0);
    s.cpu += std::max(r.cpu_s, 0.0);
    s.down += static_cast<double>(r.bytes_down);
    s.up += static_cast<double>(r.bytes_up);
    if (r.devices == agents && r.stragglers == 0 && r.refused == 0 && r.rejected == 0) ++s.complete;
  }
  s.n = rows.empty() ? 1.0 : static_cast<double>(rows.size());
  return s;
}

void print_connect_and_hub(const run_facts& f, const round_sums& s) {
  const std::int64_t welcomed_ns = f.stats.all_welcomed_ns.load();
  if (welcomed_ns != 0)
    std::printf("connect: %zu agents through mutual TLS 1.3 + HELLO/WELCOME in %.2f s after the hub started; hub CPU %.2f s, "
                "VmHWM %.1f MiB then\n",
                f.o.agents, seconds_between(f.spawned_ns, welcomed_ns), f.stats.welcomed_cpu_s.load(),
                static_cast<double>(f.stats.welcomed_hwm_kib.load()) / 1024.0);
  const rusage& ru = f.hub_usage;
  const double hub_cpu = cpu_seconds(ru);
  const double hub_user = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6;
  std::printf("hub peak RSS: %.1f MiB (wait4 ru_maxrss)\n", static_cast<double>(ru.ru_maxrss) / 1024.0);  // Linux: KiB
  std::printf("hub CPU: %.2f s total (user %.2f, system %.2f); rounds: %.2f s = %.3f s per round\n", hub_cpu, hub_user,
              hub_cpu - hub_user, s.cpu, s.cpu / s.n);
  std::printf("round wall time (between the hub's progress lines): mean %.3f s, max %.3f s; planning to the first ASSIGN: "
              "mean %.3f s; the hub's own seconds (planning to checkpoint): mean %.3f s, max %.3f s\n",
              s.wall / s.n, s.wall_max, s.plan / s.n, s.hub_s / s.n, s.hub_s_max);
}

}  // namespace

bool print_summary(const run_facts& f) {
  const std::size_t per_round = f.o.cohort > 0 ? std::min(f.o.cohort, f.o.agents) : f.o.agents;  // each round's cohort
  const round_sums s = sum_rounds(f.rows, per_round);
  std::printf("\nagents %zu (cohorts of %zu), rounds completed %zu of %lld with every update accepted (hub exit: %s)\n", f.o.agents,
              per_round, s.complete, static_cast<long long>(f.o.rounds), f.timed_out ? "killed at the deadline" : f.hub_exit.c_str());
  std::printf("model %s: %zu parameters, %.2f MiB f32; per device %.1f KB each way\n", widths_text(f.o.widths).c_str(), f.params,
              mib(static_cast<double>(f.params) * 4), f.rows.empty() ? 0.0 : s.down / s.n / static_cast<double>(per_round) / 1e3);
  print_connect_and_hub(f, s);
  std::printf("bytes per round: %.2f MB down + %.2f MB up (blob payload, all devices)\n", s.down / s.n / 1e6, s.up / s.n / 1e6);
  double load[3] = {0, 0, 0};
  ::getloadavg(load, 3);
  std::printf("bench process (the %zu agents): %.2f s CPU during the run (%.2f s for setup), %.2f s wall; load average %.2f\n",
              f.o.agents, f.bench_run_cpu_s, f.setup_cpu_s, seconds_between(f.spawned_ns, f.exited_ns), load[0]);
  const fleet_totals& t = f.totals;
  std::printf("agents: %llu assignments, %llu accepted, %llu rejected, %llu refused here, %llu REFUSE from the hub, "
              "%llu links lost, %llu failed connects\n",
              static_cast<unsigned long long>(t.assignments), static_cast<unsigned long long>(t.accepted),
              static_cast<unsigned long long>(t.rejected), static_cast<unsigned long long>(t.refused_here),
              static_cast<unsigned long long>(t.hub_refusals), static_cast<unsigned long long>(f.stats.links_lost.load()),
              static_cast<unsigned long long>(f.stats.connect_failures.load()));
  const auto [log_warnings, log_errors] = count_log_problems(f.hub_log);
  std::printf("hub log: %zu warnings, %zu errors\n", log_warnings, log_errors);
  const bool every_update = s.complete == f.rows.size();
  return !f.timed_out && f.hub_exit_ok && every_update && s.complete == static_cast<std::size_t>(f.o.rounds) &&
         t.accepted == per_round * static_cast<std::uint64_t>(f.o.rounds);
}

}  // namespace tessera::bench::hub_scale
