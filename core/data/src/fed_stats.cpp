#include "tessera/core/data/fed_stats.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tessera::core {
namespace {

constexpr std::size_t k_rows = 64;  // examples read at a time

std::string at(const example_stream& s, std::int64_t i) {
  return s.describe() + ": example " + std::to_string(i) + " (counting from 0)";
}

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

bool all_finite(std::span<const double> v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Reads every example of `s` from the first, k_rows at a time, calling visit(features, target, index).
template <class Visit>
result<std::int64_t> each_example(example_stream& s, Visit&& visit) {
  const auto f = static_cast<std::size_t>(s.feature_count());
  std::vector<float> x(k_rows * f), y(k_rows);
  TESSERA_TRY(s.rewind());
  std::int64_t index = 0;
  for (;;) {
    TESSERA_ASSIGN_OR_RETURN(const std::size_t got, s.read(x, y));
    if (got == 0) break;
    for (std::size_t r = 0; r < got; ++r, ++index)
      TESSERA_TRY(visit(std::span<const float>(x).subspan(r * f, f), y[r], index));
  }
  TESSERA_TRY(s.rewind());
  return index;
}

// x clipped into [−b, b]; `hit` set when it was beyond.
double clip_to(double x, double b, bool& hit) {
  if (x > b) {
    hit = true;
    return b;
  }
  if (x < -b) {
    hit = true;
    return -b;
  }
  return x;
}

result<void> check_bounds(std::span<const double> bounds, std::size_t features) {
  if (!bounds.empty() && bounds.size() != features + 1)
    return make_error(errc::invalid_argument, std::to_string(bounds.size()) + " bounds for " + std::to_string(features) + " features and a target");
  return {};
}

}  // namespace

result<stats_sums> measure_sums(example_stream& stream, task_kind task, std::int64_t outputs, std::span<const double> bounds) {
  const auto f = static_cast<std::size_t>(stream.feature_count());
  stats_sums out;
  out.sum.assign(f, 0.0);
  out.min.assign(f, std::numeric_limits<double>::infinity());
  out.max.assign(f, -std::numeric_limits<double>::infinity());
  if (task == task_kind::classification) out.label_counts.assign(static_cast<std::size_t>(outputs), 0);
  TESSERA_TRY(check_bounds(bounds, f));
  TESSERA_ASSIGN_OR_RETURN(
      out.examples, each_example(stream, [&](std::span<const float> x, float y, std::int64_t i) -> result<void> {
        if (!std::isfinite(y)) return make_error(errc::not_finite, at(stream, i) + ": the target is not a finite number");
        bool hit = false;
        if (task == task_kind::classification) {
          if (y < 0 || y >= static_cast<float>(outputs) || y != std::floor(y))
            return make_error(errc::bad_format, at(stream, i) + ": label " + number(y) + " is not a class index below " +
                                                    std::to_string(outputs));
          ++out.label_counts[static_cast<std::size_t>(y)];
        } else {
          out.target_sum += bounds.empty() ? static_cast<double>(y) : clip_to(y, bounds[f], hit);
        }
        for (std::size_t j = 0; j < f; ++j) {
          if (!std::isfinite(x[j])) return make_error(errc::not_finite, at(stream, i) + ": feature " + std::to_string(j) + " is not finite");
          const double v = bounds.empty() ? static_cast<double>(x[j]) : clip_to(x[j], bounds[j], hit);
          out.sum[j] += v;
          out.min[j] = std::min(out.min[j], v);
          out.max[j] = std::max(out.max[j], v);
        }
        out.clipped += hit ? 1 : 0;
        return {};
      }));
  return out;
}

result<stats_spread> measure_spread(example_stream& stream, std::span<const double> mean, double target_mean,
                                    std::span<const double> bounds) {
  const auto f = static_cast<std::size_t>(stream.feature_count());
  if (mean.size() != f)
    return make_error(errc::invalid_argument, stream.describe() + ": " + std::to_string(f) + " features, but " +
                                                  std::to_string(mean.size()) + " means");
  TESSERA_TRY(check_bounds(bounds, f));
  stats_spread out;
  out.sq_dev.assign(f, 0.0);
  TESSERA_ASSIGN_OR_RETURN(
      out.examples, each_example(stream, [&](std::span<const float> x, float y, std::int64_t i) -> result<void> {
        if (!std::isfinite(y)) return make_error(errc::not_finite, at(stream, i) + ": the target is not a finite number");
        bool hit = false;
        const double dy = (bounds.empty() ? static_cast<double>(y) : clip_to(y, bounds[f], hit)) - target_mean;
        out.target_sq_dev += dy * dy;
        for (std::size_t j = 0; j < f; ++j) {
          const double d = (bounds.empty() ? static_cast<double>(x[j]) : clip_to(x[j], bounds[j], hit)) - mean[j];
          out.sq_dev[j] += d * d;
        }
        return {};
      }));
  return out;
}

fleet_stats::fleet_stats(std::int64_t features, task_kind task, std::int64_t outputs)
    : features_(features), task_(task), outputs_(outputs) {
  const auto f = static_cast<std::size_t>(features);
  sums_.sum.assign(f, 0.0);
  sums_.min.assign(f, std::numeric_limits<double>::infinity());
  sums_.max.assign(f, -std::numeric_limits<double>::infinity());
  if (task == task_kind::classification) sums_.label_counts.assign(static_cast<std::size_t>(outputs), 0);
  mean_.assign(f, 0.0);
  spread_.sq_dev.assign(f, 0.0);
}

result<void> fleet_stats::add_sums(const stats_sums& d, const std::string& who) {
  const auto f = static_cast<std::size_t>(features_);
  const auto bad = [&who](const std::string& what) { return make_error(errc::bad_format, who + "'s statistics: " + what); };
  if (d.examples < 1) return bad("no examples");
  // min and max are absent from a masked sum (stats_vector.hpp): nothing to check them against.
  const bool extremes = !d.min.empty() || !d.max.empty();
  if (d.sum.size() != f || (extremes && (d.min.size() != f || d.max.size() != f)))
    return bad("per-feature figures for " + std::to_string(d.sum.size()) + " features, the model has " + std::to_string(f));
  if (!all_finite(d.sum) || !all_finite(d.min) || !all_finite(d.max) || !std::isfinite(d.target_sum))
    return bad("a value that is not finite");
  for (std::size_t j = 0; extremes && j < f; ++j) {
    if (d.min[j] > d.max[j]) return bad("feature " + std::to_string(j) + " has min > max");
    // A mean outside [min, max] is a sum no examples could give.
    const double m = d.sum[j] / static_cast<double>(d.examples);
    const double slack = 1e-9 * std::max({1.0, std::abs(d.min[j]), std::abs(d.max[j])});
    if (m < d.min[j] - slack || m > d.max[j] + slack) return bad("feature " + std::to_string(j) + "'s mean lies outside its min and max");
  }
  if (task_ == task_kind::classification) {
    if (d.label_counts.size() != static_cast<std::size_t>(outputs_))
      return bad("a histogram of " + std::to_string(d.label_counts.size()) + " classes, the model has " + std::to_string(outputs_));
    std::uint64_t total = 0;
    for (const std::uint64_t c : d.label_counts) {
      if (c > static_cast<std::uint64_t>(d.examples)) return bad("a class count above its example count");
      total += c;
    }
    if (total != static_cast<std::uint64_t>(d.examples))
      return bad("its label histogram counts " + std::to_string(total) + " examples, not " + std::to_string(d.examples));
  } else if (!d.label_counts.empty()) {
    return bad("a label histogram for a regression model");
  }
  sums_.examples += d.examples;
  for (std::size_t j = 0; j < f; ++j) {
    sums_.sum[j] += d.sum[j];
    if (!extremes) continue;
    sums_.min[j] = std::min(sums_.min[j], d.min[j]);
    sums_.max[j] = std::max(sums_.max[j], d.max[j]);
  }
  for (std::size_t k = 0; k < d.label_counts.size(); ++k) sums_.label_counts[k] += d.label_counts[k];
  sums_.target_sum += d.target_sum;
  ++devices_;
  const auto n = static_cast<double>(sums_.examples);
  for (std::size_t j = 0; j < f; ++j) mean_[j] = sums_.sum[j] / n;
  target_mean_ = sums_.target_sum / n;
  return {};
}

result<void> fleet_stats::add_spread(const stats_spread& d, std::int64_t expected, const std::string& who, std::span<const double> floor) {
  const auto bad = [&who](const std::string& what) { return make_error(errc::bad_format, who + "'s statistics (pass 2): " + what); };
  if (d.examples != expected)
    return bad(std::to_string(d.examples) + " examples, but " + std::to_string(expected) + " in pass 1");
  if (d.sq_dev.size() != static_cast<std::size_t>(features_))
    return bad("figures for " + std::to_string(d.sq_dev.size()) + " features, the model has " + std::to_string(features_));
  if (!all_finite(d.sq_dev) || !std::isfinite(d.target_sq_dev)) return bad("a value that is not finite");
  if (std::any_of(d.sq_dev.begin(), d.sq_dev.end(), [](double v) { return v < 0; }) || d.target_sq_dev < 0)
    return bad("a negative sum of squares");
  if (!floor.empty() && floor.size() != d.sq_dev.size())
    return bad("an error bound for " + std::to_string(floor.size()) + " features, the model has " + std::to_string(features_));
  spread_.examples += d.examples;
  for (std::size_t j = 0; j < d.sq_dev.size(); ++j) spread_.sq_dev[j] += d.sq_dev[j];
  if (!floor.empty()) floor_.resize(floor.size(), 0.0);
  for (std::size_t j = 0; j < floor.size(); ++j) floor_[j] += floor[j];
  spread_.target_sq_dev += d.target_sq_dev;
  return {};
}

std::vector<double> fleet_stats::stddev() const {
  std::vector<double> s(spread_.sq_dev.size(), 0.0);
  if (spread_.examples < 1) return s;
  for (std::size_t j = 0; j < s.size(); ++j) s[j] = std::sqrt(spread_.sq_dev[j] / static_cast<double>(spread_.examples));
  return s;
}

result<input_normalization> fleet_stats::normalization() const {
  if (sums_.examples < 1) return make_error(errc::invalid_argument, "no statistics: no device reported any examples");
  if (spread_.examples != sums_.examples)
    return make_error(errc::invalid_argument, "the statistics' second pass covers " + std::to_string(spread_.examples) +
                                                  " examples, the first " + std::to_string(sums_.examples));
  const std::vector<double> sd = stddev();
  input_normalization n;
  n.mean.resize(mean_.size());
  n.std.resize(mean_.size());
  for (std::size_t j = 0; j < mean_.size(); ++j) {
    n.mean[j] = static_cast<float>(mean_[j]);
    const auto s = static_cast<float>(sd[j]);
    // A deviation that is only the rounding of a constant feature is no deviation: scaling by it would
    // blow noise up. The same test scikit-learn's StandardScaler makes.
    // A masked sum's rounding is larger: squares within the ring's error of zero (floor_), or a
    // deviation within float32's rounding of the mean (each device's sums entered the ring as float32),
    // are no deviation either.
    const bool masked = j < floor_.size();
    const bool constant = !(s > 0) || !std::isnormal(s) || sd[j] < 10 * DBL_EPSILON * std::abs(mean_[j]) ||
                          (masked && (spread_.sq_dev[j] <= floor_[j] || sd[j] < 0x1p-20 * std::abs(mean_[j])));
    n.std[j] = constant ? 1.0f : s;
  }
  return n;
}

}  // namespace tessera::core
