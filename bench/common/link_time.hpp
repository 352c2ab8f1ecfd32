// Shared by the benchmarks that model slow links: the seconds one device's blobs spend on its link.
#pragma once

#include <cstdint>

namespace tessera::bench {

// A device behind its own link of `rate_kbit` kbit/s and one-way `latency_ms`: a round's download and
// upload take latency + bytes_down·8/rate each way, the device's compute in between (not counted here).
// bench/slow_link checks this model against real rounds over net::link_emulator.
struct link_time {
  double rate_kbit = 1000;
  double latency_ms = 100;

  [[nodiscard]] double seconds(std::uint64_t bytes_down, std::uint64_t bytes_up) const {
    return 2 * latency_ms / 1000.0 + static_cast<double>(bytes_down + bytes_up) * 8.0 / (rate_kbit * 1000.0);
  }
};

}  // namespace tessera::bench
