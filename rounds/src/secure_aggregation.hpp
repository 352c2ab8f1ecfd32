// rounds/src/secure_aggregation.hpp — internal: the secure kind of aggregation (aggregation.hpp, DESIGN
// §6). An upload is the device's masked change (crypto/secagg.hpp); each round holds the protocol's
// server, which the hub drives through its steps (keys, boxes, masked inputs, unmasking), or the
// simulator's plain sum of the same encodings (add_encoded). The release applies each released
// segment's weighted mean change; a segment with too few contributors is withheld and keeps its values.
// Wrapped by the private kind, each device's input is its clipped change with its share of the noise
// (set_noise before begin) and the released sums go, undivided, to the private kind's sum.
#pragma once

#include <memory>
#include <optional>

#include "tessera/crypto/secagg.hpp"
#include "tessera/rounds/aggregation.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

class secure_aggregation final : public aggregation {
 public:
  // A private round's ring: the clip, the ring's summands, the Skellam variance a released sum carries
  // in steps² (σ's, split among the contributors the noise is sized for: noise_contributors_of), the
  // share of the assigned devices expected not to finish, and the count value adaptive clipping adds
  // (private_ring, make_private_ring).
  struct noise_share {
    double clip = 0;
    std::uint64_t summands = 0;
    double sum_variance = 0;
    double expected_dropout = 0;
    double fitted_value = 0;
    double sample_rate = 0;  // > 0: the devices sample themselves (crypto::secagg_params::sample_rate)
  };

  explicit secure_aggregation(const run_config& config);
  ~secure_aggregation() override;

  [[nodiscard]] std::size_t masked_segments() const noexcept override { return ist_ ? 2 : 1; }
  [[nodiscard]] core::result<std::size_t> admit(const round_view& v, std::vector<device_offer>& taking,
                                                std::vector<excluded_device>& excluded) const override;
  [[nodiscard]] core::result<void> begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) override;
  [[nodiscard]] std::uint64_t most_clipped(const assignment& a) const noexcept override;
  [[nodiscard]] core::result<void> receive(const round_view& v, assignment& a, std::span<const std::byte> blob) override;
  void fold(const round_view&, assignment&, reached_mask&) override {}  // the sums are the protocol's
  [[nodiscard]] core::result<void> finish(const round_view& v, std::span<const assignment> assignments, std::span<float> params,
                                          reached_mask& reached, round_metrics& m) override;

  // The next round's noise (private rounds), or none.
  void set_noise(std::optional<noise_share> n) noexcept { noise_ = n; }
  // The open round's protocol: whether one is open, its parameters and its server (the hub's).
  [[nodiscard]] bool open() const noexcept { return round_ != nullptr; }
  [[nodiscard]] const crypto::secagg_params& params() const;
  [[nodiscard]] crypto::secagg_server& server();
  // The simulator's devices: an unmasked encoding (crypto::secagg_encode for the round's assignments as
  // the roster), added to the plain sum in place of a masked input.
  [[nodiscard]] core::result<void> add_encoded(const assignment& a, const crypto::secagg_encoded& e, std::size_t roster);
  // The released sums into `target`: each segment's weighted mean change added to the model, or (a
  // private round) its noised sum added to the private kind's sum. Ends the open round.
  [[nodiscard]] core::result<void> release(const round_view& v, std::span<const assignment> assignments, std::span<float> target,
                                           reached_mask& reached);
  // How the last released round ended, and its figures into m.
  [[nodiscard]] const secure_outcome& outcome() const noexcept { return outcome_; }
  void note_outcome(round_metrics& m) const;

 private:
  struct open_round;

  bool ist_ = false;
  int bits_ = 32;
  std::optional<noise_share> noise_;
  std::unique_ptr<open_round> round_;
  secure_outcome outcome_;
};

}  // namespace tessera::rounds
