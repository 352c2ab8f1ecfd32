// bench_hub_scale's command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::bench::hub_scale {

inline constexpr int k_batch = 32;  // the batch size of every assignment

struct options {
  std::string hub;  // tessera-hub; default: next to this binary in the build tree
  std::size_t agents = 500;
  std::size_t cohort = 0;  // devices_per_round: each round's cohort drawn from the agents (0: all of them)
  std::int64_t rounds = 5;
  std::vector<std::int64_t> widths{784, 512, 512, 10};
  std::int64_t min_width = 8;
  std::int64_t steps = 1;  // local steps each agent declares (it trains none)
  std::size_t threads = 1;  // agent io_contexts, one thread each
  std::size_t hub_threads = 0;  // the hub's io_threads (0: one per core)
  double timeout_s = 600;
  bool keep = false;  // keep the run's folder (certificates, hub config, logs, metrics)
  double scrape_ms = 0;  // GET /metrics from the hub's operator endpoint this often during the rounds (0: never)
};

extern const char* const k_usage;

// std::nullopt on any unknown option or out-of-range value.
[[nodiscard]] std::optional<options> parse_options(int argc, char** argv);
// "784-512-512-10".
[[nodiscard]] std::string widths_text(const std::vector<std::int64_t>& widths);

}  // namespace tessera::bench::hub_scale
