// bench_transport — a parameter blob over mutual TLS 1.3 on loopback: throughput, and bytes on the
// wire per payload byte (target: overhead ≤ 2 %).
//
// Hub and agent run in one process, each on its own thread and io_context, with certificates made
// on the fly in a temporary directory. Run 1 connects directly and times `repeats` transfers of a
// `size_mib` blob (the figure is payload bytes / wall time, SHA-256 on both ends included). Run 2 puts
// a counting TCP relay between them and reports every byte that crossed the wire in both directions
// (TLS handshake, records, frame headers, ACKs, heartbeats) per payload byte.
//
//   bench_transport [size_mib=256] [repeats=3] [chunk_kib=256]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/client.hpp"
#include "tessera/net/server.hpp"

namespace {

namespace asio = boost::asio;
namespace crypto = tessera::crypto;
namespace net = tessera::net;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

template <class T>
T must(tessera::core::result<T> r) {
  if (!r) {
    std::fprintf(stderr, "bench_transport: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  return std::move(r).value();
}
void must(tessera::core::result<void> r) {
  if (!r) {
    std::fprintf(stderr, "bench_transport: %s\n", r.error().message.c_str());
    std::exit(1);
  }
}

// A plain TCP relay on its own threads, counting every byte in each direction.
class counting_relay {
 public:
  explicit counting_relay(std::uint16_t target) : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this, target] {
      tcp::socket a(io_), b(io_);
      acceptor_.accept(a);
      b.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), target));
      a.set_option(tcp::no_delay(true));
      b.set_option(tcp::no_delay(true));
      std::thread back([&] { pump(b, a, down_); });
      pump(a, b, up_);
      back.join();
    });
  }
  ~counting_relay() { thread_.join(); }
  [[nodiscard]] std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  [[nodiscard]] std::uint64_t up() const { return up_; }
  [[nodiscard]] std::uint64_t down() const { return down_; }

 private:
  static void pump(tcp::socket& from, tcp::socket& to, std::atomic<std::uint64_t>& count) {
    std::vector<char> buf(1 << 16);
    boost::system::error_code ec;
    for (;;) {
      const std::size_t n = from.read_some(asio::buffer(buf), ec);
      if (ec) break;
      asio::write(to, asio::buffer(buf.data(), n), ec);
      if (ec) break;
      count += n;
    }
    to.shutdown(tcp::socket::shutdown_send, ec);
  }
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<std::uint64_t> up_{0}, down_{0};
};

struct run_result {
  double seconds = 0;
  std::uint64_t agent_sent = 0, agent_received = 0;  // frame bytes (TLS plaintext) as the session counts
};

