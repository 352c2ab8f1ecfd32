// The device's privacy policy against what a hub asks (privacy_policy.hpp).
#include "tessera/edge/privacy_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/crypto/secagg_graph.hpp"
#include "tessera/edge/error.hpp"

namespace tessera::edge {
namespace {

core::error refused(const std::string& why) { return make_error(errc::privacy_policy, why); }

// The noise multiplier the devices' noise carries in a private secure round: each device adds Skellam
// noise of variance p.noise (ring steps²); a released sum has at least `least` contributors, so it
// carries least·p.noise; the ring holds `limit` steps per clip, and one device moves the sum by the
// clipped change and, with adaptive clipping, its count value ±fitted_value as well: a sensitivity
// of limit·√(1 + (fitted_value / clip)²). σ = √(least·noise) / that.
core::result<double> devices_sigma(const crypto::secagg_params& p, std::size_t least) {
  auto ring = crypto::fixed_point::create(p.clip, p.bits, crypto::secagg_summands(p, p.threshold));
  if (!ring) return refused("the round's ring (clip, bits, summands) is not one this device can use: " + ring.error().message);
  const double count = p.fitted_value / p.clip;
  return std::sqrt(static_cast<double>(least) * p.noise) / (static_cast<double>(ring.value().limit()) * std::sqrt(1.0 + count * count));
}

// The threshold and the segments' least contributors against the policy: the fewest devices a sum
// holding this device's input may be released from.
core::result<std::size_t> check_sum_policy(const net::msg::secure_assign& s, const privacy_policy& policy) {
  const crypto::secagg_params& p = s.params;
  if (policy.min_threshold > 0 && p.threshold < policy.min_threshold)
    return refused("the round's threshold " + std::to_string(p.threshold) + " is below this device's privacy.min_threshold " +
                   std::to_string(policy.min_threshold));
  std::size_t least = SIZE_MAX;
  for (const std::uint32_t seg : s.segments) {
    if (seg >= p.segments.size()) return refused("the assignment names segment " + std::to_string(seg) + ", which the round does not have");
    const std::size_t fewest = crypto::secagg_release_minimum(p, seg);
    least = std::min(least, fewest);
    if (fewest < policy.min_group)
      return refused("segment " + std::to_string(seg) + "'s sum may be released from " + std::to_string(fewest) +
                     (fewest > p.segments[seg].min_aggregate ? " device(s) (the contributors its noise is sized for)" : " device(s) (its min_aggregate)") +
                     ", below this device's privacy.min_group " + std::to_string(policy.min_group));
  }
  return least;
}

}  // namespace

std::string policy_figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

core::result<void> check_request_policy(std::string_view what, const privacy_policy& policy, secure_mode secure,
                                        const net::msg::secure_assign* masked) {
  const std::string name(what);
  const answer_mode mode = what == "statistics" ? policy.statistics : policy.evaluation;
  if (mode == answer_mode::off) return refused("this device's privacy." + name + " is off");
  const std::string how = masked != nullptr ? " would be summed with no noise," : " would leave this device in the clear, with no noise,";
  if (policy.min_noise_multiplier > 0)
    return refused("the " + name + how + " and its privacy.min_noise_multiplier is " + policy_figure(policy.min_noise_multiplier));
  if (policy.max_epsilon > 0)
    return refused("the " + name + how + " which no privacy.max_epsilon (" + policy_figure(policy.max_epsilon) + ") can count");
  if (masked != nullptr) {
    TESSERA_TRY(check_sum_policy(*masked, policy));
    return {};
  }
  if (secure == secure_mode::require)
    return refused("the " + name + " would leave this device in the clear, and its secure_aggregation is 'require'");
  return {};
}

core::result<void> check_assignment_policy(const net::msg::assign& a, const core::training_task& task, const privacy_policy& policy,
                                           secure_mode secure) {
  if (a.evaluate) return check_request_policy("evaluation", policy, secure, a.secure ? &*a.secure : nullptr);
  if (!a.secure) {
    if (policy.min_noise_multiplier > 0)
      return refused("the round uploads in the clear, so only the hub could add the noise and this device cannot check it; its "
                     "privacy.min_noise_multiplier is " + policy_figure(policy.min_noise_multiplier));
    if (policy.max_epsilon > 0)
      return refused("the round uploads in the clear: against the hub that spends all of this device's privacy.max_epsilon " +
                     policy_figure(policy.max_epsilon));
    return {};
  }
  const crypto::secagg_params& p = a.secure->params;
  TESSERA_ASSIGN_OR_RETURN(const std::size_t least, check_sum_policy(*a.secure, policy));
  if (policy.max_noise_contributors > 0 && p.noise > 0 && p.noise_contributors > policy.max_noise_contributors)
    return refused("the round's noise is sized for " + std::to_string(p.noise_contributors) + " contributors, each adding 1/" +
                   std::to_string(p.noise_contributors) + " of it; this device's privacy.max_noise_contributors is " +
                   std::to_string(policy.max_noise_contributors));
  if (policy.min_noise_multiplier <= 0 && policy.max_epsilon <= 0) return {};
  if (!(p.noise > 0))
    return refused("the round asks the devices for no noise (its noise is 0 or absent); this device's " +
                   (policy.min_noise_multiplier > 0 ? "privacy.min_noise_multiplier is " + policy_figure(policy.min_noise_multiplier)
                                                    : "privacy.max_epsilon is " + policy_figure(policy.max_epsilon)));
  if (!(task.clip_norm > 0) || std::abs(task.clip_norm - p.clip) > 1e-9 * p.clip)
    return refused("the round's clip of the change (" + policy_figure(task.clip_norm) + ") is not its ring's clip (" + policy_figure(p.clip) +
                   "): the noise is sized for a change it does not bound");
  TESSERA_ASSIGN_OR_RETURN(const double sigma, devices_sigma(p, least));
  if (policy.min_noise_multiplier > 0 && sigma < policy.min_noise_multiplier)
    return refused("the devices' noise carries a noise multiplier of " + policy_figure(sigma) + " (each device's share " + policy_figure(p.noise) +
                   " ring steps², sums of at least " + std::to_string(least) + " devices), below this device's "
                   "privacy.min_noise_multiplier " + policy_figure(policy.min_noise_multiplier));
  return {};
}

std::size_t fewest_contributors(const net::msg::secure_assign& s) noexcept {
  std::size_t least = SIZE_MAX;
  for (const std::uint32_t seg : s.segments)
    if (seg < s.params.segments.size()) least = std::min(least, crypto::secagg_release_minimum(s.params, seg));
  return least;
}

core::result<void> check_roster_threshold(std::size_t threshold, std::size_t neighbours, const privacy_policy& policy) {
  const std::size_t holders = neighbours + 1;
  const std::size_t least = std::max(policy.min_threshold, crypto::secagg_majority(holders));
  if (threshold < least)
    return refused("the round's threshold " + std::to_string(threshold) + " lets " + std::to_string(threshold) + " of the " +
                   std::to_string(holders) + " holders of this device's secrets (its " + std::to_string(neighbours) +
                   " neighbours and itself) recover them; its policy asks for " + std::to_string(least) +
                   (least == policy.min_threshold ? " (privacy.min_threshold)" : " (a majority of them)"));
  return {};
}

}  // namespace tessera::edge
