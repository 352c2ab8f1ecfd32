// bench_hub_scale — one real tessera-hub process against N lightweight agents on loopback, over mutual
// TLS 1.3: the hub's peak memory, its CPU time per round, and how long a round takes when the devices
// spend no time training (plan, dispatch, collect, aggregate, checkpoint: the hub's own share of a round).
//
// The program makes a throwaway PKI (CA, hub certificate for 127.0.0.1, one certificate per agent, through
// the library), writes a hub configuration (IST, min_devices = max_devices = N, a checkpoint after every
// round, no validation), starts tessera-hub as a child process and reads its port from its first line.
// The agents are net::clients, each with its own certificate and TLS context, all on one io_context and
// thread (--threads T: T of each, agents dealt round-robin). They speak the protocol as tessera-edge does
// (HELLO, WELCOME, ASSIGN + download, UPDATE + upload, RESULT; resuming after a broken link) but do not
// train: each sends its downloaded subnet straight back as its update.
//
// Figures: the hub's peak RSS and CPU time from wait4() when it exits after its last round (exact); per
// round, its CPU time from /proc/<pid>/stat sampled at each of its progress lines, the wall time between
// those lines (round 1: from the last agent's WELCOME), the time from the same start to the first ASSIGN
// at any agent, and its metrics file (bytes, and its own "seconds", from the start of planning to after
// the checkpoint). No printed figure is derived by subtracting one clock's interval from another's.
// Everything has a deadline: past --timeout the hub is killed and the run fails.
//
//   bench_hub_scale [--hub PATH] [--agents 500] [--rounds 5] [--model 784-512-512-10] [--min-width 8]
//                   [--steps 1] [--threads 1] [--timeout 600] [--keep]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "tessera/core/memory.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/model_spec.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/client.hpp"
#include "tessera/net/task.hpp"

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace core = tessera::core;
namespace crypto = tessera::crypto;
namespace net = tessera::net;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// What each agent offers in its HELLO: memory for the whole model (the default, and 784-2048-2048-10
// with room to spare), so the planner gives every device the same capacity; a nominal number of examples.
constexpr std::uint64_t k_budget_bytes = 256ull << 20;
constexpr std::uint64_t k_examples = 1000;
constexpr double k_loss = 0.5;
constexpr int k_batch = 32;
constexpr std::size_t k_max_reports = 10;  // problems printed per kind; the rest are only counted

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count();
}

double seconds_between(std::int64_t from_ns, std::int64_t to_ns) { return static_cast<double>(to_ns - from_ns) / 1e9; }

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

double cpu_seconds(const rusage& ru) {
  return static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6 +
         static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6;
}

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return cpu_seconds(ru);
}

// utime + stime of a live process in seconds, from /proc/<pid>/stat; -1 if it cannot be read.
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

// A field of /proc/<pid>/status in KiB ("VmHWM", "VmRSS"); -1 if it cannot be read.
long proc_status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  return -1;
}

// Counters the agents share; each agent's own state is touched only by its io_context's thread.
struct fleet_stats {
  explicit fleet_stats(std::size_t rounds) : first_assign_ns(rounds + 1) {}
  std::size_t agents = 0;
  pid_t hub_pid = 0;
  std::atomic<std::size_t> welcomed{0};          // agents past their first WELCOME
  // When the last of them got it (the hub then plans round 1 at once), and the hub's CPU time and
  // VmHWM at that moment: the end of the connect phase.
  std::atomic<std::int64_t> all_welcomed_ns{0};
  std::atomic<double> welcomed_cpu_s{-1};
  std::atomic<long> welcomed_hwm_kib{-1};
  std::atomic<std::uint64_t> assignments{0}, accepted{0}, rejected{0}, hub_refusals{0}, refused_here{0};
  std::atomic<std::uint64_t> links_lost{0}, connect_failures{0};
  std::atomic<std::size_t> reports{0};
  // Per round (1-based): when the first ASSIGN of it reached any agent, i.e. when the hub, done
  // planning, had its first message out.
  std::vector<std::atomic<std::int64_t>> first_assign_ns;

  void note_assign(std::uint64_t round) {
    if (round == 0 || round >= first_assign_ns.size()) return;
    const std::int64_t t = now_ns();
    std::int64_t seen = 0;
    first_assign_ns[round].compare_exchange_strong(seen, t);  // keeps the first
  }

  void report(const std::string& text) {
    if (reports.fetch_add(1) < k_max_reports) std::fprintf(stderr, "bench_hub_scale: %s\n", text.c_str());
  }
};

