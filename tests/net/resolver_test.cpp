// net::resolver: IP literals, a hosts file of the test's own, "localhost", real DNS answers from a small
// responder on 127.0.0.1, names that do not exist, a server that never answers, cancellation — and the
// client resolving again before every attempt. Nothing here reads the machine's DNS: every lookup that
// reaches DNS is pointed at a UDP socket of the test on 127.0.0.1.
#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <boost/asio/ip/udp.hpp>

#include "net_test_util.hpp"
#include "tessera/net/resolver.hpp"

using namespace tessera::test;
namespace core = tessera::core;
using udp = asio::ip::udp;
using clock_type = std::chrono::steady_clock;

namespace {

// A DNS server for one test: answers A and AAAA queries from a table, NXDOMAIN for other names, or
// (silent) reads every query and drops it. One question per query, no compression in questions.
class dns_responder {
 public:
  struct entry {
    std::optional<asio::ip::address_v4> v4;
    std::optional<asio::ip::address_v6> v6;
  };

  explicit dns_responder(asio::io_context& io, bool silent = false)
      : socket_(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), silent_(silent) {
    do_receive();
  }
  [[nodiscard]] std::string servers() const { return "127.0.0.1:" + std::to_string(socket_.local_endpoint().port()); }
  void add(const std::string& name, entry e) { table_[name] = e; }
  // Queries seen for `name` (any type), in lower case without the final dot.
  [[nodiscard]] int queries_for(const std::string& name) const {
    const auto it = seen_.find(name);
    return it == seen_.end() ? 0 : it->second;
  }
  [[nodiscard]] int queries() const { return total_; }

 private:
  void do_receive() {
    socket_.async_receive_from(asio::buffer(in_), peer_, [this](const boost::system::error_code& ec, std::size_t n) {
      if (ec) return;
      ++total_;
      if (!silent_) answer(n);
      do_receive();
    });
  }

  void answer(std::size_t n) {
    if (n < 12) return;
    // The question: labels up to the zero byte, then QTYPE and QCLASS.
    std::size_t at = 12;
    std::string name;
    while (at < n && in_[at] != 0) {
      const std::size_t len = in_[at];
      if (len > 63 || at + 1 + len > n) return;
      if (!name.empty()) name += '.';
      for (std::size_t i = 0; i < len; ++i) name += static_cast<char>(std::tolower(in_[at + 1 + i]));
      at += 1 + len;
    }
    if (at + 5 > n) return;
    const std::size_t question_end = at + 5;  // zero byte, QTYPE, QCLASS
    const unsigned qtype = (unsigned{in_[at + 1]} << 8) | in_[at + 2];
    ++seen_[name];

    std::vector<std::uint8_t> out(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(question_end));
    const auto it = table_.find(name);
    std::vector<std::uint8_t> rdata;
    if (it != table_.end() && qtype == 1 && it->second.v4) {
      const auto b = it->second.v4->to_bytes();
      rdata.assign(b.begin(), b.end());
    } else if (it != table_.end() && qtype == 28 && it->second.v6) {
      const auto b = it->second.v6->to_bytes();
      rdata.assign(b.begin(), b.end());
    }
    // Flags: QR, the query's opcode and RD, RA; RCODE 3 (NXDOMAIN) for names not in the table.
    out[2] = static_cast<std::uint8_t>(0x80 | (in_[2] & 0x79));
    out[3] = static_cast<std::uint8_t>(0x80 | (it == table_.end() ? 3 : 0));
    out[4] = 0, out[5] = 1;                                 // QDCOUNT
    out[6] = 0, out[7] = rdata.empty() ? 0 : 1;             // ANCOUNT
    out[8] = out[9] = out[10] = out[11] = 0;                // NSCOUNT, ARCOUNT (the query's OPT is dropped)
    if (!rdata.empty()) {
      const std::uint8_t rr[] = {0xc0, 12,                   // the name: a pointer to the question's
                                 0, static_cast<std::uint8_t>(qtype), 0, 1,  // TYPE, CLASS IN
                                 0, 0, 0, 60,                // TTL 60 s
                                 0, static_cast<std::uint8_t>(rdata.size())};
      out.insert(out.end(), std::begin(rr), std::end(rr));
      out.insert(out.end(), rdata.begin(), rdata.end());
    }
    boost::system::error_code ignored;
    socket_.send_to(asio::buffer(out), peer_, 0, ignored);
  }

