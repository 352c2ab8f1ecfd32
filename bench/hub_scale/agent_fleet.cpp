#include "agent_fleet.hpp"

#include <cstdio>

#include "hub_process.hpp"
#include "support/wait.hpp"

namespace tessera::bench::hub_scale {
namespace {

using namespace std::chrono_literals;

// What each agent offers in its HELLO: memory for the whole model (the default, and 784-2048-2048-10
// with room to spare), so the planner gives every device the same capacity; a nominal number of examples.
constexpr std::uint64_t k_budget_bytes = 256ull << 20;
constexpr std::uint64_t k_examples = 1000;
constexpr std::size_t k_max_reports = 10;  // problems printed; the rest are only counted

}  // namespace

void fleet_stats::note_assign(std::uint64_t round) {
  if (round == 0 || round >= first_assign_ns.size()) return;
  std::int64_t unset = 0;
  first_assign_ns[round].compare_exchange_strong(unset, now_ns());  // keeps the first
}

void fleet_stats::report(const std::string& text) {
  if (reports.fetch_add(1) < k_max_reports) std::fprintf(stderr, "bench_hub_scale: %s\n", text.c_str());
}

agent_fleet::agent_fleet(const options& o) : o_(o), stats_(static_cast<std::size_t>(o.rounds)) {}

agent_fleet::~agent_fleet() {
  if (!threads_.empty()) (void)stop();
}

std::string agent_fleet::prepare(const std::filesystem::path& dir) {
  auto pki = testing::test_pki::create(dir);
  if (!pki) return pki.error().message;
  pki_.emplace(std::move(pki).value());
  for (std::size_t i = 0; i < o_.agents; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "agent-%05zu", i);
    if (auto issued = pki_->issue_device(id); !issued) return issued.error().message;
    auto tls = pki_->agent_tls(id);
    if (!tls) return tls.error().message;
    ids_.emplace_back(id);
    tls_.push_back(tls.value());
  }
  return {};
}

testing::scripted_agent_config agent_fleet::agent_config(std::size_t i, std::uint16_t port) const {
  testing::scripted_agent_config c;
  c.id = ids_[i];
  c.client.host = "127.0.0.1";
  c.client.port = port;
  c.client.backoff_initial = 250ms;
  c.client.backoff_max = 5000ms;
  c.client.jitter = 0.5;
  c.client.seed = i + 1;
  c.session.idle_timeout = 60s;  // as the hub's default idle_timeout_s
  c.session.write_timeout = 60s;
  c.budget_bytes = k_budget_bytes;
  c.examples = k_examples;
  c.codecs = {net::codec::f32};
  return c;
}

void agent_fleet::start(std::uint16_t port, pid_t hub_pid) {
  hub_pid_ = hub_pid;
  for (std::size_t t = 0; t < o_.threads; ++t) {
    ios_.push_back(std::make_unique<boost::asio::io_context>(1));
    work_.push_back(boost::asio::make_work_guard(*ios_.back()));
  }
  for (std::size_t i = 0; i < o_.agents; ++i) {
    agents_.push_back(std::make_unique<testing::scripted_agent>(*ios_[i % o_.threads], tls_[i], agent_config(i, port)));
    hook(*agents_.back());
  }
  cpu_at_start_ = self_cpu_seconds();
  io_running_ = o_.threads;
  for (auto& io : ios_)
    threads_.emplace_back([this, &io = *io] {
      io.run();
      --io_running_;
    });
  for (auto& a : agents_) a->start();
}

// Counts what the hub does to each agent; the agent itself answers every assignment with its subnet.
void agent_fleet::hook(testing::scripted_agent& a) {
  testing::scripted_agent* agent = &a;
  const auto rounds = static_cast<std::size_t>(o_.rounds);
  auto& h = a.hooks();
  h.on_welcome = [this](bool first) {
    if (!first || stats_.welcomed.fetch_add(1) + 1 != o_.agents) return;
    stats_.welcomed_cpu_s = proc_cpu_seconds(hub_pid_);
    stats_.welcomed_hwm_kib = proc_status_kib(hub_pid_, "VmHWM");
    stats_.all_welcomed_ns = now_ns();
  };
  h.on_assign = [this](const net::msg::assign& m) { stats_.note_assign(m.round); };
  h.on_problem = [this, agent](const std::string& what) { stats_.report(agent->id() + ": " + what); };
  h.after_result = [this, agent](const testing::assignment& j, const net::msg::result& r) -> std::optional<testing::reply> {
    if (!r.accepted) stats_.report(agent->id() + ": update of round " + std::to_string(j.assign.round) + " rejected: " + r.reason);
    return std::nullopt;
  };
  // The hub closes every link after its last round: only losses before an agent's last RESULT count.
  h.on_link_lost = [this, agent, rounds](const core::error& why) {
    if (agent->verdicts().size() >= rounds) return;
    ++stats_.links_lost;
    stats_.report(agent->id() + ": link lost: " + why.message);
  };
  h.on_connect_failed = [this, agent, rounds](const core::error& why) {
    if (agent->verdicts().size() >= rounds) return;
    ++stats_.connect_failures;
    stats_.report(agent->id() + ": " + why.message);
  };
}

double agent_fleet::stop() {
  for (auto& a : agents_) a->stop();
  work_.clear();
  (void)testing::eventually([&] { return io_running_.load() == 0; }, 10s);
  for (auto& io : ios_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  return self_cpu_seconds() - cpu_at_start_;
}

fleet_totals agent_fleet::totals() const {
  fleet_totals t;
  for (const auto& a : agents_) {
    t.assignments += a->assignments();
    for (const auto& v : a->verdicts()) ++(v.accepted ? t.accepted : t.rejected);
    t.refused_here += a->refused();
    t.hub_refusals += a->hub_refusals();
  }
  return t;
}

}  // namespace tessera::bench::hub_scale
