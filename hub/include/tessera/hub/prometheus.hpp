// tessera/hub/prometheus.hpp — metrics as Prometheus reads them: the text exposition format 0.0.4.
//
// A scrape is written from scratch each time: the hub keeps plain numbers (its counters, a histogram
// per duration) and an `exposition` turns them into families, each with its # HELP and # TYPE lines.
// Names are checked against Prometheus' grammar by assertion (they are ours, never a peer's); label
// values are escaped. A label whose values come from peers (a refusal's code) goes through a
// `labelled_counter`, which keeps at most a fixed number of distinct values and counts the rest as
// "other": a rogue device cannot grow the scrape or the hub's memory.
//
//   hub::prom::histogram round_seconds({1, 5, 30, 120, 600});
//   round_seconds.observe(3.2);
//   hub::prom::exposition out;
//   out.gauge("tessera_hub_round", "The round in progress, or the last one", 12);
//   out.histogram("tessera_hub_round_duration_seconds", "Planning to checkpoint", round_seconds);
//   serve(out.text());   // Content-Type: hub::prom::content_type
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::hub::prom {

inline constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

// Observations counted into fixed buckets (upper bounds, ascending, +Inf implied), with their sum.
class histogram {
 public:
  explicit histogram(std::vector<double> upper_bounds);
  void observe(double value);
  [[nodiscard]] const std::vector<double>& bounds() const noexcept { return bounds_; }
  // Observations ≤ bounds()[i] (cumulative), as the format wants them.
  [[nodiscard]] std::uint64_t cumulative(std::size_t i) const noexcept;
  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] double sum() const noexcept { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// Counts by one label value. At most `max_values` distinct values are kept; later new ones are counted
// under "other". Values are reduced to [a-z0-9_.:-] (others become '_') and 64 characters.
class labelled_counter {
 public:
  explicit labelled_counter(std::size_t max_values = 32) : max_values_(max_values) {}
  void add(std::string_view value, double n = 1);
  [[nodiscard]] const std::map<std::string, double>& values() const noexcept { return values_; }
  [[nodiscard]] double total() const noexcept;

 private:
  std::size_t max_values_;
  std::map<std::string, double> values_;
};

using label_set = std::vector<std::pair<std::string, std::string>>;

// One scrape's text. Each family is written once, with its samples.
class exposition {
 public:
  void gauge(std::string_view name, std::string_view help, double value, const label_set& labels = {});
  void counter(std::string_view name, std::string_view help, double value);
  // A counter family with one label, one sample per value (none when nothing was counted yet).
  void counter(std::string_view name, std::string_view help, std::string_view label, const labelled_counter& c);
  // A gauge family whose samples differ in their labels (e.g. an info metric, a state set).
  void gauges(std::string_view name, std::string_view help, const std::vector<std::pair<label_set, double>>& samples);
  void histogram(std::string_view name, std::string_view help, const prom::histogram& h);
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

 private:
  void family(std::string_view name, std::string_view help, std::string_view type);
  void sample(std::string_view name, const label_set& labels, double value);
  std::string text_;
};

// A sample's value as the format spells it: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
[[nodiscard]] std::string format_value(double v);
// A label value with \, " and newline escaped.
[[nodiscard]] std::string escape_label_value(std::string_view v);
// [a-zA-Z_:][a-zA-Z0-9_:]*
[[nodiscard]] bool valid_metric_name(std::string_view name) noexcept;

}  // namespace tessera::hub::prom