  udp::socket socket_;
  bool silent_;
  std::array<std::uint8_t, 1500> in_{};
  udp::endpoint peer_;
  std::map<std::string, entry> table_;
  std::map<std::string, int> seen_;
  int total_ = 0;
};

// A file of the test's own, removed at the end of the scope.
struct temp_file {
  explicit temp_file(const std::string& text) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("tessera-resolver-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
    std::ofstream(path) << text;
  }
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  std::filesystem::path path;
};

// Points c-ares at a hosts file of the test's own (CARES_HOSTS) for the scope.
struct hosts_override {
  explicit hosts_override(const std::string& text) : file(text) { ::setenv("CARES_HOSTS", file.path.c_str(), 1); }
  ~hosts_override() { ::unsetenv("CARES_HOSTS"); }
  temp_file file;
};

// A resolv.conf without search domains, so the machine's own cannot add queries.
const temp_file& quiet_resolv_conf() {
  static const temp_file f("nameserver 127.0.0.1\noptions ndots:1\n");
  return f;
}

struct outcome {
  std::optional<core::result<net::resolver::endpoints>> result;
  int calls = 0;
  clock_type::duration took{};
};

// Starts a lookup on `r`, recording what the handler gets.
void start(net::resolver& r, outcome& o, const std::string& host, std::chrono::milliseconds deadline) {
  const auto t0 = clock_type::now();
  r.async_resolve(host, 7443, t0 + deadline, [&o, t0](core::result<net::resolver::endpoints> got) {
    ++o.calls;
    o.took = clock_type::now() - t0;
    o.result = std::move(got);
  });
}

outcome resolve(asio::io_context& io, const net::resolver_config& cfg, const std::string& host,
                std::chrono::milliseconds deadline = 2000ms) {
  net::resolver r(io.get_executor(), cfg);
  outcome o;
  start(r, o, host, deadline);
  REQUIRE(run_until(io, [&] { return o.calls > 0; }, deadline + 2000ms));
  return o;
}

// Descriptors this process holds: a lookup that ended must leave none of c-ares' sockets behind.
std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

bool has(const net::resolver::endpoints& eps, const char* address) {
  for (const auto& e : eps)
    if (e.address() == asio::ip::make_address(address) && e.port() == 7443) return true;
  return false;
}

net::resolver_config config_for(const dns_responder& dns) {
  return {.servers = dns.servers(), .resolv_conf = quiet_resolv_conf().path.string()};
}

}  // namespace

TEST_CASE("resolver: an IP literal is returned as it is, without DNS") {
  asio::io_context io;
  dns_responder dns(io);
  for (const char* literal : {"127.0.0.1", "::1", "10.1.2.3"}) {
    const auto o = resolve(io, config_for(dns), literal);
    REQUIRE(o.result->ok());
    REQUIRE(o.result->value().size() == 1);
    CHECK(has(o.result->value(), literal));
  }
  CHECK(dns.queries() == 0);
}

TEST_CASE("resolver: a name from the hosts file, IPv4 and IPv6, without asking DNS") {
  asio::io_context io;
  dns_responder dns(io);
  hosts_override hosts("# the test's own hosts file\n127.0.0.9   hub.tessera.test hub\n::1 hub.tessera.test\n");
  const auto o = resolve(io, config_for(dns), "hub.tessera.test");
  REQUIRE(o.result->ok());
  CHECK(has(o.result->value(), "127.0.0.9"));
  CHECK(has(o.result->value(), "::1"));
  const auto alias = resolve(io, config_for(dns), "hub");
  REQUIRE(alias.result->ok());
  CHECK(has(alias.result->value(), "127.0.0.9"));
  CHECK(dns.queries() == 0);
}

