// The private kind of aggregation (DESIGN §6), DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018),
// the noise added by the hub (trusted-hub mode) or, under secure aggregation, by the devices:
//   sample   every registered device independently with probability q (Poisson sampling, which the
//            accountant's amplification assumes); the offered devices drawn take part;
//   plan     IST: G groups of equal width, each device's group drawn from its own key, so that no
//            device's subnet depends on who else was drawn; FedAvg: the whole model;
//   clip     a device's change (trained − received, all its coordinates as one vector) to L2 norm C —
//            on the device, and again here, so a device that does not cannot weigh more;
//   noise    the clipped changes summed over the full model in integer units, discrete Gaussian noise
//            of deviation σ·C (in units, with rounding's margin) added to every coordinate some
//            group trains, divided by its expected contributors q·N·(groups covering it)/G (a fixed
//            denominator: the true count is not released); under secure aggregation every device adds
//            Skellam noise in the ring instead, sized so that the round's expected survivors carry the
//            variance (private_ring_for, noise_contributors_of; a sum with fewer is not released),
//            and the released sums are divided the same way;
//   account  the sampled discrete Gaussian mechanism's RDP, or the sampled Skellam mechanism's (both by
//            Zhu and Wang's bound, core/privacy/rdp.hpp), one step per round.
// One device changes the released vector by its clipped change only (its group's coordinates and the
// shared ones, norm ≤ C), whatever else the round holds: the sensitivity is C for the whole round.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/base/seeds.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/discrete_gaussian.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/rounds/error.hpp"
#include "cohort.hpp"
#include "plain_aggregation.hpp"
#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"

namespace tessera::rounds {
namespace {

// A device's draws for a round: whether it is sampled (uniform in [0, 1) against q) and its group.
struct device_draws {
  double sample = 0;
  std::uint64_t group = 0;
};
core::result<device_draws> draws_of(const crypto::key256& round_key, const std::string& device) {
  crypto::secret_bytes ikm{std::span<const std::byte>(round_key)};  // the round's key: a secret
  core::le_writer(ikm).bytes(std::span(device.data(), device.size()));
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 k, crypto::derive_key(ikm, "tessera dp device v1"));
  crypto::keystream ks(k);
  device_draws d;
  d.sample = ks.next_unit();
  d.group = ks.next();
  return d;
}

// The hub's noise is exact: each accepted change is quantized to units of C/κ and summed in integers,
// and discrete Gaussian noise is added to the sums (crypto/discrete_gaussian.hpp: a floating-point
// Gaussian leaks through its low bits). κ = 2^k units per clip, k ≤ 20 (a unit is a millionth of the
// clip), lower for a large σ so that σ in units stays within the sampler's 2^25. Rounding moves each
// of the n coordinates by at most half a unit, so one device moves the integer sums by at most
// Δ = κ + √n/2 in L2, and noise of scale σ·Δ is the discrete Gaussian mechanism at σ that the
// accountant composes (Canonne, Kamath, Steinke 2020, Theorem 14: unsampled, its Rényi DP is the
// continuous Gaussian's at the same σ; sampled, the accountant takes the general bound, the exact
// sampled-Gaussian analysis not being proven for it).
double units_per_clip(double sigma) {
  const double k = std::floor(std::log2(0x1p24 / std::max(sigma, 1.0)));
  return std::ldexp(1.0, static_cast<int>(std::clamp(k, 4.0, 20.0)));
}

// A clipped change in units of C/κ, its L2 norm held to `bound`: float rounding in the clip can leave
// the change a hair over C, and it is then scaled down until its quantization fits.
void quantize_change(std::span<const float> received, std::span<const float> trained, double units_per_value, double bound,
                     std::span<std::int64_t> out) {
  for (double shrink = 1.0;; shrink *= 1.0 - 1e-6) {
    double norm2 = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = std::llround(shrink * units_per_value * (static_cast<double>(trained[i]) - static_cast<double>(received[i])));
      norm2 += static_cast<double>(out[i]) * static_cast<double>(out[i]);
    }
    if (norm2 <= bound * bound) return;
  }
}

// The variance of the hub's noise of `deviation`, as its exact sampler takes it; an error names what
// the noise was for.
core::result<crypto::variance_fraction> hub_noise_variance(double deviation, std::string_view what) {
  auto variance = crypto::rational_variance(deviation * deviation);
  if (!variance) return make_error(errc::privacy_budget, "dp: the hub's noise on " + std::string(what) + ": " + variance.error().message);
  return variance;
}

