#include "options.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace tessera::bench::hub_scale {
namespace {

std::optional<std::vector<std::int64_t>> parse_widths(const std::string& text) {
  std::vector<std::int64_t> w;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto dash = text.find('-', pos);
    const std::string part = text.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1) return std::nullopt;
    w.push_back(v);
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  if (w.size() < 3) return std::nullopt;
  return w;
}

}  // namespace

const char* const k_usage =
    "usage: bench_hub_scale [--hub PATH] [--agents N] [--cohort C] [--rounds R] [--model 784-512-512-10] [--min-width W]\n"
    "                       [--steps S] [--threads T] [--hub-threads H] [--timeout SECONDS] [--scrape-ms MS] [--keep]\n";

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    auto number = [&](double lo, double hi) -> std::optional<double> {
      if (!has_value) return std::nullopt;
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (*end != '\0' || v < lo || v > hi) return std::nullopt;
      return v;
    };
    std::optional<double> v;
    if (arg == "--hub" && has_value) {
      o.hub = argv[++i];
    } else if (arg == "--model" && has_value) {
      auto w = parse_widths(argv[++i]);
      if (!w) return std::nullopt;
      o.widths = *w;
    } else if (arg == "--keep") {
      o.keep = true;
    } else if (arg == "--agents" && (v = number(1, 20000))) {
      o.agents = static_cast<std::size_t>(*v);
    } else if (arg == "--cohort" && (v = number(0, 20000))) {
      o.cohort = static_cast<std::size_t>(*v);
    } else if (arg == "--rounds" && (v = number(1, 10000))) {
      o.rounds = static_cast<std::int64_t>(*v);
    } else if (arg == "--min-width" && (v = number(1, 1 << 20))) {
      o.min_width = static_cast<std::int64_t>(*v);
    } else if (arg == "--steps" && (v = number(1, 1e6))) {
      o.steps = static_cast<std::int64_t>(*v);
    } else if (arg == "--threads" && (v = number(1, 64))) {
      o.threads = static_cast<std::size_t>(*v);
    } else if (arg == "--hub-threads" && (v = number(0, 1024))) {
      o.hub_threads = static_cast<std::size_t>(*v);
    } else if (arg == "--scrape-ms" && (v = number(1, 60000))) {
      o.scrape_ms = *v;
    } else if (arg == "--timeout" && (v = number(1, 86400))) {
      o.timeout_s = *v;
    } else {
      return std::nullopt;
    }
  }
  if (o.hub.empty()) {  // the release tree's layout: build/<preset>/bench/ next to build/<preset>/hub/
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) o.hub = (self.parent_path().parent_path() / "hub" / "tessera-hub").string();
  }
  return o;
}

std::string widths_text(const std::vector<std::int64_t>& widths) {
  std::string s;
  for (std::size_t i = 0; i < widths.size(); ++i) s += (i ? "-" : "") + std::to_string(widths[i]);
  return s;
}

}  // namespace tessera::bench::hub_scale
