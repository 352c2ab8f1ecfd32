#include "scraper.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "hub_process.hpp"

namespace tessera::bench::hub_scale {

std::size_t scrape_once(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  timeval deadline{.tv_sec = 2, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &deadline, sizeof deadline);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::size_t got = 0;
  bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0;
  constexpr std::string_view request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ok = ok && ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
  char buf[16384];
  std::string head;  // the status line's start, however the bytes arrive
  while (ok) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) ok = false;
    if (n <= 0) break;
    if (head.size() < 12) head.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), 12 - head.size()));
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return ok && head == "HTTP/1.1 200" ? got : 0;
}

void scraper::start(std::uint16_t port, std::chrono::milliseconds interval) {
  stop_ = false;
  thread_ = std::thread([this, port, interval] {
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::size_t n = scrape_once(port);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++(n > 0 ? totals_.done : totals_.failed);
      totals_.bytes += n;
      totals_.seconds += s;
      totals_.max_seconds = std::max(totals_.max_seconds, s);
      next += interval;
      std::this_thread::sleep_until(next);
    }
  });
}

scrape_totals scraper::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  return totals_;
}

double idle_cpu_per_scrape(pid_t hub, std::uint16_t port, int count) {
  const double before = proc_cpu_seconds(hub);
  for (int i = 0; i < count; ++i)
    if (scrape_once(port) == 0) return -1;
  const double after = proc_cpu_seconds(hub);
  return before < 0 || after < 0 ? -1 : (after - before) / count;
}

}  // namespace tessera::bench::hub_scale
