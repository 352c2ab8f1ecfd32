// bench_hub_scale — one real tessera-hub process against N lightweight agents on loopback, over mutual
// TLS 1.3: the hub's peak memory, its CPU time per round, and how long a round takes when the devices
// spend no time training (plan, dispatch, collect, aggregate, checkpoint: the hub's own share of a round).
//
// The program makes a throwaway PKI (CA, hub certificate for 127.0.0.1, one certificate per agent, through
// the library), writes a hub configuration (IST, min_devices = max_devices = N, a checkpoint after every
// round, no validation), starts tessera-hub as a child process and reads its port from its first line.
// The agents are tests/support's scripted agents on net::client, each with its own certificate and TLS
// context, all on one io_context and thread (--threads T: T of each, agents dealt round-robin). They
// speak the protocol as tessera-edge does but do not train: each sends its downloaded subnet straight
// back as its update (agent_fleet.hpp).
//
// The table, one row per round (every time is measured by one clock; none is a difference of others):
//   devices, groups, MB down, MB up, stragglers / refused / rejected
//                      the hub's metrics line for the round (MB: blob payload of all devices)
//   wall s             from the moment the benchmark read the hub's progress line of the previous round
//                      (round 1: the moment the last agent got its WELCOME, after which the hub plans at
//                      once) to the moment it read this round's line, which the hub prints after the
//                      checkpoint and the metrics line: the whole round, as seen from outside
//   to 1st ASSIGN s    from the same start to the moment the first ASSIGN of the round reached any agent:
//                      planning (subnets cut, encoded and hashed for every device) and one delivery
//   hub: plan to checkpoint s
//                      the hub's own "seconds" from its metrics file: its clock from the start of
//                      planning to after the checkpoint (dispatch, collection and aggregation between)
//   hub CPU s          the hub's utime + stime from /proc/<pid>/stat at this round's line, less the same
//                      at the start of the wall interval
//   hub VmHWM MiB      the hub's peak RSS so far (/proc/<pid>/status) at this round's line
// The summary adds the hub's peak RSS and total CPU time from wait4() when it exits after its last
// round (exact), the means and maxima of the columns above, and the agents' counts. Everything has a
// deadline: past --timeout the hub is killed and the run fails.
//
// With --scrape-ms MS, a thread GETs /metrics from the hub's operator endpoint every MS during the rounds
// (a monitoring system at that rate), and before the agents connect the benchmark measures the hub's CPU
// per scrape from 1000 scrapes back to back; run it with and without to compare the hub's CPU per round.
//
// With --cohort C, each round's devices are C drawn at random from the N agents (devices_per_round):
// the others stay connected and idle, which is what a fleet of N with cohorts of C costs the hub.
//
// --hub-threads H sets the hub's io_threads (its connections' threads; 0, the default: one per core).
//
//   bench_hub_scale [--hub PATH] [--agents 500] [--cohort 0] [--rounds 5] [--model 784-512-512-10] [--min-width 8]
//                   [--steps 1] [--threads 1] [--hub-threads 0] [--timeout 600] [--scrape-ms 0] [--keep]
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "agent_fleet.hpp"
#include "hub_process.hpp"
#include "options.hpp"
#include "report.hpp"
#include "scraper.hpp"
#include "support/wait.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::bench::hub_scale {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Raises the soft descriptor limit to the hard one (each agent holds a socket, and so does the hub,
// which inherits the limit) and warns if that is still too low.
void raise_fd_limit(std::size_t agents) {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return;
  if (l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &l) != 0) getrlimit(RLIMIT_NOFILE, &l);
  }
  if (l.rlim_cur != RLIM_INFINITY && l.rlim_cur < 2 * agents + 64)
    std::fprintf(stderr, "bench_hub_scale: warning: the descriptor limit is %llu; %zu agents need about %zu\n",
                 static_cast<unsigned long long>(l.rlim_cur), agents, 2 * agents + 64);
}

std::optional<core::model_spec> model_of(const options& o) {
  core::model_spec spec;
  spec.inputs = o.widths.front();
  spec.hidden.assign(o.widths.begin() + 1, o.widths.end() - 1);
  spec.outputs = o.widths.back();
  if (auto ok = core::validate(spec, "--model"); !ok) {
    std::fprintf(stderr, "bench_hub_scale: %s\n", ok.error().message.c_str());
    return std::nullopt;
  }
  return spec;
}

std::chrono::milliseconds until(steady::time_point deadline) {
  return std::max(0ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()));
}