// Exact N_Z(0, deviation²) draws from `key`.
core::result<crypto::discrete_gaussian> hub_noise_of(crypto::key256_view key, double deviation, std::string_view what) {
  TESSERA_ASSIGN_OR_RETURN(const crypto::variance_fraction variance, hub_noise_variance(deviation, what));
  return crypto::discrete_gaussian(key, variance);
}

}  // namespace

private_aggregation::private_aggregation(const run_config& config, std::size_t params, std::unique_ptr<aggregation> inner)
    : config_(config),
      params_(params),
      inner_(std::move(inner)),
      plain_(dynamic_cast<plain_aggregation*>(inner_.get())),
      secure_(dynamic_cast<secure_aggregation*>(inner_.get())) {
  TESSERA_ASSERT((plain_ != nullptr) != (secure_ != nullptr));
}

private_aggregation::~private_aggregation() = default;

std::size_t private_aggregation::population(std::size_t offered) const noexcept {
  return std::max(config_.dp.population > 0 ? config_.dp.population : population_, offered);
}

// The contributors a release is divided by (never the real count): q times the devices that could
// have been drawn — the population the hub samples from, or the round's roster when the devices
// sample themselves (only its members can draw themselves in).
double private_aggregation::expected_contributors(std::size_t assigned) const noexcept {
  return config_.dp.sample_rate * static_cast<double>(config_.dp.self_sampling ? assigned : population(assigned));
}

double private_aggregation::count_noise() const noexcept { return count_noise_of(config_.dp, population(0)); }
double private_aggregation::change_noise_multiplier() const noexcept { return change_sigma_of(config_.dp, population(0)); }
double private_aggregation::unit_sensitivity() const noexcept {
  return units_per_clip(change_noise_multiplier()) + std::sqrt(static_cast<double>(params_)) / 2.0;
}

// The privacy budget first, then the round's sample.
core::result<std::vector<device_offer>> private_aggregation::sample(const round_view& v, std::vector<device_offer> offers) {
  // Whether the cap can bind is decided before anyone is drawn, from public counts: a round accounted
  // at twice the sensitivity only when its own sample overflowed would make the charge itself depend
  // on who was drawn. A population within the cap never overflows it, nor does the same population
  // without any one device.
  cap_binds_ = cap_ > 0 && population(offers.size()) > cap_;
  TESSERA_TRY(check_budget(v.round(), cap_binds_));
  if (secure_) TESSERA_TRY(make_private_ring(config_, params_, population(offers.size())));  // a ring that cannot hold the noised sums: say so now
  if (!secure_) {
    // Noise the hub's sampler cannot draw is said before the round trains, not after.
    TESSERA_TRY(hub_noise_variance(change_noise_multiplier() * unit_sensitivity(), "the changes"));
    if (config_.dp.adaptive_clip) TESSERA_TRY(hub_noise_variance(2.0 * count_noise(), "the fitting count"));
  }
  TESSERA_ASSIGN_OR_RETURN(key_, draw_key(seeded_, config_.seed, v.round(), "tessera dp round v1"));
  std::vector<device_offer> sampled;
  for (auto& o : offers) {
    TESSERA_ASSIGN_OR_RETURN(const device_draws d, draws_of(key_, o.id));
    // Devices that sample themselves are all asked: each draws on its own, and the hub never learns it.
    if (config_.dp.self_sampling || d.sample < config_.dp.sample_rate) sampled.push_back(std::move(o));
  }
  over_cap_.clear();
  if (cap_ > 0 && sampled.size() > cap_) {
    // A uniformly random cap_ of the drawn, kept in device order: the cap lowers every drawn device's
    // chance alike, never by its id.
    TESSERA_ASSIGN_OR_RETURN(const crypto::key256 k, crypto::derive_key(key_, "tessera dp cap v1"));
    const std::vector<bool> kept = random_subset(k, sampled.size(), cap_);
    std::vector<device_offer> taken;
    for (std::size_t i = 0; i < sampled.size(); ++i) {
      if (kept[i]) taken.push_back(std::move(sampled[i]));
      else over_cap_.push_back(sampled[i].id);
    }
    sampled = std::move(taken);
  }
  sampled_ = sampled.size();
  return sampled;
}

