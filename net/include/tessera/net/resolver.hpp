// tessera/net/resolver.hpp — host name to TCP endpoints, without glibc's NSS.
//
// A statically linked agent cannot use getaddrinfo(): glibc loads its name-service modules at run time,
// and a static binary has none, so "hub.example.org" would never resolve on a board. This resolver
// uses c-ares instead, which reads /etc/hosts and /etc/resolv.conf itself and speaks DNS itself. It
// looks in the hosts file first, then asks DNS ("fb"), for both IPv4 and IPv6 addresses. An IP
// literal ("10.0.0.5", "::1") is returned at once, without c-ares.
//
// It runs on the caller's executor, with no thread of its own: c-ares reports each socket it opens
// through its socket-state callback, and the resolver waits on that socket with an Asio descriptor
// (readable/writable) and on c-ares' own retry timeout with a steady_timer, then lets c-ares process
// what is ready. A thread blocked in a lookup could not be cancelled or held to a deadline; this can.
// Every lookup uses a fresh c-ares channel, so resolv.conf and the hosts file are read again each
// time: an agent that resolves on every reconnect follows a hub that moved.
//
// For tests and unusual deployments: resolver_config names other DNS servers ("127.0.0.1:5353") and
// another resolv.conf; the environment variable CARES_HOSTS names another hosts file.
//
//   net::resolver r(strand);                                    // strand: the caller's executor
//   r.async_resolve("hub.example.org", 7443, std::chrono::steady_clock::now() + 5s,
//                   [](core::result<std::vector<tcp::endpoint>> eps) {
//                     if (!eps) return log(eps.error().message);   // "hub.example.org: Domain name not found"
//                     connect_to(eps.value());
//                   });
//   ...
//   r.cancel();                                                 // the handler gets errc::stopped
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/net/error.hpp"

namespace tessera::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct resolver_config {
  std::string servers;      // empty: the name servers of resolv.conf; else "ip[:port],..." e.g. "127.0.0.1:5353,[::1]:53"
  std::string resolv_conf;  // empty: /etc/resolv.conf
};

class resolver {
 public:
  using endpoints = std::vector<tcp::endpoint>;
  using handler = std::function<void(core::result<endpoints>)>;

  // `ex` must be a strand (or a single-threaded context): the resolver and its c-ares channel are
  // used from that executor only, and every member function must be called there.
  explicit resolver(asio::any_io_executor ex, resolver_config cfg = {});
  ~resolver();  // abandons a lookup in flight without calling its handler
  resolver(const resolver&) = delete;
  resolver& operator=(const resolver&) = delete;

  // Resolves `host`; the handler runs once, on the executor, with at least one endpoint (port `port`,
  // hosts-file order then DNS order as c-ares sorts them) or a net::errc::resolve_failed whose
  // message names the host and c-ares' reason, or the deadline that passed. A lookup still in flight
  // is cancelled first (its handler gets errc::stopped).
  void async_resolve(std::string host, std::uint16_t port, std::chrono::steady_clock::time_point deadline, handler h);
  // Ends a lookup in flight; its handler gets errc::stopped. No-op when idle.
  void cancel();

 private:
  struct lookup;
  asio::any_io_executor ex_;
  resolver_config cfg_;
  std::shared_ptr<lookup> current_;
};

}  // namespace tessera::net