// One device that trains for no time: its update is the subnet it was sent.
class light_agent {
 public:
  light_agent(asio::io_context& io, std::string id, const crypto::tls_context& tls, std::uint16_t port, std::uint64_t seed,
              std::int64_t rounds, fleet_stats& stats)
      : id_(std::move(id)), rounds_(rounds), stats_(stats) {
    net::session_config sc;
    sc.idle_timeout = 60s;  // as the hub's default idle_timeout_s
    sc.write_timeout = 60s;
    client_ = net::client::create(io, tls, sc,
                                  {.host = "127.0.0.1", .port = port, .backoff_initial = 250ms, .backoff_max = 5000ms,
                                   .jitter = 0.5, .seed = seed});
    client_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
    client_->on_connect_failed([this](const core::error& why, std::chrono::milliseconds) {
      if (results_ >= rounds_) return;  // the hub is gone after its last round
      ++stats_.connect_failures;
      stats_.report(id_ + ": " + why.message);
    });
  }
  void start() { client_->start(); }
  void stop() { client_->stop(); }

 private:
  // One assignment: the blob's bytes and both of its transfers in one allocation, so a session that
  // still holds a transfer keeps the bytes alive (aliasing shared_ptrs).
  struct job {
    std::uint64_t round = 0;
    std::vector<std::byte> bytes;
    net::incoming_transfer in;
    std::optional<net::outgoing_transfer> out;
    net::msg::update update{};
    job(std::uint64_t r, std::uint64_t id, std::size_t size, const net::digest& sha) : round(r), bytes(size), in(id, bytes, sha) {}
  };
  enum class stage { idle, downloading, uploading };

  void attach(const std::shared_ptr<net::session>& s) {
    std::weak_ptr<net::session> weak = s;
    s->on_ready([this, weak] {
      if (auto self = weak.lock()) on_ready(self);
    });
    s->on_message([this, weak](const net::message& m) {
      auto self = weak.lock();
      if (!self) return;
      if (std::holds_alternative<net::msg::welcome>(m)) on_welcome(self);
      else if (const auto* a = std::get_if<net::msg::assign>(&m)) on_assign(self, *a);
      else if (const auto* r = std::get_if<net::msg::result>(&m)) on_result(*r);
      else if (const auto* f = std::get_if<net::msg::refuse>(&m)) {
        ++stats_.hub_refusals;
        stats_.report(id_ + ": the hub refused: " + f->reason);
      }
    });
    s->on_blob_received([this, weak](const std::shared_ptr<net::incoming_transfer>& in) {
      if (auto self = weak.lock()) on_downloaded(self, in);
    });
    s->on_closed([this](const core::error& why) {
      if (results_ >= rounds_) return;  // the hub closes every link after its last round
      ++stats_.links_lost;
      stats_.report(id_ + ": link lost: " + why.message);
    });
  }

  void on_ready(const std::shared_ptr<net::session>& s) {
    net::msg::hello h{.device_id = id_,
                      .version = net::protocol_version,
                      .memory_budget_bytes = k_budget_bytes,
                      .examples = k_examples,
                      .codecs = {net::codec::f32},
                      .resume = {}};
    if (job_ && at_ == stage::downloading) h.resume.push_back({job_->in.id(), job_->in.received()});
    s->send(h);
  }

  void on_welcome(const std::shared_ptr<net::session>& s) {
    if (!welcomed_) {
      welcomed_ = true;
      if (stats_.welcomed.fetch_add(1) + 1 == stats_.agents) {
        stats_.welcomed_cpu_s = proc_cpu_seconds(stats_.hub_pid);
        stats_.welcomed_hwm_kib = proc_status_kib(stats_.hub_pid, "VmHWM");
        stats_.all_welcomed_ns = now_ns();
      }
    }
    // After a broken link: continue where this agent was, as tessera-edge does.
    if (job_ && at_ == stage::downloading) {
      s->expect_blob(std::shared_ptr<net::incoming_transfer>(job_, &job_->in));
    } else if (job_ && at_ == stage::uploading) {
      s->send(job_->update);
      s->send_blob(std::shared_ptr<net::outgoing_transfer>(job_, &*job_->out));
    }
  }