TEST_CASE("resolver: \"localhost\" is a loopback address") {
  asio::io_context io;
  dns_responder dns(io);
  const auto o = resolve(io, config_for(dns), "localhost");
  REQUIRE(o.result->ok());
  REQUIRE(!o.result->value().empty());
  for (const auto& e : o.result->value()) CHECK(e.address().is_loopback());
}

TEST_CASE("resolver: a name only DNS knows is resolved through the configured server") {
  asio::io_context io;
  dns_responder dns(io);
  dns.add("hub.tessera.test", {.v4 = asio::ip::make_address_v4("127.0.0.7"), .v6 = asio::ip::make_address_v6("::1")});
  dns.add("v4only.tessera.test", {.v4 = asio::ip::make_address_v4("127.0.0.8"), .v6 = std::nullopt});
  hosts_override hosts("127.0.0.9 other.tessera.test\n");
  const auto o = resolve(io, config_for(dns), "hub.tessera.test");
  REQUIRE(o.result->ok());
  CHECK(has(o.result->value(), "127.0.0.7"));
  CHECK(has(o.result->value(), "::1"));
  CHECK(dns.queries_for("hub.tessera.test") >= 1);
  const auto v4 = resolve(io, config_for(dns), "v4only.tessera.test");
  REQUIRE(v4.result->ok());
  CHECK(v4.result->value().size() == 1);
  CHECK(has(v4.result->value(), "127.0.0.8"));
}

TEST_CASE("resolver: a name that does not exist fails with a typed error naming it, before the deadline") {
  asio::io_context io;
  dns_responder dns(io);
  hosts_override hosts("127.0.0.9 other.tessera.test\n");
  const auto o = resolve(io, config_for(dns), "nowhere.tessera.test", 3000ms);
  REQUIRE(!o.result->ok());
  CHECK(o.result->error().code == net::errc::resolve_failed);
  INFO(o.result->error().message);
  CHECK(o.result->error().message == "nowhere.tessera.test: Domain name not found");
  CHECK(o.took < 1000ms);
  CHECK(core::error_name(o.result->error().code) == "net.resolve_failed");
}

TEST_CASE("resolver: a DNS server that never answers fails the lookup at the deadline") {
  asio::io_context io;
  dns_responder dns(io, /*silent=*/true);
  hosts_override hosts("127.0.0.9 other.tessera.test\n");
  const auto fds_before = open_fds();
  const auto o = resolve(io, config_for(dns), "hub.tessera.test", 300ms);
  CHECK(open_fds() == fds_before);
  REQUIRE(!o.result->ok());
  CHECK(o.result->error().code == net::errc::resolve_failed);
  INFO(o.result->error().message);
  CHECK(o.result->error().message.find("hub.tessera.test: no answer within") == 0);
  CHECK(o.took >= 290ms);
  CHECK(o.took < 800ms);
  CHECK(dns.queries() >= 1);  // it did ask, and the silence is what failed it
}

TEST_CASE("resolver: cancel() ends a lookup at once with errc::stopped, and a new one can follow") {
  asio::io_context io;
  dns_responder silent(io, /*silent=*/true);
  net::resolver r(io.get_executor(), config_for(silent));
  const auto fds_before = open_fds();
  outcome first;
  start(r, first, "hub.tessera.test", 5000ms);
  REQUIRE(run_until(io, [&] { return silent.queries() >= 1; }));
  CHECK(open_fds() > fds_before);  // c-ares' socket to the server
  r.cancel();
  CHECK(open_fds() == fds_before);
  REQUIRE(run_until(io, [&] { return first.calls > 0; }, 200ms));
  REQUIRE(!first.result->ok());
  CHECK(first.result->error().code == net::errc::stopped);
  CHECK(first.took < 1000ms);

  // A second lookup replaces the first: the first handler is not called again, the second completes.
  outcome second;
  outcome third;
  start(r, second, "hub.tessera.test", 5000ms);
  start(r, third, "127.0.0.1", 5000ms);
  REQUIRE(run_until(io, [&] { return second.calls > 0 && third.calls > 0; }));
  CHECK(second.result->error().code == net::errc::stopped);
  CHECK(third.result->ok());
  run_for(io, 50ms);
  CHECK(first.calls == 1);
  CHECK(second.calls == 1);
  CHECK(third.calls == 1);
}

