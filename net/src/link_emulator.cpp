#include "tessera/net/link_emulator.hpp"

#include <algorithm>
#include <deque>
#include <list>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "tessera/core/base/rng.hpp"
#include "tessera/net/error.hpp"

namespace tessera::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

struct chunk {
  std::vector<std::byte> bytes;
  clock_type::time_point arrive;
};

}  // namespace

struct link_emulator::impl : std::enable_shared_from_this<impl> {
  struct connection;

  // One direction of one connection: what was read from `src` waits in `queue` until its arrival
  // time, then is written to `dst`.
  struct pipe {
    tcp::socket* src = nullptr;
    tcp::socket* dst = nullptr;
    std::uint64_t* delivered = nullptr;
    std::deque<chunk> queue;
    std::size_t queued = 0;
    clock_type::time_point last_depart{}, last_arrive{};
    std::unique_ptr<asio::steady_timer> timer;
    std::vector<std::byte> buf;
    bool reading = false, writing = false, waiting = false, src_done = false, dst_shut = false;
  };

  struct connection : std::enable_shared_from_this<connection> {
    impl* owner;
    tcp::socket a, b;  // a: the client's side, b: the target's
    pipe up, down;
    asio::steady_timer cut_timer;
    core::rng rng;
    std::uint64_t bytes = 0;
    bool dead = false;
    connection(impl* o, asio::io_context& io, std::uint64_t seed)
        : owner(o), a(io), b(io), cut_timer(io), rng(seed) {
      up.src = &a;
      up.dst = &b;
      down.src = &b;
      down.dst = &a;
      up.timer = std::make_unique<asio::steady_timer>(io);
      down.timer = std::make_unique<asio::steady_timer>(io);
    }

    void kill(bool cut) {
      if (dead) return;
      dead = true;
      if (cut) ++owner->stats.cuts;
      boost::system::error_code ignored;
      a.close(ignored);
      b.close(ignored);
      cut_timer.cancel();
      up.timer->cancel();
      down.timer->cancel();
    }