  void on_assign(const std::shared_ptr<net::session>& s, const net::msg::assign& a) {
    ++stats_.assignments;
    stats_.note_assign(a.round);
    auto task = net::task_from_assign(a);
    std::string problem;
    if (!task) problem = task.error().message;
    else if (a.blob_codec != net::codec::f32) problem = "codec " + std::string(core::to_string(a.blob_codec)) + " was not offered";
    else if (a.size != core::encoded_bytes(task.value().arch, core::codec_kind::f32))
      problem = "declared size " + std::to_string(a.size) + " does not match the subnet";
    if (!problem.empty()) {
      ++stats_.refused_here;
      stats_.report(id_ + ": refusing round " + std::to_string(a.round) + ": " + problem);
      job_.reset();
      at_ = stage::idle;
      s->refuse(net::errc::refused, "assignment of round " + std::to_string(a.round) + ": " + problem);
      return;
    }
    const net::training_task& t = task.value();
    // A newer assignment supersedes whatever was in progress; the old job lives on while a session holds it.
    job_ = std::make_shared<job>(a.round, a.transfer, static_cast<std::size_t>(a.size), a.sha256);
    // The update the hub will accept: every assigned step, every example of them, a finite loss, and the
    // blob unchanged, so its digest is the download's (no hashing here: the figures are the hub's).
    job_->update = {.round = a.round,
                    .examples = static_cast<std::uint64_t>(t.steps) * static_cast<std::uint64_t>(t.batch),
                    .steps = static_cast<std::uint64_t>(t.steps),
                    .loss = k_loss,
                    .transfer = net::upload_transfer_id(a.transfer),
                    .size = a.size,
                    .blob_codec = net::codec::f32,
                    .sha256 = a.sha256};
    at_ = stage::downloading;
    s->expect_blob(std::shared_ptr<net::incoming_transfer>(job_, &job_->in));
  }

  void on_downloaded(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in) {
    if (!job_ || at_ != stage::downloading || &job_->in != in.get()) return;
    job_->out.emplace(job_->update.transfer, std::span<const std::byte>(job_->bytes), job_->update.sha256);
    at_ = stage::uploading;
    s->send(job_->update);
    s->send_blob(std::shared_ptr<net::outgoing_transfer>(job_, &*job_->out));
  }

  void on_result(const net::msg::result& r) {
    if (!job_ || at_ != stage::uploading) return;
    ++results_;
    if (r.accepted) {
      ++stats_.accepted;
    } else {
      ++stats_.rejected;
      stats_.report(id_ + ": update of round " + std::to_string(job_->round) + " rejected: " + r.reason);
    }
    job_.reset();
    at_ = stage::idle;
  }

  std::string id_;
  std::int64_t rounds_;
  std::int64_t results_ = 0;  // RESULTs received
  fleet_stats& stats_;
  std::shared_ptr<net::client> client_;
  std::shared_ptr<job> job_;
  stage at_ = stage::idle;
  bool welcomed_ = false;
};

// The hub's pid for the signal handler: a benchmark stopped by Ctrl-C or `timeout` takes its hub along.
volatile sig_atomic_t g_hub_pid = 0;

// Installed with SA_RESETHAND: the re-raised signal then takes its default action.
extern "C" void on_signal(int sig) {
  if (g_hub_pid > 0) ::kill(static_cast<pid_t>(g_hub_pid), SIGKILL);
  ::raise(sig);
}

void install_signal_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// tessera-hub as a child process: stdout read line by line on a thread (each line timestamped, with the
// hub's CPU time and peak RSS sampled as it arrives), stderr to a log file.
class hub_process {
 public:
  struct line {
    std::int64_t at_ns = 0;
    std::string text;
    double cpu_s = -1;     // the hub's utime + stime when the line arrived
    long hwm_kib = -1;     // its VmHWM then
  };

  hub_process() = default;
  hub_process(const hub_process&) = delete;
  hub_process& operator=(const hub_process&) = delete;
  ~hub_process() {
    if (running()) kill_now();
    if (reader_.joinable()) reader_.join();
  }

