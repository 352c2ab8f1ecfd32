#include "tessera/net/resolver.hpp"

#include <ares.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace tessera::net {

namespace {

using clock = std::chrono::steady_clock;

// c-ares' global state is set up once per process; ares_library_init is not itself thread-safe.
int library_status() {
  static std::once_flag once;
  static int status = ARES_SUCCESS;
  std::call_once(once, [] { status = ares_library_init(ARES_LIB_INIT_ALL); });
  return status;
}

core::error failure(const std::string& host, const std::string& why) {
  return make_error(errc::resolve_failed, host + ": " + why);
}

// One socket c-ares opened, waited on through Asio. The descriptor never owns the fd: c-ares closes
// it, after telling us so through the socket-state callback, where the descriptor lets go of it.
struct watch {
  explicit watch(const asio::any_io_executor& ex) : descriptor(ex) {}
  asio::posix::stream_descriptor descriptor;
  ares_socket_t fd = ARES_SOCKET_BAD;
  bool want_read = false;
  bool want_write = false;
  bool reading = false;  // a wait for readable is pending
  bool writing = false;
  bool closed = false;   // c-ares closed the fd; pending waits complete as aborted and are ignored
};

}  // namespace

// One lookup: a c-ares channel, its sockets, its retry timer and the caller's deadline. It owns itself
// through the handlers it has pending; the resolver holds it only to cancel it.
//
//   start ─► ares_getaddrinfo ─┬─ answered from the hosts file at once ─────────────► finish
//                              └─ sockets/timer waits ─► ares_process_fd ─► ... ─────► finish
//   deadline timer / cancel() / ~resolver ─────────────────────────────────────────────► finish
struct resolver::lookup : std::enable_shared_from_this<lookup> {
  lookup(asio::any_io_executor executor, std::string name, std::uint16_t p, clock::time_point deadline, handler h)
      : ex_(std::move(executor)),
        host_(std::move(name)),
        port_(p),
        started_(clock::now()),
        deadline_(deadline),
        on_done_(std::move(h)),
        deadline_timer_(ex_),
        retry_timer_(ex_) {}

  asio::any_io_executor ex_;
  std::string host_;
  std::uint16_t port_;
  clock::time_point started_;
  clock::time_point deadline_;
  handler on_done_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer retry_timer_;  // c-ares' own per-query timeout (ares_timeout)
  ares_channel channel_ = nullptr;
  std::map<ares_socket_t, std::shared_ptr<watch>> watches_;
  std::optional<core::result<endpoints>> outcome_;  // set by the c-ares callback, acted on after it returns
  bool finished_ = false;

