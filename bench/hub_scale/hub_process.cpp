#include "hub_process.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "support/text.hpp"
#include "support/wait.hpp"

namespace tessera::bench::hub_scale {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double proc_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields are counted after the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && (fields >> f); ++field) {
    if (field == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
    if (field == 15) stime = std::strtoull(f.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double cpu_seconds(const rusage& ru) {
  return static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6 +
         static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6;
}

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return cpu_seconds(ru);
}

std::string write_hub_config(const std::filesystem::path& dir, const options& o, const core::model_spec& spec,
                             const testing::test_pki& pki) {
  const crypto::hub_tls_files tls = pki.hub_tls_files();
  const nlohmann::json config = {
      {"listen", "127.0.0.1:0"},
      {"tls", {{"ca", tls.ca_cert.string()}, {"cert", tls.cert.string()}, {"key", tls.key.string()}, {"crl", tls.crl.string()}}},
      {"model", {{"inputs", spec.inputs}, {"hidden", spec.hidden}, {"outputs", spec.outputs}, {"seed", 1}}},
      {"strategy", "ist"},
      {"rounds", o.rounds},
      {"min_devices", o.agents},
      {"max_devices", o.agents},
      {"devices_per_round", o.cohort},
      {"device_wait_s", 120},
      {"round_deadline_s", o.timeout_s},
      {"min_width", o.min_width},
      {"local_steps", o.steps},
      {"batch", k_batch},
      {"lr", 0.05},
      {"momentum", 0.9},
      {"codec", "f32"},
      {"seed", 1},
      {"max_sessions", o.agents + 64},
      {"io_threads", o.hub_threads},
      // Every agent dials from 127.0.0.1 at once: the per-address handshake bound is for real fleets.
      {"max_handshakes", o.agents + 64},
      {"max_handshakes_per_source", o.agents + 64},
      {"checkpoint_dir", (dir / "checkpoints").string()},
      {"metrics", (dir / "metrics.jsonl").string()},
      // The operator endpoint listens in every run, scraped or not, so runs differ only in the scraping.
      {"http", {{"listen", "127.0.0.1:0"}}}};
  std::ofstream out(dir / "hub.json");
  out << config.dump(2) << '\n';
  return out ? std::string() : "cannot write " + (dir / "hub.json").string();
}

std::string hub_process::start(const std::string& exe, const std::filesystem::path& dir, std::chrono::milliseconds limit) {
  log_ = dir / "hub.log";
  auto started = testing::child_process::start(
      "tessera-hub", {exe, "--config", (dir / "hub.json").string()},
      {.out = dir / "hub.out", .err = log_, .on_out_line = [this](const std::string& text) { on_line(text); }});
  if (!started) return started.error().message;
  child_ = std::move(started).value();
  started_ns_ = now_ns();
  pid_ = child_->pid();
  const bool announced = testing::eventually(
      [&] {
        std::lock_guard lock(mutex_);
        return !lines_.empty() || !child_->running();
      },
      limit);
  const std::string first = lines().empty() ? std::string() : lines().front().text;
  const auto at = first.find(" on 127.0.0.1:");
  const unsigned long port = at == std::string::npos ? 0 : std::strtoul(first.c_str() + at + 14, nullptr, 10);
  if (port > 0 && port <= 65535) {
    port_ = static_cast<std::uint16_t>(port);
    constexpr std::string_view endpoint = "operator endpoint http://127.0.0.1:";
    if (const auto e = first.find(endpoint); e != std::string::npos) {
      const unsigned long hp = std::strtoul(first.c_str() + e + endpoint.size(), nullptr, 10);
      if (hp > 0 && hp <= 65535) http_port_ = static_cast<std::uint16_t>(hp);
    }
    return {};
  }
  child_->terminate(std::chrono::seconds(2));
  return announced && !first.empty() ? "no port in the hub's first line: " + first : "the hub did not announce its port";
}

std::vector<hub_process::line> hub_process::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

void hub_process::on_line(const std::string& text) {
  line l{.at_ns = now_ns(), .text = text, .cpu_s = -1, .hwm_kib = -1};
  if (const pid_t pid = pid_.load(); pid > 0) {
    l.cpu_s = proc_cpu_seconds(pid);
    l.hwm_kib = proc_status_kib(pid, "VmHWM");
  }
  std::printf("  hub | %s\n", l.text.c_str());
  std::fflush(stdout);
  std::lock_guard lock(mutex_);
  lines_.push_back(std::move(l));
}

std::pair<std::size_t, std::size_t> count_log_problems(const std::filesystem::path& log) {
  const std::string text = testing::read_text(log);
  return {testing::lines_with(text, "] warning: ").size(), testing::lines_with(text, "] error: ").size()};
}

void print_log_tail(const std::filesystem::path& log, std::size_t count) {
  const std::string text = testing::read_text(log);
  if (text.empty()) return;
  std::fprintf(stderr, "bench_hub_scale: last lines of %s:\n", log.c_str());
  std::istringstream tail(testing::last_lines(text, count));
  for (std::string l; std::getline(tail, l);) std::fprintf(stderr, "  %s\n", l.c_str());
}

}  // namespace tessera::bench::hub_scale
