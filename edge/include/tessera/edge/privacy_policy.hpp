// tessera/edge/privacy_policy.hpp — what this device lets a hub do with its data, checked by the device
// itself against every request (DESIGN §6: the hub may deviate from the protocol).
//
// The hub sends the round's privacy parameters (the sharing threshold, each sum's fewest contributors,
// the devices' share of the DP noise, the clip); a hub that lowers one of them, or drops the noise, must
// meet a refusal naming the field and this device's minimum, not a device that complies. Checked at the
// ASSIGN (check_assignment_policy), at the roster (check_roster_threshold), and for statistics and
// evaluation requests (check_request_policy).
//
//   edge::privacy_policy p{.min_group = 3, .min_noise_multiplier = 0.8};
//   if (auto ok = edge::check_assignment_policy(assign, task, p, edge::secure_mode::require); !ok) refuse(ok.error());
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/net/messages.hpp"

namespace tessera::edge {

// Secure aggregation: use it when the hub asks (allow), refuse rounds without it (require), or refuse
// it (off).
enum class secure_mode { allow, require, off };
inline constexpr auto k_secure_mode_names = core::names_in_order<secure_mode>({"allow", "require", "off"});

// Whether this device answers a kind of request that leaves it in the clear.
enum class answer_mode { allow, off };
inline constexpr auto k_answer_mode_names = core::names_in_order<answer_mode>({"allow", "off"});

struct privacy_policy {
  // The fewest shares that may recover one of this device's secrets (the round's threshold t), over
  // and above a majority of its holders (its neighbours in the roster and itself), which is always
  // required (and at least 2). 0: the majority alone.
  std::size_t min_threshold = 0;
  // The fewest devices a released sum that holds this device's input may have (each segment's release
  // minimum, crypto::secagg_release_minimum, which the device also counts itself at unmasking).
  std::size_t min_group = 2;
  // Differential privacy: the least noise multiplier σ the devices' noise must carry (from each
  // device's Skellam share, the ring's scale and the sums' fewest contributors); a round in the clear
  // or without noise is then refused, since the hub's own noise cannot be checked here, and so are
  // statistics and evaluations, which carry no noise (masked or not). 0: none asked.
  double min_noise_multiplier = 0;
  // Differential privacy: the most contributors the round's noise may be sized for (its
  // noise_contributors, crypto/secagg.hpp). Each device adds the sum's variance over that many, so
  // against the hub and t − 1 colluding devices, who know their own noise, this device's share is
  // what is left: a device that wants more of it caps the count. 0: no cap.
  std::size_t max_noise_contributors = 0;
  // The most ε this device spends against the hub over all the rounds it joins, at `delta`, counted by
  // the device in its own file `ledger` (privacy_budget.hpp); above 0, rounds without the devices'
  // noise are refused, as with min_noise_multiplier. 0: no limit, nothing counted.
  double max_epsilon = 0;
  double delta = 1e-5;
  std::string ledger = "privacy-ledger.json";
  answer_mode statistics = answer_mode::allow;  // the feature statistics before round 1 (masked under secure aggregation)
  answer_mode evaluation = answer_mode::allow;  // scoring a model on the validation split (masked under secure aggregation)
};

// A figure in a refusal (σ, ε, a noise share): four significant digits.
[[nodiscard]] std::string policy_figure(double v);

// A training or evaluation ASSIGN (its task already parsed) against the policy and secure_aggregation.
// Fails with edge::errc::privacy_policy naming the field, the round's value and this device's minimum.
[[nodiscard]] core::result<void> check_assignment_policy(const net::msg::assign& a, const core::training_task& task,
                                                         const privacy_policy& policy, secure_mode secure);
// The fewest devices any sum holding this device's input may be released from (its segments' least
// release minimum); the assignment's segments are checked by check_assignment_policy first.
[[nodiscard]] std::size_t fewest_contributors(const net::msg::secure_assign& s) noexcept;
// The round's threshold against this device's holders once the roster says who they are.
[[nodiscard]] core::result<void> check_roster_threshold(std::size_t threshold, std::size_t neighbours, const privacy_policy& policy);
// A statistics or evaluation request (`what` names it), answered in the clear or, with `masked` (its
// secure part), as a masked sum: then its threshold and least contributors are held to the policy as a
// round's are; `require` refuses it in the clear. Neither carries noise: a policy that asks for
// noise refuses both.
[[nodiscard]] core::result<void> check_request_policy(std::string_view what, const privacy_policy& policy, secure_mode secure,
                                                      const net::msg::secure_assign* masked = nullptr);

}  // namespace tessera::edge