  void start(const resolver_config& cfg) {
    auto self = shared_from_this();
    deadline_timer_.expires_at(deadline_);
    deadline_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - self->started_);
      self->finish(failure(self->host_, "no answer within " + std::to_string(waited.count()) + " ms"));
    });

    if (const int s = library_status(); s != ARES_SUCCESS) return finish(failure(host_, ares_strerror(s)));
    ares_options opts{};
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_LOOKUPS;
    opts.sock_state_cb = &lookup::on_socket_state;
    opts.sock_state_cb_data = this;
    // Hosts file first, then DNS, whatever nsswitch.conf or host.conf say: the board may have neither.
    static char lookups[] = "fb";
    opts.lookups = lookups;
    std::string resolv_conf = cfg.resolv_conf;  // c-ares takes a char*, and copies it
    if (!resolv_conf.empty()) {
      mask |= ARES_OPT_RESOLVCONF;
      opts.resolvconf_path = resolv_conf.data();
    }
    if (const int s = ares_init_options(&channel_, &opts, mask); s != ARES_SUCCESS) {
      channel_ = nullptr;
      return finish(failure(host_, std::string("resolver setup: ") + ares_strerror(s)));
    }
    if (!cfg.servers.empty()) {
      if (const int s = ares_set_servers_ports_csv(channel_, cfg.servers.c_str()); s != ARES_SUCCESS) {
        return finish(failure(host_, "name servers \"" + cfg.servers + "\": " + ares_strerror(s)));
      }
    }
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    // ENVHOSTS: CARES_HOSTS, when set, names the hosts file (c-ares falls back to /etc/hosts).
    hints.ai_flags = ARES_AI_NUMERICSERV | ARES_AI_ENVHOSTS;
    const std::string service = std::to_string(port_);
    ares_getaddrinfo(channel_, host_.c_str(), service.c_str(), &hints, &lookup::on_addrinfo, this);
    after_ares();
  }

  // After every call into c-ares: finish if it answered, else wait for its next retry time.
  void after_ares() {
    if (finished_) return;
    if (outcome_) return finish(std::move(*outcome_));
    timeval tv{};
    if (ares_timeout(channel_, nullptr, &tv) == nullptr) return;  // nothing queued: only sockets to wait on
    const auto wait = std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec);
    // Rounded up a millisecond so c-ares finds its timeout passed when the timer fires.
    retry_timer_.expires_after(std::chrono::duration_cast<std::chrono::milliseconds>(wait) + std::chrono::milliseconds(1));
    retry_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      ares_process_fd(self->channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      self->after_ares();
    });
  }

  void arm(const std::shared_ptr<watch>& w) {
    if (w->want_read && !w->reading) {
      w->reading = true;
      w->descriptor.async_wait(asio::posix::descriptor_base::wait_read,
                               [self = shared_from_this(), w](const boost::system::error_code& ec) {
                                 w->reading = false;
                                 self->on_ready(w, true, ec);
                               });
    }
    if (w->want_write && !w->writing) {
      w->writing = true;
      w->descriptor.async_wait(asio::posix::descriptor_base::wait_write,
                               [self = shared_from_this(), w](const boost::system::error_code& ec) {
                                 w->writing = false;
                                 self->on_ready(w, false, ec);
                               });
    }
  }

  void on_ready(const std::shared_ptr<watch>& w, bool readable, const boost::system::error_code& ec) {
    if (ec || finished_ || w->closed) return;
    ares_process_fd(channel_, readable ? w->fd : ARES_SOCKET_BAD, readable ? ARES_SOCKET_BAD : w->fd);
    if (!w->closed && !finished_) arm(w);
    after_ares();
  }

  // Called by c-ares (inside ares_getaddrinfo, ares_process_fd or ares_destroy) when it opens a socket,
  // changes what it waits for, or is about to close it (both flags 0).
  static void on_socket_state(void* data, ares_socket_t fd, int readable, int writable) {
    auto* l = static_cast<lookup*>(data);
    auto it = l->watches_.find(fd);
    if (readable == 0 && writable == 0) {
      if (it == l->watches_.end()) return;
      it->second->closed = true;
      (void)it->second->descriptor.release();  // deregisters from the reactor; c-ares closes the fd
      l->watches_.erase(it);
      return;
    }
    if (it == l->watches_.end()) {
      auto w = std::make_shared<watch>(l->ex_);
      boost::system::error_code ec;
      w->descriptor.assign(fd, ec);
      if (ec) {
        // c-ares cannot be stopped from inside its own callback; record the failure for after_ares().
        if (!l->outcome_) l->outcome_ = failure(l->host_, "cannot watch a resolver socket: " + ec.message());
        return;
      }
      w->fd = fd;
      it = l->watches_.emplace(fd, std::move(w)).first;
    }
    it->second->want_read = readable != 0;
    it->second->want_write = writable != 0;
    if (!l->finished_) l->arm(it->second);
  }

  static void on_addrinfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
    auto* l = static_cast<lookup*>(arg);
    std::unique_ptr<ares_addrinfo, decltype(&ares_freeaddrinfo)> owned(res, &ares_freeaddrinfo);
    if (l->finished_ || l->outcome_) return;  // ARES_EDESTRUCTION after finish(), or a second report
    if (status != ARES_SUCCESS) {
      l->outcome_ = failure(l->host_, ares_strerror(status));
      return;
    }
    endpoints found;
    for (const ares_addrinfo_node* n = res != nullptr ? res->nodes : nullptr; n != nullptr; n = n->ai_next) {
      if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(sockaddr_in)) {
        sockaddr_in sa{};
        std::memcpy(&sa, n->ai_addr, sizeof sa);
        found.emplace_back(asio::ip::address_v4(ntohl(sa.sin_addr.s_addr)), l->port_);
      } else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(sockaddr_in6)) {
        sockaddr_in6 sa{};
        std::memcpy(&sa, n->ai_addr, sizeof sa);
        asio::ip::address_v6::bytes_type bytes;
        std::memcpy(bytes.data(), &sa.sin6_addr, bytes.size());
        found.emplace_back(asio::ip::address_v6(bytes, sa.sin6_scope_id), l->port_);
      }
    }
    if (found.empty()) {
      l->outcome_ = failure(l->host_, "no IPv4 or IPv6 address");
      return;
    }
    l->outcome_ = std::move(found);
  }

  // Ends the lookup and posts the handler with `r`.
  void finish(core::result<endpoints> r) {
    if (finished_) return;
    close_down();
    if (on_done_) asio::post(ex_, [h = std::move(on_done_), r = std::move(r)]() mutable { h(std::move(r)); });
    on_done_ = nullptr;
  }

  // Ends the lookup without a word to the caller: timers stopped, c-ares' sockets closed.
  void close_down() {
    finished_ = true;
    deadline_timer_.cancel();
    retry_timer_.cancel();
    if (channel_ != nullptr) {
      ares_destroy(channel_);  // reports each socket closed (releasing its watch) and aborts queries
      channel_ = nullptr;
    }
    for (auto& [fd, w] : watches_) {
      w->closed = true;
      (void)w->descriptor.release();
    }
    watches_.clear();
  }
};

resolver::resolver(asio::any_io_executor ex, resolver_config cfg) : ex_(std::move(ex)), cfg_(std::move(cfg)) {}

resolver::~resolver() {
  if (current_) current_->close_down();
}

void resolver::async_resolve(std::string host, std::uint16_t port, clock::time_point deadline, handler h) {
  cancel();
  boost::system::error_code ec;
  const auto literal = asio::ip::make_address(host, ec);
  if (!ec) {
    asio::post(ex_, [h = std::move(h), ep = tcp::endpoint(literal, port)] { h(endpoints{ep}); });
    return;
  }
  if (host.empty()) {
    asio::post(ex_, [h = std::move(h)] { h(make_error(errc::resolve_failed, "empty host name")); });
    return;
  }
  current_ = std::make_shared<lookup>(ex_, std::move(host), port, deadline, std::move(h));
  current_->start(cfg_);
}

void resolver::cancel() {
  if (!current_) return;
  current_->finish(make_error(errc::stopped, current_->host_ + ": resolving cancelled"));
  current_.reset();
}

}  // namespace tessera::net
