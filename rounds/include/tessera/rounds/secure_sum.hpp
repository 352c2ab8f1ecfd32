// tessera/rounds/secure_sum.hpp — one sum under secure aggregation outside a training round: a vector
// of values in [−1, 1] from each device, of which the hub learns only the sum over the survivors
// (crypto/secagg.hpp, DESIGN §6). The fleet's statistics travel this way (core/data/stats_vector.hpp):
// each pass is one sum.
//
// One segment, a 64-bit ring (its step is 2^−52 of a value, finer than float32 inputs need), the ring
// sized for every member so the scale is fixed before anyone knows the roster, and the threshold and
// neighbour graph of secure_aggregation: the same protocol, steps and checks as a training round's. The
// hub drives the server through the steps (hub/secure_steps.hpp); tessera-sim adds the same encodings
// unmasked (add_plain), and since the masks cancel in the ring both release the same bits.
//
//   auto s = rounds::secure_sum::create(config.secure_aggregation, members, length, "statistics pass 1");
//   // hub: s.server() through keys, shares, masked inputs, check, unmasking
//   // sim: for each member, TESSERA_TRY(s.add_plain(id, values));
//   auto r = s.finish();            // the survivors and their sum
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/crypto/secagg.hpp"
#include "tessera/rounds/metrics.hpp"
#include "tessera/rounds/offer.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::rounds {

class secure_sum {
 public:
  struct released {
    std::vector<std::string> survivors;  // natural order
    std::vector<double> sum;
    // The largest error the ring leaves in one value of `sum`: survivors × its step (the devices'
    // float32 inputs add at most 2^−24 of each one's own magnitude).
    double resolution = 0;
  };

  // The protocol's parameters for `members` (distinct ids) adding `length` values each; `purpose` names
  // the sum in the rounding keys (no secret: each device's is derived from it and its id).
  [[nodiscard]] static core::result<secure_sum> create(const secure_aggregation_config& sa, std::vector<std::string> members,
                                                       std::size_t length, std::string_view purpose);
  // The shares that unmask a sum over `members` devices (a majority of a secret's holders): fewer
  // members than this and create() refuses (errc::fleet_too_small).
  [[nodiscard]] static std::size_t threshold_for(const secure_aggregation_config& sa, std::size_t members) noexcept;
  // The fewest members a sum over `members` devices can be released from: the threshold, and
  // secure_aggregation's min_aggregate.
  [[nodiscard]] static std::size_t fewest_for(const secure_aggregation_config& sa, std::size_t members) noexcept {
    return std::max(threshold_for(sa, members), sa.min_aggregate());
  }
  secure_sum(secure_sum&&) noexcept;
  secure_sum& operator=(secure_sum&&) noexcept;
  ~secure_sum();

  [[nodiscard]] const crypto::secagg_params& params() const noexcept;
  [[nodiscard]] const std::vector<std::string>& members() const noexcept;
  [[nodiscard]] bool is_member(const std::string& id) const;
  [[nodiscard]] std::array<std::byte, 32> rounding_key(const std::string& id) const;
  // The masked protocol's server (the hub's).
  [[nodiscard]] crypto::secagg_server& server() noexcept;
  // The simulator: a member's values, encoded as its device encodes them and added unmasked.
  [[nodiscard]] core::result<void> add_plain(const std::string& id, const std::vector<float>& values);
  // The sum over the survivors (the masked protocol's, once unmasked; or the plain one): errc::no_devices
  // when it is withheld (too few survivors), with the reason.
  [[nodiscard]] core::result<released> finish() const;

 private:
  struct state;
  explicit secure_sum(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// The devices' scores of a model under secure aggregation (evaluation on the devices): one masked sum of
// core::score_vector over the evaluators, scaled by the most validation examples one holds and
// k_evaluation_loss_bound (a device whose loss per example passes it refuses: a model that bad
// scores nothing worth a precise sum).
inline constexpr double k_evaluation_loss_bound = 1e6;
[[nodiscard]] std::int64_t evaluation_max_examples(std::span<const evaluator> evaluators) noexcept;
[[nodiscard]] core::result<secure_sum> evaluation_sum(const secure_aggregation_config& sa, std::span<const evaluator> evaluators,
                                                      std::int64_t round);
// The released sum into `scores` (federated_scores::add_sum).
[[nodiscard]] core::result<void> add_released_scores(const secure_sum::released& r, std::int64_t max_examples, federated_scores& scores);

}  // namespace tessera::rounds