  // Empty on success, else why it could not start.
  std::string start(const std::string& exe, const std::vector<std::string>& args, const std::filesystem::path& log) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    std::vector<std::string> all{exe};
    all.insert(all.end(), args.begin(), args.end());
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return exe + ": " + std::strerror(rc);
    }
    pid_ = pid;
    g_hub_pid = pid;
    reader_ = std::thread([this, fd = fds[0]] { read_lines(fd); });
    return {};
  }

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] bool running() const noexcept { return pid_ > 0 && !exited_; }

  // Waits until the hub printed at least `count` lines or closed its stdout; false on the deadline.
  bool wait_lines(std::size_t count, steady::time_point deadline) {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return lines_.size() >= count || eof_; }) && lines_.size() >= count;
  }
  // Waits until the hub's stdout is closed (every line read); false on the deadline.
  bool wait_eof(steady::time_point deadline) {
    std::unique_lock lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return eof_; });
  }
  std::vector<line> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }

  // Reaps the hub if it exited (its rusage kept); true once it has.
  bool poll_exit() {
    if (!running()) return exited_;
    int status = 0;
    rusage ru{};
    const pid_t r = ::wait4(pid_, &status, WNOHANG, &ru);
    if (r == pid_) {
      exited_ = true;
      g_hub_pid = 0;
      status_ = status;
      usage_ = ru;
    }
    return exited_;
  }
  // SIGTERM (the hub stops cleanly), then SIGKILL after `grace`; reaps it.
  void stop(std::chrono::milliseconds grace) {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    const auto until = steady::now() + grace;
    while (!poll_exit() && steady::now() < until) std::this_thread::sleep_for(20ms);
    if (running()) kill_now();
  }
  [[nodiscard]] int status() const noexcept { return status_; }
  [[nodiscard]] const rusage& usage() const noexcept { return usage_; }

 private:
  void kill_now() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    rusage ru{};
    if (::wait4(pid_, &status, 0, &ru) == pid_) {
      status_ = status;
      usage_ = ru;
    }
    exited_ = true;
    g_hub_pid = 0;
  }

  void read_lines(int fd) {
    FILE* in = ::fdopen(fd, "r");
    if (in == nullptr) {
      ::close(fd);
      return;
    }
    char* buf = nullptr;
    std::size_t cap = 0;
    ssize_t n = 0;
    while ((n = ::getline(&buf, &cap, in)) > 0) {
      line l{.at_ns = now_ns(), .text = std::string(buf, static_cast<std::size_t>(n)), .cpu_s = -1, .hwm_kib = -1};
      while (!l.text.empty() && (l.text.back() == '\n' || l.text.back() == '\r')) l.text.pop_back();
      l.cpu_s = proc_cpu_seconds(pid_);
      l.hwm_kib = proc_status_kib(pid_, "VmHWM");
      std::printf("  hub | %s\n", l.text.c_str());
      std::fflush(stdout);
      std::lock_guard lock(mutex_);
      lines_.push_back(std::move(l));
      changed_.notify_all();
    }
    std::free(buf);
    std::fclose(in);
    std::lock_guard lock(mutex_);
    eof_ = true;
    changed_.notify_all();
  }

  pid_t pid_ = 0;
  bool exited_ = false;
  int status_ = 0;
  rusage usage_{};
  std::thread reader_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<line> lines_;
  bool eof_ = false;
};

struct options {
  std::string hub;
  std::size_t agents = 500;
  std::int64_t rounds = 5;
  std::vector<std::int64_t> widths{784, 512, 512, 10};
  std::int64_t min_width = 8;
  std::int64_t steps = 1;
  std::size_t threads = 1;
  double timeout_s = 600;
  bool keep = false;
};

constexpr const char* k_usage =
    "usage: bench_hub_scale [--hub PATH] [--agents N] [--rounds R] [--model 784-512-512-10] [--min-width W]\n"
    "                       [--steps S] [--threads T] [--timeout SECONDS] [--keep]\n";

std::optional<std::vector<std::int64_t>> parse_widths(const std::string& text) {
  std::vector<std::int64_t> w;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto dash = text.find('-', pos);
    const std::string part = text.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1) return std::nullopt;
    w.push_back(v);
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  if (w.size() < 3) return std::nullopt;
  return w;
}

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    auto number = [&](double lo, double hi) -> std::optional<double> {
      if (!has_value) return std::nullopt;
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (*end != '\0' || v < lo || v > hi) return std::nullopt;
      return v;
    };
    std::optional<double> v;
    if (arg == "--hub" && has_value) {
      o.hub = argv[++i];
    } else if (arg == "--model" && has_value) {
      auto w = parse_widths(argv[++i]);
      if (!w) return std::nullopt;
      o.widths = *w;
    } else if (arg == "--keep") {
      o.keep = true;
    } else if (arg == "--agents" && (v = number(1, 20000))) {
      o.agents = static_cast<std::size_t>(*v);
    } else if (arg == "--rounds" && (v = number(1, 10000))) {
      o.rounds = static_cast<std::int64_t>(*v);
    } else if (arg == "--min-width" && (v = number(1, 1 << 20))) {
      o.min_width = static_cast<std::int64_t>(*v);
    } else if (arg == "--steps" && (v = number(1, 1e6))) {
      o.steps = static_cast<std::int64_t>(*v);
    } else if (arg == "--threads" && (v = number(1, 64))) {
      o.threads = static_cast<std::size_t>(*v);
    } else if (arg == "--timeout" && (v = number(1, 86400))) {
      o.timeout_s = *v;
    } else {
      return std::nullopt;
    }
  }
  if (o.hub.empty()) {  // the release tree's layout: build/<preset>/bench/ next to build/<preset>/hub/
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) o.hub = (self.parent_path().parent_path() / "hub" / "tessera-hub").string();
  }
  return o;
}