// A private round runs with whoever was sampled, nobody included: its noise is released all the same
// (skipping it would make the sample depend on the devices). Under secure aggregation, fewer devices
// sampled than a sum needs could release nothing: they are not asked to train (the round still counts
// for the accountant).
core::result<std::size_t> private_aggregation::admit(const round_view&, std::vector<device_offer>& taking,
                                                     std::vector<excluded_device>& excluded) const {
  for (const auto& id : over_cap_)
    excluded.push_back({id, config_.dp.self_sampling
                                ? "not among the " + std::to_string(cap_) + " devices chosen at random to take part (max_devices, devices_per_round)"
                                : "drawn by the sample, but " + std::to_string(cap_) + " others drawn at random fill this round (max_devices, devices_per_round)"});
  const std::size_t least = config_.secure_aggregation.min_aggregate();
  if (secure_ && taking.size() < least) {
    for (const auto& o : taking)
      excluded.push_back({o.id, std::to_string(taking.size()) + " device(s) sampled, below the " + std::to_string(least) +
                                    " a secure sum needs: nothing could be released"});
    taking.clear();
  }
  return taking.size();
}

core::result<std::optional<core::round_plan>> private_aggregation::own_plan(const round_view& v, std::span<const device_offer> taking) {
  if (config_.strategy != strategy_kind::ist) return std::optional(core::make_full_plan(v.full, taking.size()));
  // About ten expected contributors per group unless `groups` says otherwise: the noise is divided
  // by the group's expected contributors.
  const auto expected = static_cast<std::size_t>(std::floor(config_.dp.sample_rate * static_cast<double>(population(taking.size()))));
  const std::size_t groups = config_.groups > 0 ? config_.groups
                                                : std::max<std::size_t>(1, core::default_group_count(v.full, std::max<std::size_t>(1, expected / 10),
                                                                                                     config_.min_width));
  const std::vector<double> equal(groups, 1.0);
  TESSERA_ASSIGN_OR_RETURN(core::round_plan plan, core::make_plan(v.full, equal, groups, {.min_width = config_.min_width, .cut = config_.cut,
                                                                                                  .roll = static_cast<std::uint64_t>(v.completed)},
                                                                  core::plan_seed(config_.seed, static_cast<std::uint64_t>(v.completed))));
  plan.device_group.clear();
  for (const auto& o : taking) {
    TESSERA_ASSIGN_OR_RETURN(const device_draws d, draws_of(key_, o.id));
    plan.device_group.push_back(static_cast<std::size_t>(d.group % groups));
  }
  return std::optional(std::move(plan));
}

core::result<void> private_aggregation::begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) {
  if (secure_) {
    TESSERA_ASSIGN_OR_RETURN(const private_ring ring, make_private_ring(config_, params_, population(assignments.size())));
    secure_->set_noise(secure_aggregation::noise_share{.clip = clip(),
                                                       .summands = ring.summands,
                                                       .sum_variance = ring.mechanism.variance,
                                                       .expected_dropout = config_.dp.expected_dropout,
                                                       .fitted_value = ring.fitted_per_clip * clip(),
                                                       .sample_rate = config_.dp.self_sampling ? config_.dp.sample_rate : 0.0});
  }
  TESSERA_TRY(inner_->begin(v, plan, assignments));
  groups_.clear();
  for (std::size_t g = 0; g < plan.groups; ++g) groups_.push_back(core::make_subnet(v.full, config_.model.compensation, plan, g));
  if (secure_) sum_.assign(params_, 0.0f);
  else units_.assign(params_, 0);
  clipped_ = 0;
  accepted_ = 0;
  return {};
}

std::uint64_t private_aggregation::most_clipped(const assignment& a) const noexcept { return secure_ ? secure_->most_clipped(a) : 1; }

core::result<void> private_aggregation::receive(const round_view& v, assignment& a, std::span<const std::byte> blob) {
  return inner_->receive(v, a, blob);
}

// An accepted update (the hub's noise): its change against what the device was sent, clipped (again)
// to C, quantized, added to the round's integer sums over the full model. The assignment's trained parameters are clipped
// in place. Under secure aggregation the protocol sums.
void private_aggregation::fold(const round_view& v, assignment& a, reached_mask&) {
  if (secure_) return;
  const std::size_t n = core::param_count(a.sub.arch);
  std::vector<float> received(n);
  core::gather(v.full, a.sub, v.params, received);
  // The device's own clip, done again (core::clip_change, as on the device): the upload is not trusted.
  const double c = clip();
  if (core::clip_change(received, a.trained, c) > c || a.clipped > 0) ++clipped_;
  ++accepted_;
  const double kappa = units_per_clip(change_noise_multiplier());
  std::vector<std::int64_t> units(n);
  quantize_change(received, a.trained, kappa / c, unit_sensitivity(), units);
  core::scatter_add(v.full, a.sub, units, units_);
}

