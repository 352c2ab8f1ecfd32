#include "tessera/rounds/statistics.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/rounds/error.hpp"
#include "tessera/rounds/natural_order.hpp"

namespace tessera::rounds {

stats_gathering::stats_gathering(const core::model_spec& spec, std::int64_t min_examples)
    : spec_(spec), min_examples_(min_examples) {}

core::result<std::vector<excluded_device>> stats_gathering::begin(std::vector<device_offer> offers) {
  std::sort(offers.begin(), offers.end(), [](const device_offer& a, const device_offer& b) { return natural_less(a.id, b.id); });
  std::vector<excluded_device> excluded;
  asked_.clear();
  sums_.clear();
  spreads_.clear();
  counted_.clear();
  dropped_.clear();
  fleet_.emplace(spec_.inputs, spec_.task, spec_.outputs);
  max_examples_ = 0;
  clipped_ = 0;
  for (const device_offer& o : offers) {
    if (o.examples < static_cast<std::uint64_t>(min_examples_)) {
      excluded.push_back({o.id, "it holds " + std::to_string(o.examples) + " examples, fewer than min_stats_examples (" +
                                    std::to_string(min_examples_) + ")"});
      continue;
    }
    asked_.push_back(o.id);
    max_examples_ = std::max(max_examples_, static_cast<std::int64_t>(o.examples));
  }
  if (asked_.empty()) {
    phase_ = phase::idle;
    return make_error(errc::no_devices, "no device holds at least min_stats_examples (" + std::to_string(min_examples_) +
                                            ") examples to measure");
  }
  if (const std::size_t t = masked_ ? secure_sum::fewest_for(*masked_, asked_.size()) : 0; asked_.size() < t) {
    phase_ = phase::idle;
    return make_error(errc::fleet_too_small, std::to_string(asked_.size()) + " device(s) to ask, and their statistics' masked sum is released " +
                                                 "from " + std::to_string(t) + " or more: waiting for more");
  }
  phase_ = phase::sums;
  return excluded;
}

bool stats_gathering::is_asked(const std::string& id) const {
  return std::find(asked_.begin(), asked_.end(), id) != asked_.end();
}

std::vector<std::string> stats_gathering::waiting() const {
  std::vector<std::string> out;
  for (const auto& id : asked_) {
    const bool answered = phase_ == phase::sums ? sums_.contains(id) : spreads_.contains(id);
    const bool gone = std::any_of(dropped_.begin(), dropped_.end(), [&id](const excluded_device& d) { return d.id == id; });
    if (!answered && !gone) out.push_back(id);
  }
  return out;
}

bool stats_gathering::pass_complete() const noexcept {
  return (phase_ == phase::sums || phase_ == phase::spread) && waiting().empty();
}

core::result<void> stats_gathering::add_sums(const std::string& id, const core::stats_sums& sums) {
  if (phase_ != phase::sums || !is_asked(id))
    return make_error(errc::bad_statistics, "device " + id + " sent statistics (pass 1) it was not asked for");
  if (sums_.contains(id)) return make_error(errc::bad_statistics, "device " + id + " sent its statistics (pass 1) twice");
  // Checked now, against a scratch copy, so that nonsense is refused at once, with the device's name.
  core::fleet_stats check(spec_.inputs, spec_.task, spec_.outputs);
  if (auto ok = check.add_sums(sums, "device " + id); !ok) return make_error(errc::bad_statistics, ok.error().message);
  sums_.emplace(id, sums);
  return {};
}

core::result<void> stats_gathering::add_spread(const std::string& id, const core::stats_spread& spread) {
  if (phase_ != phase::spread || !is_asked(id))
    return make_error(errc::bad_statistics, "device " + id + " sent statistics (pass 2) it was not asked for");
  if (spreads_.contains(id)) return make_error(errc::bad_statistics, "device " + id + " sent its statistics (pass 2) twice");
  core::fleet_stats check(spec_.inputs, spec_.task, spec_.outputs);
  const bool accepted = check.add_sums(sums_.at(id), "device " + id).ok();  // as it was in pass 1
  TESSERA_ASSERT(accepted);
  if (auto ok = check.add_spread(spread, counted_.at(id), "device " + id); !ok)
    return make_error(errc::bad_statistics, ok.error().message);
  spreads_.emplace(id, spread);
  return {};
}

void stats_gathering::drop(const std::string& id, const std::string& why) {
  if (!is_asked(id)) return;
  if (std::any_of(dropped_.begin(), dropped_.end(), [&id](const excluded_device& d) { return d.id == id; })) return;
  if (phase_ == phase::sums ? sums_.contains(id) : spreads_.contains(id)) return;  // answered already
  dropped_.push_back({id, why});
}

core::result<void> stats_gathering::finish_pass() {
  TESSERA_ASSERT(pass_complete());
  if (phase_ == phase::sums) {
    // Added in natural order of the ids, whatever order the answers came in.
    std::vector<std::string> answered;
    for (const auto& id : asked_) {
      const auto it = sums_.find(id);
      if (it == sums_.end()) continue;
      TESSERA_TRY(fleet_->add_sums(it->second, "device " + id));
      counted_.emplace(id, it->second.examples);
      answered.push_back(id);
    }
    if (answered.empty()) {
      phase_ = phase::idle;
      return make_error(errc::no_devices, "no device answered the statistics' first pass");
    }
    asked_ = std::move(answered);
    phase_ = phase::spread;
    return {};
  }
  TESSERA_ASSERT(phase_ == phase::spread);
  for (const auto& id : asked_) {
    if (!spreads_.contains(id)) {
      phase_ = phase::idle;
      return make_error(errc::stats_incomplete, "device " + id + " counted in the fleet's mean did not answer the second pass");
    }
  }
  for (const auto& id : asked_) TESSERA_TRY(fleet_->add_spread(spreads_.at(id), counted_.at(id), "device " + id));
  phase_ = phase::done;
  return {};
}

core::stats_scale stats_gathering::scale() const {
  // On the wire every feature's bound and the target's, however the configuration gave them.
  std::vector<double> bounds;
  if (masked_)
    for (std::int64_t j = 0; j <= spec_.inputs; ++j)
      bounds.push_back(masked_->statistics_bounds.size() == 1 ? masked_->statistics_bounds[0] : masked_->statistics_bounds[static_cast<std::size_t>(j)]);
  return {.max_examples = max_examples_, .bounds = std::move(bounds)};
}

core::result<secure_sum> stats_gathering::begin_masked_pass() const {
  TESSERA_ASSERT(masked_ && (phase_ == phase::sums || phase_ == phase::spread));
  const std::size_t length = phase_ == phase::sums ? core::sums_vector_length(spec_.inputs, spec_.task, spec_.outputs)
                                                   : core::spread_vector_length(spec_.inputs, spec_.task);
  return secure_sum::create(*masked_, asked_, length, "statistics pass " + std::to_string(pass()));
}

core::result<void> stats_gathering::add_released(const secure_sum::released& r) {
  TESSERA_ASSERT(masked_ && (phase_ == phase::sums || phase_ == phase::spread));
  const auto fail = [this](errc code, const std::string& why) {
    phase_ = phase::idle;
    return make_error(code, why);
  };
  if (phase_ == phase::sums) {
    auto total = core::sums_from_vector(r.sum, spec_.inputs, spec_.task, spec_.outputs, scale());
    if (!total) return fail(errc::bad_statistics, "the statistics' first pass: " + total.error().message);
    if (auto ok = fleet_->add_sums(total.value(), "the fleet's masked sum"); !ok) return fail(errc::bad_statistics, ok.error().message);
    clipped_ = total.value().clipped;
    asked_ = r.survivors;
    phase_ = phase::spread;
    return {};
  }
  for (const auto& id : asked_)
    if (std::find(r.survivors.begin(), r.survivors.end(), id) == r.survivors.end())
      return fail(errc::stats_incomplete, "device " + id + " counted in the fleet's mean is not in the second pass's sum");
  std::vector<double> floor;
  auto total = core::spread_from_vector(r.sum, fleet_->mean(), fleet_->target_mean(), spec_.task, scale(), r.resolution, &floor);
  if (!total) return fail(errc::bad_statistics, "the statistics' second pass: " + total.error().message);
  if (auto ok = fleet_->add_spread(total.value(), fleet_->sums().examples, "the fleet's masked sum", floor); !ok)
    return fail(errc::bad_statistics, ok.error().message);
  phase_ = phase::done;
  return {};
}

core::result<core::input_normalization> stats_gathering::normalization() const {
  if (phase_ != phase::done) return make_error(errc::stats_incomplete, "the statistics are not complete");
  return fleet_->normalization();
}

nlohmann::json stats_gathering::summary() const {
  nlohmann::json j;
  if (!fleet_) return j;
  const core::stats_sums& s = fleet_->sums();
  j["examples"] = s.examples;
  j["devices"] = asked_;
  if (masked_) j["clipped_examples"] = clipped_;  // with a value beyond its statistics bound
  if (spec_.task == core::task_kind::classification) {
    j["label_counts"] = s.label_counts;
  } else if (s.examples > 0) {
    j["target_mean"] = fleet_->target_mean();
    j["target_std"] = std::sqrt(fleet_->spread().target_sq_dev / static_cast<double>(s.examples));
  }
  return j;
}

}  // namespace tessera::rounds
