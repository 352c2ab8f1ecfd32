// What a monitoring system costs the hub: GET /metrics from the hub's operator endpoint (plain HTTP on
// loopback), every `interval` on a thread of its own while the rounds run, or back to back while the hub
// is idle to measure the hub's CPU time per scrape (utime + stime from /proc around a batch).
// Every socket operation has a 2 s deadline (SO_RCVTIMEO / SO_SNDTIMEO); a scrape that fails is counted.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tessera::bench::hub_scale {

struct scrape_totals {
  std::uint64_t done = 0, failed = 0;
  std::uint64_t bytes = 0;     // response bytes, headers included
  double max_seconds = 0;      // the slowest scrape, connect to close
  double seconds = 0;          // all scrapes together
};

// One GET /metrics; the response's size, or 0 on failure.
[[nodiscard]] std::size_t scrape_once(std::uint16_t port);

class scraper {
 public:
  void start(std::uint16_t port, std::chrono::milliseconds interval);
  // Stops and joins; what it did.
  scrape_totals stop();
  ~scraper() { (void)stop(); }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  scrape_totals totals_;
};

// `count` scrapes back to back against an idle hub: its CPU seconds per scrape (from /proc/<pid>/stat),
// or -1 if a scrape failed.
[[nodiscard]] double idle_cpu_per_scrape(pid_t hub, std::uint16_t port, int count);

}  // namespace tessera::bench::hub_scale
