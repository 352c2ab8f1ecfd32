#include "tessera/core/data/targets.hpp"

#include <cmath>
#include <cstdio>

namespace tessera::core {
namespace {

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

}  // namespace

void target_summary::add(std::span<const float> targets) noexcept {
  for (const float v : targets) {
    const std::int64_t i = examples++;
    if (!std::isfinite(v)) {
      if (first_not_finite < 0) first_not_finite = i;
      continue;
    }
    if (first_fractional < 0 && v != std::floor(v)) {
      first_fractional = i;
      fractional = v;
    }
    if (min_at < 0 || v < min) {
      min = v;
      min_at = i;
    }
    if (max_at < 0 || v > max) {
      max = v;
      max_at = i;
    }
  }
}

result<void> check_targets(const target_summary& s, task_kind task, std::int64_t outputs, const example_locator& where) {
  if (s.first_not_finite >= 0)
    return make_error(errc::not_finite, where(s.first_not_finite) + ": the target is not a finite number");
  if (task == task_kind::regression) {
    if (outputs != 1)
      return make_error(errc::invalid_spec, "regression targets are one number per example; the model has " +
                                                std::to_string(outputs) + " outputs");
    return {};
  }
  if (s.first_fractional >= 0)
    return make_error(errc::bad_format, where(s.first_fractional) + ": label " + number(s.fractional) +
                                            " is not a whole number (labels are class indices)");
  if (s.min_at >= 0 && s.min < 0)
    return make_error(errc::bad_format, where(s.min_at) + ": label " + number(s.min) + " is negative (labels are class indices from 0)");
  if (s.max_at >= 0 && s.max >= static_cast<float>(outputs))
    return make_error(errc::bad_format, where(s.max_at) + ": label " + number(s.max) + ", but the model has " +
                                            std::to_string(outputs) + " classes (labels 0 to " + std::to_string(outputs - 1) + ")");
  return {};
}

result<void> check_targets(const target_summary& s, task_kind task, std::int64_t outputs, const data_source& source) {
  return check_targets(s, task, outputs, [&source](std::int64_t i) { return locate_example(source, i); });
}

}  // namespace tessera::core