int run(const options& o) {
  raise_fd_limit(o.agents);
  const auto started = steady::now();
  const auto deadline = started + std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
  const auto spec = model_of(o);
  if (!spec) return 2;
  const std::size_t params = core::param_count(spec->full_arch());
  std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-hub-scale-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "bench_hub_scale: cannot make a temporary folder: %s\n", std::strerror(errno));
    return 1;
  }
  const std::filesystem::path dir = tmpl;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "bench_hub_scale: %s (files kept in %s)\n", why.c_str(), dir.c_str());
    return 1;
  };

  agent_fleet fleet(o);
  if (auto e = fleet.prepare(dir / "pki"); !e.empty()) return fail(e);
  const double setup_s = std::chrono::duration<double>(steady::now() - started).count();
  const double setup_cpu_s = self_cpu_seconds();
  if (auto e = write_hub_config(dir, o, *spec, fleet.pki()); !e.empty()) return fail(e);
  print_header(o, params, setup_s);

  hub_process hub;
  if (auto e = hub.start(o.hub, dir, std::min(until(deadline), std::chrono::milliseconds(30s))); !e.empty()) {
    print_log_tail(dir / "hub.log", 20);
    return fail(e);
  }
  scraper scrapes;
  double idle_scrape_cpu_s = -1;
  if (o.scrape_ms > 0) {
    if (hub.http_port() == 0) return fail("the hub announced no operator endpoint to scrape");
    idle_scrape_cpu_s = idle_cpu_per_scrape(hub.pid(), hub.http_port(), 1000);
    if (idle_scrape_cpu_s < 0) return fail("a scrape of the idle hub failed");
    scrapes.start(hub.http_port(), std::chrono::milliseconds(static_cast<std::int64_t>(o.scrape_ms)));
  }
  fleet.start(hub.port(), hub.pid());
  // Until the hub exits after its last round, or the deadline.
  // The scraping ends with the line of the hub's second-to-last round, so that every scrape meets a
  // running hub (after its last round the hub closes its endpoint and exits at once: a scrape that met
  // that would be no failure of the endpoint).
  scrape_totals scraped;
  bool scraping = o.scrape_ms > 0;
  const bool timed_out = !testing::eventually(
      [&] {
        if (scraping) {
          const auto lines = hub.lines();
          const auto rounds = std::count_if(lines.begin(), lines.end(), [](const auto& l) { return l.text.starts_with("round "); });
          if (rounds >= std::max<std::int64_t>(o.rounds - 1, 1)) {
            scraped = scrapes.stop();
            scraping = false;
          }
        }
        return !hub.process().running();
      },
      until(deadline));
  if (scraping) scraped = scrapes.stop();
  if (timed_out) hub.process().terminate(5s);
  const std::int64_t exited_ns = now_ns();
  (void)hub.process().wait_output_closed(5s);  // its last lines, before the table below
  const double bench_run_cpu_s = fleet.stop();

  const std::vector<round_row> rows = collect_rounds(dir / "metrics.jsonl", hub.lines(), fleet.stats());
  print_rounds(rows);
  const bool ok = print_summary({.o = o,
                                 .params = params,
                                 .rows = rows,
                                 .timed_out = timed_out,
                                 .hub_exit = hub.process().exit_text(),
                                 .hub_exit_ok = hub.process().exit_code() == 0,
                                 .hub_usage = hub.process().usage(),
                                 .spawned_ns = hub.started_ns(),
                                 .exited_ns = exited_ns,
                                 .stats = fleet.stats(),
                                 .totals = fleet.totals(),
                                 .bench_run_cpu_s = bench_run_cpu_s,
                                 .setup_cpu_s = setup_cpu_s,
                                 .hub_log = hub.log()});
  if (o.scrape_ms > 0) {
    const double per_s = 1000.0 / o.scrape_ms;
    std::printf("scrapes of /metrics: %llu during the run, every %.0f ms (%llu failed), %.0f bytes each, %.2f ms mean, %.2f ms slowest\n",
                static_cast<unsigned long long>(scraped.done), o.scrape_ms, static_cast<unsigned long long>(scraped.failed),
                scraped.done ? static_cast<double>(scraped.bytes) / static_cast<double>(scraped.done) : 0.0,
                scraped.done ? 1e3 * scraped.seconds / static_cast<double>(scraped.done) : 0.0, 1e3 * scraped.max_seconds);
    std::printf("hub CPU per scrape, idle hub, 1000 back to back: %.1f us; at this rate %.3f%% of one core\n",
                idle_scrape_cpu_s * 1e6, 100.0 * idle_scrape_cpu_s * per_s);
  }
  if (!ok) {
    print_log_tail(hub.log(), 20);
    return fail(timed_out ? "the hub did not finish within --timeout" : "not every round completed with every update");
  }
  if (!o.keep) std::filesystem::remove_all(dir);
  else std::printf("files kept in %s\n", dir.c_str());
  return 0;
}

}  // namespace
}  // namespace tessera::bench::hub_scale

int main(int argc, char** argv) {
  using namespace tessera::bench::hub_scale;
  const auto o = parse_options(argc, argv);
  if (!o) {
    std::fputs(k_usage, stderr);
    return 2;
  }
  return run(*o);
}