// Raises the soft descriptor limit to the hard one: each agent holds a socket, and so does the hub,
// which inherits the limit. Returns the soft limit in force.
rlim_t raise_fd_limit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return 0;
  if (l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &l) != 0) getrlimit(RLIMIT_NOFILE, &l);
  }
  return l.rlim_cur;
}

std::string widths_text(const std::vector<std::int64_t>& w) {
  std::string s;
  for (std::size_t i = 0; i < w.size(); ++i) s += (i ? "-" : "") + std::to_string(w[i]);
  return s;
}

// Lines of the hub's log tagged "warning: " and "error: ".
std::pair<std::size_t, std::size_t> count_log_problems(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string l;
  std::size_t warnings = 0, errors = 0;
  while (std::getline(in, l)) {
    warnings += l.find("] warning: ") != std::string::npos ? 1 : 0;
    errors += l.find("] error: ") != std::string::npos ? 1 : 0;
  }
  return {warnings, errors};
}

// The tail of the hub's log, for a failed run.
void print_log_tail(const std::filesystem::path& log, std::size_t count) {
  std::ifstream in(log);
  std::vector<std::string> tail;
  std::string l;
  while (std::getline(in, l)) {
    tail.push_back(l);
    if (tail.size() > count) tail.erase(tail.begin());
  }
  std::fprintf(stderr, "bench_hub_scale: last lines of %s:\n", log.c_str());
  for (const auto& t : tail) std::fprintf(stderr, "  %s\n", t.c_str());
}

struct round_row {
  std::int64_t round = 0;
  std::uint64_t devices = 0, groups = 0, bytes_down = 0, bytes_up = 0, stragglers = 0, refused = 0, rejected = 0;
  double hub_seconds = 0;  // the hub's own: from the start of planning to after the checkpoint
  double wall_s = -1;      // from the previous round's line (round 1: the last WELCOME) to this one's
  double plan_s = -1;      // from the same start to the first ASSIGN at an agent
  double cpu_s = -1;       // the hub's CPU time over the wall interval
  double hwm_mib = -1;     // the hub's VmHWM at this round's line
};

