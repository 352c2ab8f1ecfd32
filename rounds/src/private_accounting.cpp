// The private kind's accountants (private_aggregation.hpp): what a round costs, against the model's
// users and, with the devices' noise, against the hub; and the budget that stops the run.
#include <cstdio>
#include <optional>

#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

void private_aggregation::restore(core::rdp_accountant a, double clip, std::optional<core::rdp_accountant> against_hub) noexcept {
  privacy_ = std::move(a);
  if (against_hub) hub_privacy_ = std::move(*against_hub);
  if (clip > 0) clip_ = clip;
}

std::optional<core::rdp_accountant> private_aggregation::hub_accountant() const {
  if (!secure_) return std::nullopt;
  return hub_privacy_;
}

std::optional<double> private_aggregation::epsilon_hub() const {
  if (!secure_) return std::nullopt;
  return hub_privacy_.epsilon(config_.dp.delta).epsilon;
}

double private_aggregation::hub_sample_rate() const noexcept { return config_.dp.self_sampling ? config_.dp.sample_rate : 1.0; }

namespace {

// One device more can change two contributions when the cap binds (it may take the place of another
// drawn device): the sensitivity doubles for that round.
core::skellam_mechanism doubled_if(core::skellam_mechanism m, bool doubled) noexcept {
  if (doubled) {
    m.l1 *= 2;
    m.l2 *= 2;
  }
  return m;
}

}  // namespace

// ε after one more round of the run's mechanism (the hub's discrete Gaussian, or the devices' Skellam;
// twice the sensitivity when the cap binds), for the observer dp.target_epsilon bounds: with the
// devices' noise the hub (amplified only where the devices sample themselves) unless dp.target_observer
// says the model's users.
core::result<core::dp_epsilon> private_aggregation::epsilon_after_round(bool capped) const {
  const dp_config& d = config_.dp;
  if (!secure_)
    return privacy_.epsilon_after(d.sample_rate, core::discrete_gaussian_mechanism{.sigma = capped ? d.noise_multiplier / 2 : d.noise_multiplier},
                                  1, d.delta);
  TESSERA_ASSIGN_OR_RETURN(const private_ring ring, make_private_ring(config_, params_, population(0)));
  const core::skellam_mechanism mech = doubled_if(ring.mechanism, capped);
  if (d.target_observer == dp_observer::hub) return hub_privacy_.epsilon_after(hub_sample_rate(), mech, 1, d.delta);
  return privacy_.epsilon_after(d.sample_rate, mech, 1, d.delta);
}

core::result<void> private_aggregation::check_budget(std::int64_t round, bool capped) const {
  const dp_config& d = config_.dp;
  if (d.adaptive_clip && !std::isfinite(change_noise_multiplier())) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "dp.adaptive_clip.count_noise %.4g must exceed noise_multiplier / 2 = %.4g: the count would spend the whole budget",
                  count_noise(), d.noise_multiplier / 2);
    return make_error(errc::privacy_budget, buf);
  }
  if (d.target_epsilon <= 0) return {};
  TESSERA_ASSIGN_OR_RETURN(const core::dp_epsilon after, epsilon_after_round(capped));
  const double next = after.epsilon;
  if (next <= d.target_epsilon) return {};
  char buf[200];
  const bool against_hub = secure_ && d.target_observer == dp_observer::hub;
  std::snprintf(buf, sizeof buf, "round %lld would take ε%s from %.4g to %.4g, past dp.target_epsilon %.4g (δ %.3g)",
                static_cast<long long>(round), against_hub ? " against the hub" : "", against_hub ? *epsilon_hub() : epsilon(), next,
                d.target_epsilon, d.delta);
  return make_error(errc::privacy_budget,
                    std::string(buf) + (capped ? "; the population exceeds max_devices, which doubles each round's sensitivity (raise "
                                                 "max_devices past it)"
                                               : ""));
}

// One round's release composed: the hub's discrete Gaussian against the users (the hub held the sum),
// or the devices' Skellam against both observers.
core::result<void> private_aggregation::compose_round(bool capped, std::size_t population) {
  const dp_config& d = config_.dp;
  if (!secure_) {
    privacy_.compose(d.sample_rate, core::discrete_gaussian_mechanism{.sigma = capped ? d.noise_multiplier / 2 : d.noise_multiplier}, 1);
    return {};
  }
  TESSERA_ASSIGN_OR_RETURN(const private_ring ring, make_private_ring(config_, params_, population));
  const core::skellam_mechanism mech = doubled_if(ring.mechanism, capped);
  privacy_.compose(d.sample_rate, mech, 1);
  hub_privacy_.compose(hub_sample_rate(), mech, 1);  // unamplified where the hub drew the sample
  return {};
}

}  // namespace tessera::rounds
