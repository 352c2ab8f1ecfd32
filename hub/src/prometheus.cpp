#include "tessera/hub/prometheus.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "tessera/core/base/assert.hpp"

namespace tessera::hub::prom {

histogram::histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  TESSERA_ASSERT(std::is_sorted(bounds_.begin(), bounds_.end()));
  TESSERA_ASSERT(std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end());
}

void histogram::observe(double value) {
  if (std::isnan(value)) return;  // a duration is never NaN; one would poison the sum for good
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound ≥ value: "le"
  ++counts_[static_cast<std::size_t>(at - bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::uint64_t histogram::cumulative(std::size_t i) const noexcept {
  return std::accumulate(counts_.begin(), counts_.begin() + static_cast<std::ptrdiff_t>(std::min(i + 1, counts_.size())),
                         std::uint64_t{0});
}

void labelled_counter::add(std::string_view value, double n) {
  std::string v;
  for (char c : value.substr(0, 64)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-';
    v += plain ? c : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : '_';
  }
  if (v.empty()) v = "none";
  if (!values_.contains(v) && values_.size() >= max_values_) v = "other";
  values_[v] += n;
}

double labelled_counter::total() const noexcept {
  double t = 0;
  for (const auto& [k, v] : values_) t += v;
  return t;
}

bool valid_metric_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  TESSERA_ASSERT(r.ec == std::errc{});
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

// HELP text escapes backslash and newline only.
std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

void exposition::family(std::string_view name, std::string_view help, std::string_view type) {
  TESSERA_ASSERT(valid_metric_name(name));
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += escape_help(help);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void exposition::sample(std::string_view name, const label_set& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      TESSERA_ASSERT(valid_metric_name(labels[i].first) && labels[i].first.find(':') == std::string::npos);
      if (i > 0) text_ += ',';
      text_ += labels[i].first;
      text_ += "=\"";
      text_ += escape_label_value(labels[i].second);
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += format_value(value);
  text_ += '\n';
}

void exposition::gauge(std::string_view name, std::string_view help, double value, const label_set& labels) {
  family(name, help, "gauge");
  sample(name, labels, value);
}

void exposition::counter(std::string_view name, std::string_view help, double value) {
  TESSERA_ASSERT(name.ends_with("_total"));
  family(name, help, "counter");
  sample(name, {}, value);
}

void exposition::counter(std::string_view name, std::string_view help, std::string_view label, const labelled_counter& c) {
  TESSERA_ASSERT(name.ends_with("_total"));
  family(name, help, "counter");
  for (const auto& [value, n] : c.values()) sample(name, {{std::string(label), value}}, n);
}

void exposition::gauges(std::string_view name, std::string_view help, const std::vector<std::pair<label_set, double>>& samples) {
  family(name, help, "gauge");
  for (const auto& [labels, v] : samples) sample(name, labels, v);
}

void exposition::histogram(std::string_view name, std::string_view help, const prom::histogram& h) {
  family(name, help, "histogram");
  const std::string base(name);
  for (std::size_t i = 0; i < h.bounds().size(); ++i)
    sample(base + "_bucket", {{"le", format_value(h.bounds()[i])}}, static_cast<double>(h.cumulative(i)));
  sample(base + "_bucket", {{"le", "+Inf"}}, static_cast<double>(h.count()));
  sample(base + "_sum", {}, h.sum());
  sample(base + "_count", {}, static_cast<double>(h.count()));
}

}  // namespace tessera::hub::prom
