#include "tessera/core/data/stats_vector.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera::core {
namespace {

constexpr std::int64_t k_most_examples = std::int64_t{1} << 24;  // exact in float32

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

bool classifies(task_kind task) { return task == task_kind::classification; }

result<void> check_scale(const stats_scale& s, std::size_t features) {
  if (s.max_examples < 1 || s.max_examples > k_most_examples)
    return make_error(errc::invalid_argument, "the statistics' max_examples " + std::to_string(s.max_examples) + " lies outside 1.." +
                                                  std::to_string(k_most_examples));
  if (s.bounds.size() != 1 && s.bounds.size() != features + 1)
    return make_error(errc::invalid_argument, std::to_string(s.bounds.size()) + " statistics bounds for " + std::to_string(features) +
                                                  " features: one for all, or one per feature and the target's");
  for (const double b : s.bounds)
    if (!(std::isfinite(b) && b > 0)) return make_error(errc::invalid_argument, "the statistics' bound " + number(b) + " is not a positive finite number");
  return {};
}

// The counts' scale: the power of two at or above max_examples.
double count_scale(const stats_scale& s) {
  std::int64_t c = 1;
  while (c < s.max_examples) c <<= 1;
  return static_cast<double>(c);
}

result<void> check_examples(std::int64_t n, const stats_scale& s) {
  if (n > s.max_examples)
    return make_error(errc::invalid_argument, "this device holds " + std::to_string(n) + " examples, more than the " +
                                                  std::to_string(s.max_examples) + " the request was scaled for");
  return {};
}

result<std::vector<float>> divide(std::span<const double> values, std::span<const double> scales) {
  std::vector<float> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i] / scales[i];
    if (!(std::abs(v) <= 1)) return make_error(errc::invalid_argument, "value " + std::to_string(i) + " lies beyond its scale");
    out[i] = static_cast<float>(v);
  }
  return out;
}

result<std::int64_t> count_of(double v, const std::string& what) {
  const double r = std::nearbyint(v);
  if (!(std::abs(v - r) <= 0.25) || r < 0)
    return make_error(errc::bad_format, "the released sum's " + what + " " + number(v) + " is no count");
  return static_cast<std::int64_t>(r);
}

}  // namespace

std::size_t sums_vector_length(std::int64_t features, task_kind task, std::int64_t outputs) noexcept {
  return 1 + static_cast<std::size_t>(features) + (classifies(task) ? static_cast<std::size_t>(outputs) : 1) + 1;
}

std::size_t spread_vector_length(std::int64_t features, task_kind task) noexcept {
  return 1 + static_cast<std::size_t>(features) + (classifies(task) ? 0 : 1);
}

result<std::vector<double>> sums_scales(std::int64_t features, task_kind task, std::int64_t outputs, const stats_scale& scale) {
  TESSERA_TRY(check_scale(scale, static_cast<std::size_t>(features)));
  const double c = count_scale(scale);
  std::vector<double> out(sums_vector_length(features, task, outputs), c);
  for (std::size_t j = 0; j < static_cast<std::size_t>(features); ++j) out[1 + j] = c * scale.feature_bound(j);
  if (!classifies(task)) out[1 + static_cast<std::size_t>(features)] = c * scale.target_bound();
  return out;  // the clipped count's scale, last, is C
}

result<std::vector<double>> spread_scales(std::span<const double> mean, double target_mean, task_kind task, const stats_scale& scale) {
  TESSERA_TRY(check_scale(scale, mean.size()));
  const double c = count_scale(scale);
  const auto square = [&](double bound, double m) { return c * (bound + std::abs(m)) * (bound + std::abs(m)); };
  std::vector<double> out{c};
  for (std::size_t j = 0; j < mean.size(); ++j) out.push_back(square(scale.feature_bound(j), mean[j]));
  if (!classifies(task)) out.push_back(square(scale.target_bound(), target_mean));
  for (const double s : out)
    if (!std::isfinite(s)) return make_error(errc::invalid_argument, "the statistics' second pass: a mean so large its squares overflow");
  return out;
}

result<std::vector<float>> sums_vector(const stats_sums& s, task_kind task, const stats_scale& scale) {
  const std::int64_t features = static_cast<std::int64_t>(s.sum.size());
  const std::int64_t outputs = classifies(task) ? static_cast<std::int64_t>(s.label_counts.size()) : 1;
  TESSERA_ASSIGN_OR_RETURN(const auto scales, sums_scales(features, task, outputs, scale));
  TESSERA_TRY(check_examples(s.examples, scale));
  std::vector<double> v{static_cast<double>(s.examples)};
  v.insert(v.end(), s.sum.begin(), s.sum.end());
  if (classifies(task)) {
    for (const auto c : s.label_counts) v.push_back(static_cast<double>(c));
  } else {
    v.push_back(s.target_sum);
  }
  v.push_back(static_cast<double>(s.clipped));
  auto out = divide(v, scales);
  if (!out) return make_error(errc::invalid_argument, "the statistics were not measured within their bounds");
  return out;
}

result<std::vector<float>> spread_vector(const stats_spread& s, std::span<const double> mean, double target_mean, task_kind task,
                                         const stats_scale& scale) {
  TESSERA_ASSIGN_OR_RETURN(const auto scales, spread_scales(mean, target_mean, task, scale));
  TESSERA_TRY(check_examples(s.examples, scale));
  if (s.sq_dev.size() != mean.size())
    return make_error(errc::invalid_argument, std::to_string(s.sq_dev.size()) + " squared deviations for " + std::to_string(mean.size()) + " means");
  std::vector<double> v{static_cast<double>(s.examples)};
  v.insert(v.end(), s.sq_dev.begin(), s.sq_dev.end());
  if (!classifies(task)) v.push_back(s.target_sq_dev);
  auto out = divide(v, scales);
  if (!out) return make_error(errc::invalid_argument, "the statistics were not measured within their bounds");
  return out;
}

