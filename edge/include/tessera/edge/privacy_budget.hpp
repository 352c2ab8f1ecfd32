// tessera/edge/privacy_budget.hpp — the privacy this device has spent against the hub, kept and capped
// by the device itself.
//
// With the devices' noise under secure aggregation, what the hub can learn of one device is bounded by
// the rounds that device joined: against the hub, which knows who was drawn, sampling amplifies
// nothing, so each round it joins costs one unsampled Skellam release (Agarwal, Kairouz, Liu 2021), of
// the noise the round's parameters give. In a round whose devices sample themselves (the round's
// sample_rate q) the draw is this device's own secret: the round costs the Poisson-sampled release at q. The hub's own accountant says the same, but a hub that lies
// about it, restarts its count or rolls back its checkpoint does not change what this device counts.
// With `privacy.max_epsilon` the device composes each round it is asked to join (RDP, core/privacy),
// refuses one that would take it past the limit at `privacy.delta`, and writes the spending to its own
// file (`privacy.ledger`, crash-safe) before its masked input leaves: a round that then fails is
// counted all the same, never the reverse.
//
// The noise counted is the round's fewest contributors' shares (each segment's release minimum: its
// min_aggregate, or the contributors the noise is sized for if more, which the device checks at
// unmasking): that is, the figure assumes the other devices in a sum added theirs. A
// hub that fills a sum with devices of its own making defeats any noise the others would add; the
// device's own share alone (one contributor) is the figure for that case.
//
//   auto budget = edge::privacy_budget::open("privacy-ledger.json", /*max_epsilon=*/8, /*delta=*/1e-5).value();
//   TESSERA_ASSIGN_OR_RETURN(auto m, edge::round_mechanism(params, least, values));
//   TESSERA_TRY(budget->check(m));   // before training
//   TESSERA_TRY(budget->spend(m));   // before the masked upload
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

#include "tessera/core/base/error.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/secagg.hpp"

namespace tessera::edge {

// The round's release as this device sees it: one device moves a sum by its rounded change (at most
// `limit` steps per clip, with adaptive clipping the count value too, plus a step of rounding on each of
// its `values` coordinates), and the sum carries `least` devices' noise shares.
[[nodiscard]] core::result<core::skellam_mechanism> round_mechanism(const crypto::secagg_params& p, std::size_t least, std::size_t values);

class privacy_budget {
 public:
  // The ledger at `file` (none yet: nothing spent). A file that is not this device's ledger is an
  // error naming it: the device does not start with its spending unknown.
  [[nodiscard]] static core::result<std::unique_ptr<privacy_budget>> open(std::filesystem::path file, double max_epsilon, double delta);

  // Fails (edge::errc::privacy_policy) when one more release `m`, sampled at `q` (1: unsampled), would
  // pass max_epsilon.
  [[nodiscard]] core::result<void> check(const core::skellam_mechanism& m, double q = 1.0) const;
  // Composes `m` at `q` and writes the ledger; an error when the file cannot be written (the upload
  // must not go then).
  [[nodiscard]] core::result<void> spend(const core::skellam_mechanism& m, double q = 1.0);

  [[nodiscard]] double epsilon() const;
  [[nodiscard]] std::int64_t rounds() const noexcept { return spent_.steps(); }

 private:
  privacy_budget(std::filesystem::path file, double max_epsilon, double delta) : file_(std::move(file)), max_(max_epsilon), delta_(delta) {}

  std::filesystem::path file_;
  double max_ = 0;
  double delta_ = 0;
  core::rdp_accountant spent_;
};

}  // namespace tessera::edge
