// rounds/src/private_aggregation.hpp — internal: the private kind of aggregation (aggregation.hpp,
// DESIGN §6): differential privacy wrapped around the plain kind (the hub adds the noise) or the secure
// kind (the devices add it in the ring). It owns everything private: the accountant, the round's key,
// the clip adaptive clipping moves, the clipped changes' sum, and why the run stops for its budget. The
// wrapped kind checks each upload as it would in any round (decoded and bounded, or masked) and never
// asks whether the round is private.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/rounds/aggregation.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

class plain_aggregation;
class secure_aggregation;

// Adaptive clipping's count noise σ_b (0 without adaptive clipping), and the changes' noise multiplier
// σ_Δ that spends with it what σ alone would (+infinity when the count would spend it all); both for a
// population (private_ring.cpp).
[[nodiscard]] double count_noise_of(const dp_config& d, std::size_t population) noexcept;
[[nodiscard]] double change_sigma_of(const dp_config& d, std::size_t population) noexcept;

class private_aggregation final : public aggregation {
 public:
  // `inner`: a plain_aggregation or a secure_aggregation.
  private_aggregation(const run_config& config, std::size_t params, std::unique_ptr<aggregation> inner);
  ~private_aggregation() override;

  [[nodiscard]] std::size_t masked_segments() const noexcept override { return inner_->masked_segments(); }
  [[nodiscard]] bool clips() const noexcept override { return true; }
  [[nodiscard]] double task_clip() const noexcept override { return clip(); }
  [[nodiscard]] core::result<std::vector<device_offer>> sample(const round_view& v, std::vector<device_offer> offers) override;
  [[nodiscard]] core::result<std::size_t> admit(const round_view& v, std::vector<device_offer>& taking,
                                                std::vector<excluded_device>& excluded) const override;
  [[nodiscard]] core::result<std::optional<core::round_plan>> own_plan(const round_view& v, std::span<const device_offer> taking) override;
  [[nodiscard]] bool runs_empty() const noexcept override { return true; }
  [[nodiscard]] core::result<void> begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) override;
  [[nodiscard]] std::uint64_t most_clipped(const assignment& a) const noexcept override;
  [[nodiscard]] core::result<void> receive(const round_view& v, assignment& a, std::span<const std::byte> blob) override;
  void fold(const round_view& v, assignment& a, reached_mask& reached) override;
  [[nodiscard]] core::result<void> finish(const round_view& v, std::span<const assignment> assignments, std::span<float> params,
                                          reached_mask& reached, round_metrics& m) override;
  [[nodiscard]] std::string_view stop_reason() const noexcept override { return stop_; }
  [[nodiscard]] const std::string& stop_message() const noexcept { return stop_; }

  // The wrapped secure kind, or null around the plain kind.
  [[nodiscard]] secure_aggregation* secure_part() const noexcept { return secure_; }
  // The registered devices the fixed denominators count (dp.population overrides it).
  void set_population(std::size_t registered) noexcept { population_ = registered; }
  // Sampling and noise from the run's seed (the simulator) instead of the CSPRNG (the hub).
  void use_seeded() noexcept { seeded_ = true; }
  // The most devices a round takes (the hub's max_devices; 0: no bound). The sample is drawn from every
  // device offered; when more are drawn, a uniformly random subset of this size (from the round's key)
  // takes part and the others are left out, named, so no device's chance of being drawn depends on its
  // id. Every round of a run whose population exceeds the cap (whether or not its own sample overflows)
  // is accounted at twice the sensitivity: one device more may take another's place.
  void set_cap(std::size_t most) noexcept { cap_ = most; }
  [[nodiscard]] const core::rdp_accountant& accountant() const noexcept { return privacy_; }
  // With the devices' noise, the accountant against the hub: every round unamplified (the hub knows
  // who was sampled) unless the devices sample themselves; none with the hub's own noise, since the
  // hub then holds the clear sum.
  [[nodiscard]] std::optional<core::rdp_accountant> hub_accountant() const;
  // A resumed run's accountants and the clip adaptive clipping reached (0: dp.clip).
  void restore(core::rdp_accountant a, double clip, std::optional<core::rdp_accountant> against_hub) noexcept;
  // The clip the next round's changes get.
  [[nodiscard]] double clip() const noexcept { return clip_ > 0 ? clip_ : config_.dp.clip; }
  // ε spent so far at dp.delta, against the model's users and (the devices' noise) against the hub.
  [[nodiscard]] double epsilon() const { return privacy_.epsilon(config_.dp.delta).epsilon; }
  [[nodiscard]] std::optional<double> epsilon_hub() const;

 private:
  [[nodiscard]] std::size_t population(std::size_t offered) const noexcept;
  // The sampling rate amplification holds at against the hub: the devices' own when they sample
  // themselves, else 1 (the hub knows who was drawn).
  [[nodiscard]] double hub_sample_rate() const noexcept;
  // `capped`: the cap can bind (cap_binds_), which doubles the round's sensitivity.
  [[nodiscard]] core::result<core::dp_epsilon> epsilon_after_round(bool capped = false) const;
  // Fails when round `round` would pass dp.target_epsilon.
  [[nodiscard]] core::result<void> check_budget(std::int64_t round, bool capped = false) const;
  // Adds the closed round's release to the accountants (private_accounting.cpp).
  [[nodiscard]] core::result<void> compose_round(bool capped, std::size_t population);
  [[nodiscard]] double count_noise() const noexcept;
  [[nodiscard]] double change_noise_multiplier() const noexcept;
  // The hub's noise: one device's L2 bound on the integer sums (κ + √n/2, see the .cpp).
  [[nodiscard]] double unit_sensitivity() const noexcept;
  // Moves the clip after a release (adaptive clipping), from clip `c` and the expected contributors.
  [[nodiscard]] core::result<void> adapt_clip(double c, double expected, std::optional<double> fitted_centred);
  [[nodiscard]] double expected_contributors(std::size_t assigned) const noexcept;

  run_config config_;
  std::size_t params_ = 0;
  std::unique_ptr<aggregation> inner_;
  plain_aggregation* plain_ = nullptr;    // the inner kind, as the one it is
  secure_aggregation* secure_ = nullptr;
  core::rdp_accountant privacy_;          // checkpointed: against the model's users (amplified by sampling)
  core::rdp_accountant hub_privacy_;      // checkpointed: against the hub (the devices' noise only)
  std::size_t population_ = 0;
  std::size_t cap_ = 0;
  bool seeded_ = false;
  double clip_ = 0;                       // adaptive clipping's current clip (0: dp.clip)
  std::string stop_;                      // why the run stopped for its privacy budget
  // The open round: its key (sampling, groups and noise derive from it), its groups, the clipped
  // changes summed over the full model, and its counts.
  crypto::key256 key_{};
  std::vector<core::subnet> groups_;
  std::vector<std::string> over_cap_;     // drawn, but beyond the cap: left out by admit
  bool cap_binds_ = false;                // the cap can bind this round: accounted at twice the sensitivity
  std::vector<float> sum_;                // under secure aggregation: the released sums
  std::vector<std::int64_t> units_;       // the hub's noise: the quantized clipped changes, summed exactly
  std::size_t sampled_ = 0, clipped_ = 0, accepted_ = 0;
};

}  // namespace tessera::rounds
