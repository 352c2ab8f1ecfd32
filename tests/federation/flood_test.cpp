// A flood of silent connections: a client without a certificate holds `n` TCP connections to the hub
// from its own address and reopens each as soon as the hub closes it. Connections in their handshake
// have their own pool with a per-address bound, so the flood pushes out its own oldest connections and
// never a device: four agents complete five rounds beside it.
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "fleet.hpp"

namespace tessera::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// `n` silent connections from 127.0.0.2, each reopened once the hub closed it.
class silent_flood {
 public:
  silent_flood(std::uint16_t port, std::size_t n) : port_(port), sockets_(n) {
    for (auto& s : sockets_) open(s);
  }
  // Reopens every connection the hub has closed; returns how many.
  std::size_t reopen() {
    std::size_t n = 0;
    for (auto& s : sockets_) {
      std::array<char, 64> buf{};
      boost::system::error_code ec;
      if (s && s->is_open()) {
        (void)s->read_some(asio::buffer(buf), ec);
        if (ec == asio::error::would_block) continue;  // still held open by the hub
      }
      open(s);
      ++n;
    }
    reopened_ += n;
    return n;
  }
  [[nodiscard]] std::size_t reopened() const noexcept { return reopened_; }

 private:
  void open(std::unique_ptr<tcp::socket>& s) {
    s = std::make_unique<tcp::socket>(io_);
    boost::system::error_code ec;
    s->open(tcp::v4(), ec);
    if (!ec) s->bind(tcp::endpoint(asio::ip::make_address("127.0.0.2"), 0), ec);
    if (!ec) s->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    if (!ec) s->non_blocking(true, ec);
    if (ec) s.reset();
  }

  asio::io_context io_;
  std::uint16_t port_;
  std::vector<std::unique_ptr<tcp::socket>> sockets_;
  std::size_t reopened_ = 0;
};

// Four agents, five rounds of a small model, beside a flood of `connections`; returns the seconds the
// five rounds took and the hub's peak RSS (KiB).
struct flood_run {
  double seconds = 0;
  long peak_kib = 0;
  std::size_t reopened = 0;
};

flood_run run_with_flood(const std::string& tag, std::size_t connections, const nlohmann::json& extra) {
  const std::vector<std::string> ids{"device-0", "device-1", "device-2", "device-3"};
  fleet f(tag);
  INFO(f.diagnostics());
  f.make_pki(ids);
  const nlohmann::json train = f.write_subset("train", 2000);
  const auto data = f.make_shards({{"devices", 4}, {"seed", 6}, {"data", {{"train", train}}}});
  nlohmann::json config = {{"model", {{"inputs", 784}, {"hidden", {32}}, {"outputs", 10}}},
                           {"strategy", "ist"},
                           {"rounds", 5},
                           {"local_steps", 20},
                           {"batch", 16},
                           {"seed", 6},
                           {"min_devices", 4},
                           {"max_devices", 4},
                           {"device_wait_s", 60},
                           {"round_deadline_s", 60},
                           {"metrics", f.file("metrics.jsonl")}};
  config.update(extra);
  hub_handle hub = f.start_hub("hub", config);
  silent_flood flood(hub.port, connections);  // before any agent dials
  const auto started = std::chrono::steady_clock::now();
  std::vector<child_process*> agents;
  for (std::size_t d = 0; d < ids.size(); ++d) agents.push_back(&f.start_agent(ids[d], data[d], hub.port));
  const bool finished = eventually([&] { return !hub.process.running(); }, 90s, [&] {
    (void)flood.reopen();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  flood_run r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE_MESSAGE(finished, "the hub did not finish five rounds within 90 s of the flood");
  CHECK(hub.process.exit_code() == 0);
  CHECK(read_metrics(f.file("metrics.jsonl")).size() == 5);
  r.peak_kib = hub.process.usage().ru_maxrss;
  r.reopened = flood.reopened();
  // The refusals are summarised, not logged one by one.
  const std::string log = hub.process.err();
  CHECK(count_of(log, "connection refused:") <= 5 * (static_cast<std::size_t>(r.seconds / 10.0) + 2));
  for (auto* a : agents) a->kill();
  return r;
}

}  // namespace

TEST_CASE("federation: 64 silent connections reopened at once, max_sessions 64: four agents complete five rounds") {
  const flood_run r = run_with_flood("fed_flood64", 64, {{"max_sessions", 64}});
  MESSAGE("five rounds in " << r.seconds << " s beside 64 silent connections (" << r.reopened
                            << " reopened after the hub closed them); hub peak RSS " << static_cast<double>(r.peak_kib) / 1024.0 << " MiB");
  CHECK(r.seconds <= 60.0);
}

TEST_CASE("federation: 4096 silent connections against the defaults: four agents complete five rounds") {
  rlimit fds{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &fds) == 0);
  if (fds.rlim_cur < 4096 + 512 && fds.rlim_max >= 4096 + 512) {
    fds.rlim_cur = 4096 + 512;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &fds) == 0);
  }
  REQUIRE_MESSAGE(fds.rlim_max >= 4096 + 512, "this machine allows " << fds.rlim_max << " open files per process, not 4608");
  const flood_run r = run_with_flood("fed_flood4096", 4096, nlohmann::json::object());
  MESSAGE("five rounds in " << r.seconds << " s beside 4096 silent connections (" << r.reopened
                            << " reopened); hub peak RSS " << static_cast<double>(r.peak_kib) / 1024.0 << " MiB");
  CHECK(r.seconds <= 60.0);
}

}  // namespace tessera::testing