core::result<void> private_aggregation::finish(const round_view& v, std::span<const assignment> assignments, std::span<float> params,
                                               reached_mask& reached, round_metrics& m) {
  std::optional<double> fitted_centred;  // under secure aggregation: the released count
  if (secure_) {
    if (secure_->open()) {
      TESSERA_TRY(secure_->release(v, assignments, sum_, reached));
      secure_->note_outcome(m);
      fitted_centred = secure_->outcome().fitted_centred;
    }
  } else {
    plain_->note_bounds(v, m);
  }
  const dp_config& d = config_.dp;
  // How many of the round's groups train each coordinate (the output bias: all of them).
  std::vector<float> cover(params.size(), 0.0f);
  for (const core::subnet& sub : groups_) {
    std::vector<float> local(core::param_count(sub.arch));
    core::gather(v.full, sub, cover, local);
    for (auto& x : local) x += 1.0f;
    core::scatter(v.full, sub, local, cover);
  }
  const std::size_t groups = std::max<std::size_t>(1, groups_.size());
  const double contributors = expected_contributors(assignments.size()) / static_cast<double>(groups);
  const double c = clip();
  // Under secure aggregation the released sums carry the devices' noise already.
  const bool hub_noise = !secure_;
  const double unit = c / units_per_clip(change_noise_multiplier());
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 noise_key, crypto::derive_key(key_, "tessera dp noise v1"));
  std::optional<crypto::discrete_gaussian> noise;
  if (hub_noise) {
    TESSERA_ASSIGN_OR_RETURN(noise, hub_noise_of(noise_key, change_noise_multiplier() * unit_sensitivity(), "the changes"));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (cover[i] == 0.0f) continue;  // trained by no group this round: no release, no noise
    const double noised = hub_noise ? static_cast<double>(units_[i] + noise->next()) * unit : static_cast<double>(sum_[i]);
    params[i] = static_cast<float>(static_cast<double>(params[i]) + noised / (contributors * static_cast<double>(cover[i])));
    // The hub's noised release reaches every coordinate a group trains: the server optimizer steps on
    // them all (under secure aggregation the release marked the released segments).
    if (hub_noise) reached.mark_range(i, 1);
  }
  sum_ = {};
  units_ = {};
  if (d.adaptive_clip) TESSERA_TRY(adapt_clip(c, expected_contributors(assignments.size()), fitted_centred));
  TESSERA_TRY(compose_round(cap_binds_, population(assignments.size())));
  m.dp.clip = c;
  m.dp.epsilon = epsilon();
  m.dp.epsilon_hub = epsilon_hub();
  m.dp.noise = hub_noise ? "hub" : "devices";
  if (!d.self_sampling) m.dp.sampled = sampled_;  // the devices' own draws: nobody counts them
  m.dp.clipped = clipped_;
  if (auto next = check_budget(v.round() + 1, cap_binds_); !next) stop_ = next.error().message;
  return {};
}

// Adaptive clipping after a round's release: the share of contributors whose change fitted, noised
// and over the expected count, moves the clip geometrically toward the target quantile. Under secure
// aggregation the count is the released sum of the devices' ±(k/2)·C values (noised by them,
// `fitted_centred`); withheld, the clip stays.
core::result<void> private_aggregation::adapt_clip(double c, double expected, std::optional<double> fitted_centred) {
  const dp_config& d = config_.dp;
  std::optional<double> fitted;
  if (!secure_) {
    // Each contributor's count value is centred, b − ½ (b = 1 when its change fitted): one device
    // moves the noised sum by ½, the sensitivity Theorem 1 of Andrew et al. assumes for σ_b (an
    // uncentred count moves it by 1 and spends up to twice the ε accounted). The expected
    // contributors' ½ each is added back, a public figure. Doubled, the centred values are ±1 and
    // their sum an integer, noised exactly like the changes.
    const auto doubled = 2 * static_cast<std::int64_t>(accepted_ - clipped_) - static_cast<std::int64_t>(accepted_);
    TESSERA_ASSIGN_OR_RETURN(const crypto::key256 count_key, crypto::derive_key(key_, "tessera dp count noise v1"));
    TESSERA_ASSIGN_OR_RETURN(crypto::discrete_gaussian count, hub_noise_of(count_key, 2.0 * count_noise(), "the fitting count"));
    fitted = static_cast<double>(doubled + count.next()) / 2.0 + expected / 2.0;
  } else if (fitted_centred) {
    fitted = *fitted_centred + expected / 2.0;
  }
  if (fitted) clip_ = c * std::exp(-d.clip_learning_rate * (*fitted / expected - d.target_quantile));
  return {};
}

}  // namespace tessera::rounds
