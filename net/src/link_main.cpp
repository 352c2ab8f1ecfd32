// tessera-link: a slow, flaky link between agents and a hub, for trying a deployment before the field.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "tessera/net/link_emulator.hpp"

namespace {

constexpr const char* k_usage = R"(usage: tessera-link --listen HOST:PORT --to HOST:PORT [options]

Relays TCP connections from --listen to --to as a slow, flaky link would carry them: each direction
at --rate-kbit, with one-way latency and jitter (order kept), the link freezing for --stall-for-s every
--stall-every-s, and each connection cut after --cut-every-s or --cut-after-bytes. Seeded. Prints its
counters every --report-s seconds and at exit (SIGINT, SIGTERM).

  --rate-kbit N        kilobits per second each way (0: unlimited)
  --latency-ms N       one-way delay
  --jitter-ms N        extra delay drawn uniformly in [0, N]
  --stall-every-s S --stall-for-s S
  --cut-every-s S      cut each connection S seconds after it opened
  --cut-after-bytes N  cut each connection after N bytes (both ways together)
  --seed N             jitter draws (default 1)
  --report-s S         default 10
)";

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "tessera-link: %s\n", m.c_str());
  std::exit(1);
}

double number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= 0)) die(flag + ": '" + text + "' is not a non-negative number");
  return v;
}

std::pair<std::string, std::uint16_t> host_port(const std::string& flag, const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) die(flag + ": '" + s + "' is not HOST:PORT");
  const double p = number(flag, s.substr(colon + 1).c_str());
  if (p > 65535 || p != static_cast<double>(static_cast<int>(p))) die(flag + ": bad port in '" + s + "'");
  return {s.substr(0, colon), static_cast<std::uint16_t>(p)};
}

std::chrono::milliseconds seconds(double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0)); }

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string listen, to;
  net::link_profile p;
  double report_s = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) die(a + " needs a value (see --help)");
    const char* v = argv[++i];
    if (a == "--listen") listen = v;
    else if (a == "--to") to = v;
    else if (a == "--rate-kbit") p.rate_bits_per_s = static_cast<std::uint64_t>(number(a, v) * 1000.0);
    else if (a == "--latency-ms") p.latency = std::chrono::milliseconds(static_cast<std::int64_t>(number(a, v)));
    else if (a == "--jitter-ms") p.jitter = std::chrono::milliseconds(static_cast<std::int64_t>(number(a, v)));
    else if (a == "--stall-every-s") p.stall_every = seconds(number(a, v));
    else if (a == "--stall-for-s") p.stall_for = seconds(number(a, v));
    else if (a == "--cut-every-s") p.cut_every = seconds(number(a, v));
    else if (a == "--cut-after-bytes") p.cut_after_bytes = static_cast<std::uint64_t>(number(a, v));
    else if (a == "--seed") p.seed = static_cast<std::uint64_t>(number(a, v));
    else if (a == "--report-s") report_s = std::max(0.1, number(a, v));
    else die("unknown option '" + a + "' (see --help)");
  }
  if (listen.empty() || to.empty()) die("--listen and --to are required (see --help)");
  const auto [lhost, lport] = host_port("--listen", listen);
  const auto [thost, tport] = host_port("--to", to);
  boost::asio::io_context io;
  auto link = net::link_emulator::create(io, p, thost, tport);
  auto port = link->listen(lhost, lport);
  if (!port) die(port.error().message);
  std::printf("tessera-link: %s:%u -> %s:%u\n", lhost.c_str(), static_cast<unsigned>(port.value()), thost.c_str(),
              static_cast<unsigned>(tport));
  std::fflush(stdout);
  auto print = [&] {
    const auto s = link->stats();
    std::printf("connections %llu  cuts %llu  stalls %llu  bytes to target %llu  from target %llu\n",
                static_cast<unsigned long long>(s.connections), static_cast<unsigned long long>(s.cuts),
                static_cast<unsigned long long>(s.stalls), static_cast<unsigned long long>(s.bytes_to_target),
                static_cast<unsigned long long>(s.bytes_from_target));
    std::fflush(stdout);
  };
  boost::asio::steady_timer report(io);
  std::function<void()> arm = [&] {
    report.expires_after(seconds(report_s));
    report.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      print();
      arm();
    });
  };
  arm();
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    report.cancel();
    link->stop();
  });
  io.run();
  print();
  return 0;
}