TEST_CASE("resolver: destroying the resolver mid-lookup calls no handler and leaks no socket") {
  asio::io_context io;
  dns_responder silent(io, /*silent=*/true);
  outcome o;
  const auto fds_before = open_fds();
  {
    net::resolver r(io.get_executor(), config_for(silent));
    start(r, o, "hub.tessera.test", 5000ms);
    REQUIRE(run_until(io, [&] { return silent.queries() >= 1; }));
  }
  CHECK(open_fds() == fds_before);
  run_for(io, 50ms);
  CHECK(o.calls == 0);
}

TEST_CASE("client: resolves the hub's name again before every attempt and reports resolve_failed") {
  asio::io_context io;
  dns_responder dns(io);
  hosts_override hosts("127.0.0.9 other.tessera.test\n");
  auto c = net::client::create(io, test_pki::get().agent_tls(test_pki::get().dev_a), fast_config(),
                               {.host = "gone.tessera.test", .port = 7443, .backoff_initial = 5ms, .backoff_max = 10ms,
                                .jitter = 0.0, .seed = 1, .dns = config_for(dns)});
  std::vector<core::error> failures;
  std::vector<int> asked;  // queries for the name the server had seen when each attempt failed
  c->on_connect_failed([&](const core::error& e, std::chrono::milliseconds) {
    failures.push_back(e);
    asked.push_back(dns.queries_for("gone.tessera.test"));
  });
  c->start();
  REQUIRE(run_until(io, [&] { return failures.size() >= 3; }));
  c->stop();
  for (const auto& e : failures) {
    CHECK(e.code == net::errc::resolve_failed);
    CHECK(e.message == "gone.tessera.test: Domain name not found");
  }
  // No cache between attempts: each one asked the server again.
  CHECK(asked[0] >= 1);
  CHECK(asked[1] > asked[0]);
  CHECK(asked[2] > asked[1]);
}

TEST_CASE("client: reaches a hub by a name only DNS knows, once DNS has learnt it (no cache between attempts)") {
  hub_fixture hub;
  dns_responder dns(hub.io);
  hosts_override hosts("127.0.0.9 other.tessera.test\n");
  // First DNS does not know the name (the hub is "elsewhere"); then it points to where the hub is.
  auto c = net::client::create(hub.io, test_pki::get().agent_tls(test_pki::get().dev_a), fast_config(),
                               {.host = "hub.tessera.test", .port = hub.port, .backoff_initial = 5ms,
                                .backoff_max = 10ms, .jitter = 0.0, .seed = 1, .dns = config_for(dns)});
  std::vector<core::error> failures;
  c->on_connect_failed([&](const core::error& e, std::chrono::milliseconds) { failures.push_back(e); });
  c->on_session([](const std::shared_ptr<net::session>& s) {
    s->on_ready([weak = std::weak_ptr<net::session>(s)] {
      if (auto p = weak.lock()) p->send(hello_for("dev-a"));
    });
  });
  c->start();
  REQUIRE(run_until(hub.io, [&] { return !failures.empty(); }));
  CHECK(failures[0].code == net::errc::resolve_failed);
  dns.add("hub.tessera.test", {.v4 = asio::ip::make_address_v4("127.0.0.1"), .v6 = std::nullopt});
  REQUIRE(run_until(hub.io, [&] { return !hub.hellos.empty(); }, 5000ms));
  CHECK(hub.hellos[0] == "dev-a");
  c->stop();
}