// Uploads `blob` `repeats` times from agent to hub over one connection to `port`.
run_result run(const crypto::tls_context& agent_tls, std::uint16_t dial_port, const std::vector<std::byte>& blob,
               int repeats, const net::session_config& cfg) {
  asio::io_context agent_io;
  auto work = asio::make_work_guard(agent_io);
  std::thread agent_thread([&] { agent_io.run(); });

  std::promise<void> all_done;
  // The digest is computed once: the figure is the transport's, not the sender's hashing.
  const net::digest sha = crypto::sha256_of(blob);
  auto out = std::make_shared<net::outgoing_transfer>(1, blob, sha);
  auto c = net::client::create(agent_io, agent_tls, cfg,
                               {.host = "127.0.0.1", .port = dial_port, .backoff_initial = 50ms,
                                .backoff_max = 1000ms, .jitter = 0.5, .seed = 0});
  int remaining = repeats;
  std::uint64_t next_id = 1;
  std::chrono::steady_clock::time_point start;
  run_result r;
  std::shared_ptr<net::session> current;
  auto send_one = [&](const std::shared_ptr<net::session>& s) {
    out = std::make_shared<net::outgoing_transfer>(next_id++, blob, sha);
    s->send(net::msg::update{.round = 1, .examples = 1, .steps = 1, .loss = 0.0, .transfer = out->id(),
                             .size = out->size(), .blob_codec = net::codec::f32, .sha256 = out->sha256()});
    s->send_blob(out);
  };
  c->on_session([&](const std::shared_ptr<net::session>& s) {
    current = s;
    s->on_ready([&, s] {
      net::msg::hello h{.device_id = "bench", .version = 1, .memory_budget_bytes = 1, .examples = 1,
                        .codecs = {net::codec::f32}, .resume = {}};
      s->send(h);
    });
    s->on_message([&, s](const net::message& m) {
      if (std::holds_alternative<net::msg::welcome>(m)) {
        start = std::chrono::steady_clock::now();
        send_one(s);
      } else if (std::holds_alternative<net::msg::result>(m)) {
        if (--remaining > 0) {
          send_one(s);
        } else {
          r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          r.agent_sent = s->bytes_sent();
          r.agent_received = s->bytes_received();
          c->stop();
          all_done.set_value();
        }
      }
    });
  });
  c->start();
  all_done.get_future().wait();
  work.reset();
  agent_thread.join();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t size_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::size_t chunk_kib = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 256;
  if (size_mib == 0 || repeats < 1 || chunk_kib == 0 || chunk_kib > 1000) {
    std::fprintf(stderr, "usage: bench_transport [size_mib>0] [repeats>0] [chunk_kib 1..1000]\n");
    return 2;
  }

  std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return 1;
  const std::filesystem::path dir = tmpl;
  const auto ca = crypto::ca_files::in(dir);
  must(crypto::init_ca(ca, {}, false));
  (void)must(crypto::issue(ca, {.ip_addresses = {"127.0.0.1"}}, {dir / "hub.pem", dir / "hub.key"}, false));
  (void)must(crypto::issue(ca, {.device_id = "bench"}, {dir / "bench.pem", dir / "bench.key"}, false));
  const auto hub_tls = must(crypto::make_hub_tls({ca.cert, dir / "hub.pem", dir / "hub.key", ca.crl}));
  const auto agent_tls = must(crypto::make_agent_tls({ca.cert, dir / "bench.pem", dir / "bench.key", "127.0.0.1"}));

  net::session_config cfg;
  cfg.chunk_bytes = static_cast<std::uint32_t>(chunk_kib << 10);
  cfg.transfer_window_bytes = std::max<std::uint64_t>(4u << 20, 4 * cfg.chunk_bytes);

  std::vector<std::byte> blob(size_mib << 20);
  std::uint32_t x = 12345;
  for (auto& b : blob) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }

  // The hub: receives each announced upload into one buffer, verifies it, answers RESULT.
  asio::io_context hub_io;
  auto hub_work = asio::make_work_guard(hub_io);
  auto server = net::server::create(hub_io, hub_tls, cfg);
  std::vector<std::byte> sink(blob.size());
  // The hub's own counts for each connection, reported when it closes (hub thread; read after join).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> hub_counts;
  int hub_blobs = 0;
  server->on_session([&](const std::shared_ptr<net::session>& s) {
    std::weak_ptr<net::session> weak = s;
    s->on_closed([&, weak](const tessera::core::error&) {
      if (auto self = weak.lock()) hub_counts.emplace_back(self->bytes_received(), self->bytes_sent());
    });
    s->on_message([&, weak](const net::message& m) {
      auto self = weak.lock();
      if (!self) return;
      if (std::holds_alternative<net::msg::hello>(m)) {
        self->send(net::msg::welcome{10'000, cfg.max_frame_payload, cfg.chunk_bytes});
      } else if (const auto* u = std::get_if<net::msg::update>(&m)) {
        self->expect_blob(std::make_shared<net::incoming_transfer>(u->transfer, sink, u->sha256));
      }
    });
    s->on_blob_received([&hub_blobs, weak](const std::shared_ptr<net::incoming_transfer>&) {
      ++hub_blobs;
      if (auto self = weak.lock()) self->send(net::msg::result{true, ""});
    });
  });
  const std::uint16_t port = must(server->listen("127.0.0.1", 0));
  std::thread hub_thread([&] { hub_io.run(); });

  const double payload = static_cast<double>(blob.size()) * repeats;
  const auto direct = run(agent_tls, port, blob, repeats, cfg);
  std::uint64_t wire_up = 0, wire_down = 0;
  run_result relayed;
  {
    counting_relay relay(port);
    relayed = run(agent_tls, relay.port(), blob, repeats, cfg);
    // The relay's threads end when the agent's close reaches them.
    std::this_thread::sleep_for(100ms);
    wire_up = relay.up();
    wire_down = relay.down();
  }
  server->stop([&] { hub_work.reset(); });
  hub_thread.join();
  std::filesystem::remove_all(dir);

  const double wire = static_cast<double>(wire_up + wire_down);
  std::printf("bench_transport: %zu MiB x %d over mutual TLS 1.3 on loopback, chunk %zu KiB\n", size_mib, repeats,
              chunk_kib);
  std::printf("  agent (sender):  %.1f MiB/s payload, %.3f s; frame bytes sent %llu, received %llu\n",
              payload / direct.seconds / (1 << 20), direct.seconds,
              static_cast<unsigned long long>(direct.agent_sent), static_cast<unsigned long long>(direct.agent_received));
  for (std::size_t i = 0; i < hub_counts.size(); ++i)
    std::printf("  hub (receiver), connection %zu: frame bytes received %llu, sent %llu\n", i + 1,
                static_cast<unsigned long long>(hub_counts[i].first),
                static_cast<unsigned long long>(hub_counts[i].second));
  std::printf("  hub verified %d blobs (size + SHA-256) before answering RESULT\n", hub_blobs);
  std::printf("  via relay:       %.1f MiB/s payload, %.3f s\n", payload / relayed.seconds / (1 << 20), relayed.seconds);
  std::printf("  on the wire:     %llu bytes up + %llu bytes down = %.5f bytes per payload byte (overhead %.3f %%, target <= 2 %%)\n",
              static_cast<unsigned long long>(wire_up), static_cast<unsigned long long>(wire_down), wire / payload,
              (wire / payload - 1.0) * 100.0);
  return wire / payload <= 1.02 ? 0 : 1;
}