    void start() {
      const auto chunk_bytes = owner->read_chunk();
      up.buf.resize(chunk_bytes);
      down.buf.resize(chunk_bytes);
      up.delivered = &owner->stats.bytes_to_target;
      down.delivered = &owner->stats.bytes_from_target;
      if (owner->profile.cut_every.count() > 0) {
        cut_timer.expires_after(owner->profile.cut_every);
        cut_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
          if (!ec) self->kill(true);
        });
      }
      read(up);
      read(down);
    }

    void read(pipe& p) {
      if (dead || p.reading || p.src_done || p.queued >= owner->max_queue()) return;
      p.reading = true;
      p.src->async_read_some(asio::buffer(p.buf), [self = shared_from_this(), &p](const boost::system::error_code& ec, std::size_t n) {
        p.reading = false;
        if (self->dead) return;
        if (ec) {  // the sender closed (or failed): deliver what is queued, then pass the close on
          p.src_done = true;
          self->deliver(p);
          return;
        }
        self->bytes += n;
        if (self->owner->profile.cut_after_bytes != 0 && self->bytes > self->owner->profile.cut_after_bytes) {
          self->kill(true);
          return;
        }
        self->enqueue(p, n);
        self->read(p);
      });
    }

    void enqueue(pipe& p, std::size_t n) {
      const link_profile& prof = owner->profile;
      const auto now = clock_type::now();
      // Serialisation: the link sends nothing during a stall, so a send that would start or end in
      // one is pushed past it (chunks are ~50 ms of traffic, so this is close to exact).
      auto depart = owner->after_stalls(std::max(now, p.last_depart));
      if (prof.rate_bits_per_s != 0) {
        depart += std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(n) * 8e9 / static_cast<double>(prof.rate_bits_per_s)));
        if (owner->after_stalls(depart) != depart) depart += prof.stall_for;
      }
      p.last_depart = depart;
      auto arrive = depart + prof.latency;
      if (prof.jitter.count() > 0)
        arrive += std::chrono::microseconds(static_cast<std::int64_t>(rng.uniform() * 1000.0 * static_cast<double>(prof.jitter.count())));
      arrive = std::max(arrive, p.last_arrive);  // a stream keeps its order
      arrive = owner->after_stalls(arrive);
      p.last_arrive = arrive;
      p.queue.push_back({std::vector<std::byte>(p.buf.begin(), p.buf.begin() + static_cast<std::ptrdiff_t>(n)), arrive});
      p.queued += n;
      deliver(p);
    }

    void deliver(pipe& p) {
      if (dead || p.writing || p.waiting) return;
      if (p.queue.empty()) {
        if (p.src_done && !p.dst_shut) {
          p.dst_shut = true;
          boost::system::error_code ignored;
          p.dst->shutdown(tcp::socket::shutdown_send, ignored);
          if (up.dst_shut && down.dst_shut) kill(false);
        }
        return;
      }
      const auto now = clock_type::now();
      if (p.queue.front().arrive > now) {
        p.waiting = true;
        p.timer->expires_at(p.queue.front().arrive);
        p.timer->async_wait([self = shared_from_this(), &p](const boost::system::error_code& ec) {
          p.waiting = false;
          if (!ec) self->deliver(p);
        });
        return;
      }
      p.writing = true;
      asio::async_write(*p.dst, asio::buffer(p.queue.front().bytes),
                        [self = shared_from_this(), &p](const boost::system::error_code& ec, std::size_t n) {
                          p.writing = false;
                          if (self->dead) return;
                          if (ec) {
                            self->kill(false);
                            return;
                          }
                          *p.delivered += n;
                          p.queued -= n;
                          p.queue.pop_front();
                          self->read(p);  // there may be room again
                          self->deliver(p);
                        });
    }
  };

  asio::io_context& io;
  link_profile profile;
  std::string host;
  std::uint16_t port;
  tcp::acceptor acceptor;
  clock_type::time_point started = clock_type::now();
  link_stats stats;
  std::list<std::weak_ptr<connection>> connections;
  bool stopped = false;

  impl(asio::io_context& i, const link_profile& p, std::string h, std::uint16_t po)
      : io(i), profile(p), host(std::move(h)), port(po), acceptor(i) {}

  std::uint64_t rate_bytes() const { return profile.rate_bits_per_s / 8; }
  // Small reads on slow links, so pacing works in steps of about 50 ms.
  std::size_t read_chunk() const {
    if (profile.rate_bits_per_s == 0) return 64u << 10;
    return std::clamp<std::size_t>(static_cast<std::size_t>(rate_bytes() / 20), 512, 16u << 10);
  }
  // About a second of traffic plus the latency in flight; beyond that the relay stops reading.
  std::size_t max_queue() const {
    if (profile.rate_bits_per_s == 0) return 1u << 20;
    const double seconds = 1.0 + std::chrono::duration<double>(profile.latency + profile.jitter).count();
    return std::max<std::size_t>(16u << 10, static_cast<std::size_t>(static_cast<double>(rate_bytes()) * seconds));
  }
  // Nothing arrives during a stall: [k·E, k·E + F) for k ≥ 1 after the start.
  clock_type::time_point after_stalls(clock_type::time_point t) const {
    if (profile.stall_every.count() <= 0 || profile.stall_for.count() <= 0) return t;
    const auto since = t - started;
    const auto k = since / profile.stall_every;
    if (k < 1) return t;
    const auto window = started + k * profile.stall_every;
    return t < window + profile.stall_for ? window + profile.stall_for : t;
  }

  void accept() {
    if (stopped) return;
    auto c = std::make_shared<connection>(this, io, core::mix_seed(profile.seed, stats.connections));
    acceptor.async_accept(c->a, [self = shared_from_this(), c](const boost::system::error_code& ec) {
      if (self->stopped || ec == asio::error::operation_aborted) return;
      if (!ec) {
        ++self->stats.connections;
        std::erase_if(self->connections, [](const auto& w) { return w.expired(); });
        self->connections.push_back(c);
        boost::system::error_code cec;
        tcp::resolver resolver(self->io);
        auto eps = resolver.resolve(self->host, std::to_string(self->port), cec);
        if (!cec) asio::connect(c->b, eps, cec);
        if (cec) {
          c->kill(false);
        } else {
          boost::system::error_code ignored;
          c->a.set_option(tcp::no_delay(true), ignored);
          c->b.set_option(tcp::no_delay(true), ignored);
          c->start();
        }
      }
      self->accept();
    });
  }
};

std::shared_ptr<link_emulator> link_emulator::create(asio::io_context& io, const link_profile& profile,
                                                     std::string target_host, std::uint16_t target_port) {
  return std::make_shared<link_emulator>(io, profile, std::move(target_host), target_port);
}

link_emulator::link_emulator(asio::io_context& io, const link_profile& profile, std::string target_host,
                             std::uint16_t target_port)
    : impl_(std::make_shared<impl>(io, profile, std::move(target_host), target_port)) {}

link_emulator::~link_emulator() { stop(); }

core::result<std::uint16_t> link_emulator::listen(const std::string& address, std::uint16_t port) {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(address, ec);
  if (ec) return make_error(errc::connect_failed, "link emulator: address '" + address + "': " + ec.message());
  const tcp::endpoint ep(addr, port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(errc::connect_failed, "link emulator: listen on " + address + ":" + std::to_string(port) + ": " + ec.message());
  impl_->started = clock_type::now();
  impl_->accept();
  return impl_->acceptor.local_endpoint().port();
}

void link_emulator::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  for (auto& w : impl_->connections)
    if (auto c = w.lock()) c->kill(false);
}

link_stats link_emulator::stats() const {
  link_stats s = impl_->stats;
  const link_profile& p = impl_->profile;
  if (p.stall_every.count() > 0 && p.stall_for.count() > 0)
    s.stalls = static_cast<std::uint64_t>((clock_type::now() - impl_->started) / p.stall_every);
  return s;
}

}  // namespace tessera::net