result<stats_sums> sums_from_vector(std::span<const double> v, std::int64_t features, task_kind task, std::int64_t outputs,
                                    const stats_scale& scale) {
  TESSERA_ASSIGN_OR_RETURN(const auto scales, sums_scales(features, task, outputs, scale));
  if (v.size() != scales.size())
    return make_error(errc::bad_format, "a released sum of " + std::to_string(v.size()) + " values, the first pass has " + std::to_string(scales.size()));
  stats_sums out;
  TESSERA_ASSIGN_OR_RETURN(out.examples, count_of(v[0] * scales[0], "example count"));
  for (std::int64_t j = 0; j < features; ++j) out.sum.push_back(v[1 + static_cast<std::size_t>(j)] * scales[1 + static_cast<std::size_t>(j)]);
  const std::size_t rest = 1 + static_cast<std::size_t>(features);
  TESSERA_ASSIGN_OR_RETURN(out.clipped, count_of(v.back() * scales.back(), "count of clipped examples"));
  if (classifies(task)) {
    std::int64_t total = 0;
    for (std::size_t k = rest; k + 1 < v.size(); ++k) {
      TESSERA_ASSIGN_OR_RETURN(const std::int64_t c, count_of(v[k] * scales[k], "count of class " + std::to_string(k - rest)));
      out.label_counts.push_back(static_cast<std::uint64_t>(c));
      total += c;
    }
    if (total != out.examples)
      return make_error(errc::bad_format, "the released label histogram counts " + std::to_string(total) + " examples, not " +
                                              std::to_string(out.examples));
  } else {
    out.target_sum = v[rest] * scales[rest];
  }
  return out;
}

result<stats_spread> spread_from_vector(std::span<const double> v, std::span<const double> mean, double target_mean, task_kind task,
                                        const stats_scale& scale, double resolution, std::vector<double>* floor) {
  TESSERA_ASSIGN_OR_RETURN(const auto scales, spread_scales(mean, target_mean, task, scale));
  if (v.size() != scales.size())
    return make_error(errc::bad_format, "a released sum of " + std::to_string(v.size()) + " values, the second pass has " + std::to_string(scales.size()));
  stats_spread out;
  TESSERA_ASSIGN_OR_RETURN(out.examples, count_of(v[0] * scales[0], "example count"));
  const auto square = [&](std::size_t i) -> result<double> {
    if (v[i] < -resolution) return make_error(errc::bad_format, "the released sum's squared deviation " + std::to_string(i - 1) + " is negative");
    return std::max(0.0, v[i]) * scales[i];
  };
  for (std::size_t j = 0; j < mean.size(); ++j) {
    TESSERA_ASSIGN_OR_RETURN(const double s, square(1 + j));
    out.sq_dev.push_back(s);
    if (floor != nullptr) floor->push_back(resolution * scales[1 + j]);
  }
  if (!classifies(task)) {
    TESSERA_ASSIGN_OR_RETURN(out.target_sq_dev, square(scales.size() - 1));
  }
  return out;
}

result<std::vector<float>> score_vector(const score_sum& s, std::int64_t max_examples, double loss_bound, bool* clipped) {
  const stats_scale scale{.max_examples = max_examples, .bounds = {loss_bound}};
  TESSERA_TRY(check_scale(scale, 0));
  TESSERA_TRY(check_examples(s.examples, scale));
  const double c = count_scale(scale);
  if (!(s.loss_sum >= 0) || s.correct < 0 || s.correct > s.examples) return make_error(errc::invalid_argument, "a score no evaluation gives");
  const double most = loss_bound * static_cast<double>(s.examples);
  if (clipped != nullptr) *clipped = s.loss_sum > most;
  const std::vector<double> v{static_cast<double>(s.examples), std::min(s.loss_sum, most), static_cast<double>(s.correct)};
  const std::vector<double> scales{c, c * loss_bound, c};
  return divide(v, scales);
}

result<score_sum> score_from_vector(std::span<const double> v, std::int64_t max_examples, double loss_bound) {
  const stats_scale scale{.max_examples = max_examples, .bounds = {loss_bound}};
  TESSERA_TRY(check_scale(scale, 0));
  if (v.size() != k_score_vector_length)
    return make_error(errc::bad_format, "a released score of " + std::to_string(v.size()) + " values, not " + std::to_string(k_score_vector_length));
  const double c = count_scale(scale);
  score_sum out;
  TESSERA_ASSIGN_OR_RETURN(out.examples, count_of(v[0] * c, "example count"));
  TESSERA_ASSIGN_OR_RETURN(out.correct, count_of(v[2] * c, "count of correct predictions"));
  out.loss_sum = v[1] * c * loss_bound;
  if (out.correct > out.examples || out.loss_sum < -1e-9 * c * loss_bound)
    return make_error(errc::bad_format, "a released score no devices could give (" + std::to_string(out.correct) + " correct of " +
                                            std::to_string(out.examples) + ", loss " + number(out.loss_sum) + ")");
  out.loss_sum = std::max(0.0, out.loss_sum);
  return out;
}

}  // namespace tessera::core