int run(const options& o) {
  const rlim_t fd_limit = raise_fd_limit();
  if (fd_limit != RLIM_INFINITY && fd_limit < 2 * o.agents + 64)
    std::fprintf(stderr, "bench_hub_scale: warning: the descriptor limit is %llu; %zu agents need about %zu\n",
                 static_cast<unsigned long long>(fd_limit), o.agents, 2 * o.agents + 64);
  install_signal_handlers();
  const auto started = steady::now();
  const auto deadline = started + std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));

  core::model_spec spec;
  spec.inputs = o.widths.front();
  spec.hidden.assign(o.widths.begin() + 1, o.widths.end() - 1);
  spec.outputs = o.widths.back();
  if (auto ok = core::validate(spec, "--model"); !ok) {
    std::fprintf(stderr, "bench_hub_scale: %s\n", ok.error().message.c_str());
    return 2;
  }
  const std::size_t params = core::param_count(spec.full_arch());

  // A throwaway PKI: CA, the hub's certificate for 127.0.0.1, one certificate per agent.
  std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-hub-scale-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "bench_hub_scale: cannot make a temporary folder: %s\n", std::strerror(errno));
    return 1;
  }
  const std::filesystem::path dir = tmpl;
  const std::filesystem::path pki = dir / "pki";
  std::filesystem::create_directories(pki);
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "bench_hub_scale: %s (files kept in %s)\n", why.c_str(), dir.c_str());
    return 1;
  };
  const auto ca = crypto::ca_files::in(pki);
  if (auto r = crypto::init_ca(ca, {}, false); !r) return fail(r.error().message);
  if (auto r = crypto::issue(ca, {.ip_addresses = {"127.0.0.1"}}, {pki / "hub.pem", pki / "hub.key"}, false); !r)
    return fail(r.error().message);
  std::vector<std::string> ids;
  std::vector<crypto::tls_context> agent_tls;
  for (std::size_t i = 0; i < o.agents; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "agent-%05zu", i);
    ids.emplace_back(id);
    const crypto::cert_files files{pki / (ids.back() + ".pem"), pki / (ids.back() + ".key")};
    if (auto r = crypto::issue(ca, {.device_id = ids.back()}, files, false); !r) return fail(r.error().message);
    auto tls = crypto::make_agent_tls({ca.cert, files.cert, files.key, "127.0.0.1"});
    if (!tls) return fail(tls.error().message);
    agent_tls.push_back(tls.value());
  }
  const double setup_s = std::chrono::duration<double>(steady::now() - started).count();
  const double setup_cpu_s = self_cpu_seconds();

  // The hub's configuration: every agent in every round, a checkpoint after each round, no validation.
  const std::filesystem::path metrics = dir / "metrics.jsonl";
  const std::filesystem::path log = dir / "hub.log";
  const nlohmann::json config = {
      {"listen", "127.0.0.1:0"},
      {"tls", {{"ca", ca.cert.string()}, {"cert", (pki / "hub.pem").string()}, {"key", (pki / "hub.key").string()},
               {"crl", ca.crl.string()}}},
      {"model", {{"inputs", spec.inputs}, {"hidden", spec.hidden}, {"outputs", spec.outputs}, {"seed", 1}}},
      {"strategy", "ist"},
      {"rounds", o.rounds},
      {"min_devices", o.agents},
      {"max_devices", o.agents},
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
      {"checkpoint_dir", (dir / "checkpoints").string()},
      {"metrics", metrics.string()}};
  {
    std::ofstream out(dir / "hub.json");
    out << config.dump(2) << '\n';
    if (!out) return fail("cannot write " + (dir / "hub.json").string());
  }

  std::printf("bench_hub_scale: %zu agents, %lld rounds of IST, model %s (%zu parameters, %.2f MiB in f32), "
              "min_width %lld, %lld local step(s) of batch %d, %zu agent thread(s), %u cores\n",
              o.agents, static_cast<long long>(o.rounds), widths_text(o.widths).c_str(), params,
              mib(static_cast<double>(params) * 4), static_cast<long long>(o.min_width), static_cast<long long>(o.steps),
              k_batch, o.threads, std::thread::hardware_concurrency());
  std::printf("  setup: CA, hub and %zu device certificates and agent TLS contexts in %.2f s\n", o.agents, setup_s);
  std::fflush(stdout);

  hub_process hub;
  if (auto e = hub.start(o.hub, {"--config", (dir / "hub.json").string()}, log); !e.empty()) return fail(e);
  const std::int64_t spawned_ns = now_ns();
  if (!hub.wait_lines(1, std::min(deadline, steady::now() + 30s))) {
    hub.stop(2s);
    print_log_tail(log, 20);
    return fail("the hub did not announce its port");
  }
  const std::string first = hub.lines().front().text;
  const auto at = first.find(" on 127.0.0.1:");
  const unsigned long port = at == std::string::npos ? 0 : std::strtoul(first.c_str() + at + 14, nullptr, 10);
  if (port == 0 || port > 65535) {
    hub.stop(2s);
    return fail("no port in the hub's first line: " + first);
  }

  // The fleet: agents dealt round-robin over the io_contexts, one thread each.
  fleet_stats stats(static_cast<std::size_t>(o.rounds));
  stats.agents = o.agents;
  stats.hub_pid = hub.pid();
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  for (std::size_t t = 0; t < o.threads; ++t) {
    ios.push_back(std::make_unique<asio::io_context>(1));
    work.push_back(asio::make_work_guard(*ios.back()));
  }
  std::vector<std::unique_ptr<light_agent>> agents;
  for (std::size_t i = 0; i < o.agents; ++i)
    agents.push_back(std::make_unique<light_agent>(*ios[i % o.threads], ids[i], agent_tls[i], static_cast<std::uint16_t>(port),
                                                   i + 1, o.rounds, stats));
  const double bench_cpu_before = self_cpu_seconds();
  std::atomic<std::size_t> io_running{o.threads};
  std::vector<std::thread> threads;
  for (auto& io : ios)
    threads.emplace_back([&io_running, &io = *io] {
      io.run();
      --io_running;
    });
  for (auto& a : agents) a->start();

  // Until the hub exits after its last round, or the deadline.
  bool timed_out = false;
  while (!hub.poll_exit()) {
    if (steady::now() >= deadline) {
      timed_out = true;
      hub.stop(5s);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  const std::int64_t exited_ns = now_ns();
  (void)hub.wait_eof(steady::now() + 5s);  // its last lines, before the table below

  // The hub is gone: stop the agents (they would redial), let their io_contexts drain, bounded.
  for (auto& a : agents) a->stop();
  work.clear();
  const auto drain_until = steady::now() + 10s;
  while (io_running.load() > 0 && steady::now() < drain_until) std::this_thread::sleep_for(10ms);
  for (auto& io : ios) io->stop();
  for (auto& t : threads) t.join();
  const double bench_run_cpu_s = self_cpu_seconds() - bench_cpu_before;
  agents.clear();

  // Each round from the metrics file, with the wall and CPU intervals between the hub's lines.
  std::vector<hub_process::line> round_lines;
  for (const auto& l : hub.lines())
    if (l.text.rfind("round ", 0) == 0) round_lines.push_back(l);
  std::vector<round_row> rows;
  {
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
  }
  const std::int64_t welcomed_ns = stats.all_welcomed_ns.load();
  const double connect_cpu_s = stats.welcomed_cpu_s.load();
  const long connect_hwm_kib = stats.welcomed_hwm_kib.load();
  for (std::size_t i = 0; i < rows.size() && i < round_lines.size(); ++i) {
    const std::int64_t from_ns = i == 0 ? welcomed_ns : round_lines[i - 1].at_ns;
    const double from_cpu = i == 0 ? connect_cpu_s : round_lines[i - 1].cpu_s;
    if (from_ns != 0) rows[i].wall_s = seconds_between(from_ns, round_lines[i].at_ns);
    const auto r = static_cast<std::size_t>(rows[i].round);
    if (from_ns != 0 && r < stats.first_assign_ns.size() && stats.first_assign_ns[r].load() != 0)
      rows[i].plan_s = seconds_between(from_ns, stats.first_assign_ns[r].load());
    if (round_lines[i].hwm_kib >= 0) rows[i].hwm_mib = static_cast<double>(round_lines[i].hwm_kib) / 1024.0;
    if (from_cpu >= 0 && round_lines[i].cpu_s >= 0) rows[i].cpu_s = round_lines[i].cpu_s - from_cpu;
  }

  // "wall" runs from the hub's previous line (round 1: the last WELCOME) to this round's, which it prints
  // after aggregating, checkpointing and appending the metrics line; "to 1st ASSIGN" over the same start
  // is the planning (subnets cut, encoded and hashed for every device); the hub's own "seconds" runs from
  // the start of planning to after the checkpoint, by its own clock.
  std::printf("\n| round | devices | groups | wall s | to 1st ASSIGN s | hub: plan to checkpoint s | hub CPU s | hub VmHWM MiB | "
              "MB down | MB up | stragglers / refused / rejected |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %lld | %llu | %llu | %.3f | %.3f | %.3f | %.2f | %.1f | %.2f | %.2f | %llu / %llu / %llu |\n",
                static_cast<long long>(r.round), static_cast<unsigned long long>(r.devices),
                static_cast<unsigned long long>(r.groups), r.wall_s, r.plan_s, r.hub_seconds, r.cpu_s, r.hwm_mib,
                static_cast<double>(r.bytes_down) / 1e6, static_cast<double>(r.bytes_up) / 1e6,
                static_cast<unsigned long long>(r.stragglers), static_cast<unsigned long long>(r.refused),
                static_cast<unsigned long long>(r.rejected));

  // Summary.
  const bool exited_cleanly = !timed_out && WIFEXITED(hub.status()) && WEXITSTATUS(hub.status()) == 0;
  double wall_sum = 0, wall_max = 0, hub_s_sum = 0, hub_s_max = 0, plan_sum = 0, cpu_rounds = 0, down = 0, up = 0;
  std::size_t complete = 0;
  bool every_update = true;
  for (const auto& r : rows) {
    wall_sum += r.wall_s;
    wall_max = std::max(wall_max, r.wall_s);
    hub_s_sum += r.hub_seconds;
    hub_s_max = std::max(hub_s_max, r.hub_seconds);
    plan_sum += std::max(r.plan_s, 0.0);
    cpu_rounds += std::max(r.cpu_s, 0.0);
    down += static_cast<double>(r.bytes_down);
    up += static_cast<double>(r.bytes_up);
    if (r.devices == o.agents && r.stragglers == 0 && r.refused == 0 && r.rejected == 0) ++complete;
    else every_update = false;
  }
  const double n_rows = rows.empty() ? 1.0 : static_cast<double>(rows.size());
  const rusage& ru = hub.usage();
  const double hub_cpu = cpu_seconds(ru);
  const double hub_user = static_cast<double>(ru.ru_utime.tv_sec) + static_cast<double>(ru.ru_utime.tv_usec) / 1e6;
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
  double load[3] = {0, 0, 0};
  ::getloadavg(load, 3);

  const std::string exit_text = timed_out                  ? "killed at the deadline"
                                : WIFEXITED(hub.status()) ? "status " + std::to_string(WEXITSTATUS(hub.status()))
                                                          : "signal " + std::to_string(WTERMSIG(hub.status()));
  std::printf("\nagents %zu, rounds completed %zu of %lld with every update accepted (hub exit: %s)\n", o.agents, complete,
              static_cast<long long>(o.rounds), exit_text.c_str());
  std::printf("model %s: %zu parameters, %.2f MiB f32; per device %.1f KB each way\n", widths_text(o.widths).c_str(), params,
              mib(static_cast<double>(params) * 4), rows.empty() ? 0.0 : down / n_rows / static_cast<double>(o.agents) / 1e3);
  if (welcomed_ns != 0)
    std::printf("connect: %zu agents through mutual TLS 1.3 + HELLO/WELCOME in %.2f s after the hub started; hub CPU %.2f s, "
                "VmHWM %.1f MiB then\n",
                o.agents, seconds_between(spawned_ns, welcomed_ns), connect_cpu_s, static_cast<double>(connect_hwm_kib) / 1024.0);
  std::printf("hub peak RSS: %.1f MiB (wait4 ru_maxrss)\n", peak_mib);
  std::printf("hub CPU: %.2f s total (user %.2f, system %.2f); rounds: %.2f s = %.3f s per round\n", hub_cpu, hub_user,
              hub_cpu - hub_user, cpu_rounds, cpu_rounds / n_rows);
  std::printf("round wall time (between the hub's progress lines): mean %.3f s, max %.3f s; planning to the first ASSIGN: "
              "mean %.3f s; the hub's own seconds (planning to checkpoint): mean %.3f s, max %.3f s\n",
              wall_sum / n_rows, wall_max, plan_sum / n_rows, hub_s_sum / n_rows, hub_s_max);
  std::printf("bytes per round: %.2f MB down + %.2f MB up (blob payload, all devices)\n", down / n_rows / 1e6, up / n_rows / 1e6);
  std::printf("bench process (the %zu agents): %.2f s CPU during the run (%.2f s for setup), %.2f s wall; load average %.2f\n",
              o.agents, bench_run_cpu_s, setup_cpu_s, seconds_between(spawned_ns, exited_ns), load[0]);
  std::printf("agents: %llu assignments, %llu accepted, %llu rejected, %llu refused here, %llu REFUSE from the hub, "
              "%llu links lost, %llu failed connects\n",
              static_cast<unsigned long long>(stats.assignments.load()), static_cast<unsigned long long>(stats.accepted.load()),
              static_cast<unsigned long long>(stats.rejected.load()), static_cast<unsigned long long>(stats.refused_here.load()),
              static_cast<unsigned long long>(stats.hub_refusals.load()), static_cast<unsigned long long>(stats.links_lost.load()),
              static_cast<unsigned long long>(stats.connect_failures.load()));
  const auto [log_warnings, log_errors] = count_log_problems(log);
  std::printf("hub log: %zu warnings, %zu errors\n", log_warnings, log_errors);

  const bool ok = exited_cleanly && every_update && complete == static_cast<std::size_t>(o.rounds) &&
                  stats.accepted.load() == o.agents * static_cast<std::uint64_t>(o.rounds);
  if (!ok) {
    print_log_tail(log, 20);
    return fail(timed_out ? "the hub did not finish within --timeout" : "not every round completed with every update");
  }
  if (!o.keep) std::filesystem::remove_all(dir);
  else std::printf("files kept in %s\n", dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto o = parse_options(argc, argv);
  if (!o) {
    std::fputs(k_usage, stderr);
    return 2;
  }
  return run(*o);
}
