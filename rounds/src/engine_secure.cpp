// The engine's secure aggregation (DESIGN §6): the segments of a secure round, the simulator's plain
// sums, and applying the released sums to the model.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "engine_secure.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

// The segments of a secure round: one per group (its subnet's parameters but the output bias, which
// every IST device trains and has a segment of its own), each with one more value for the weights.
core::result<void> engine::plan_secure(const core::round_plan& plan) {
  const auto& sa = config_.secure_aggregation;
  const bool ist = config_.strategy == strategy_kind::ist;
  const auto outputs = static_cast<std::size_t>(full_.widths.back());
  crypto::secagg_params p;
  // A fresh number per round attempt: keys signed for another round, or an earlier attempt of this one,
  // do not verify.
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 nonce, crypto::random_key());
  std::memcpy(&p.round, nonce.data(), sizeof p.round);
  p.bits = sa.bits;
  p.clip = sa.clip;
  // A secret needs a majority of its holders: of the assigned devices while every device is every
  // other's neighbour, of a device's ring neighbours and itself beyond that (crypto/secagg_graph.hpp).
  p.neighbors = sa.neighbors;
  if (private_rounds()) {
    // Each device's clipped change, unweighted, with its share of the noise: the ring's clip is the
    // L2 clip (no coordinate of a clipped change passes it) and its scale is fixed by the population.
    TESSERA_ASSIGN_OR_RETURN(const private_ring ring, private_ring_for(dp_population(assignments_.size())));
    p.clip = dp_clip();
    p.summands = ring.summands;
    p.noise = ring.share;
    p.fitted_value = ring.fitted_per_clip * p.clip;
  }
  const std::size_t holders = sa.neighbors == 0 || assignments_.size() <= sa.neighbors + 1 ? assignments_.size() : 2 * ((sa.neighbors + 1) / 2) + 1;
  p.threshold = std::max<std::size_t>(2, holders / 2 + 1);
  std::vector<core::subnet> subnets;
  for (std::size_t g = 0; g < plan.groups; ++g) {
    subnets.push_back(core::make_subnet(full_, config_.model.compensation, plan, g));
    p.segments.push_back({.length = core::param_count(subnets.back().arch) - (ist ? outputs : 0) + 1, .min_aggregate = sa.min_aggregate()});
  }
  if (ist) p.segments.push_back({.length = outputs + 1, .min_aggregate = sa.min_aggregate()});
  const std::size_t value_bytes = crypto::secagg_value_bytes(sa.bits);
  for (auto& a : assignments_) {
    a.segments = {static_cast<std::uint32_t>(a.group)};
    if (ist) a.segments.push_back(static_cast<std::uint32_t>(plan.groups));
    std::size_t values = 0;
    for (auto seg : a.segments) values += p.segments[seg].length;
    a.upload_bytes = values * value_bytes;
    // The plan's seed and the round: a FedAvg plan's seed is 0, and a device's rounding (and, in the
    // simulator, its noise) must not repeat from round to round.
    std::vector<std::byte> ikm(16);
    const auto round = static_cast<std::uint64_t>(current_round());
    for (std::size_t i = 0; i < 8; ++i) {
      ikm[i] = static_cast<std::byte>(plan.seed >> (8 * i));
      ikm[8 + i] = static_cast<std::byte>(round >> (8 * i));
    }
    for (char c : a.device) ikm.push_back(static_cast<std::byte>(c));
    TESSERA_ASSIGN_OR_RETURN(a.rounding_key, crypto::derive_key(ikm, "tessera secagg rounding v1"));
  }
  secure_ = std::make_shared<secure_round>(std::move(p));
  secure_->group_subnets = std::move(subnets);
  secure_->shared_segment = ist;
  return {};
}

const crypto::secagg_params& engine::secagg_params() const {
  TESSERA_ASSERT(secure_ != nullptr);
  return secure_->params;
}

crypto::secagg_server& engine::secagg_server() {
  TESSERA_ASSERT(secure_ != nullptr && !secure_->plain);
  return secure_->server;
}

double engine::secure_weight(const assignment& a, std::uint64_t examples) noexcept {
  const auto most = static_cast<double>(a.task.steps) * static_cast<double>(a.task.batch);
  return most > 0 ? std::min(1.0, static_cast<double>(examples) / most) : 0.0;
}

core::result<void> engine::receive_encoded(assignment& a, const crypto::secagg_encoded& e) {
  TESSERA_ASSERT(secure_ != nullptr);
  if (a.state != assignment_state::uploading)
    return make_error(errc::illegal_transition, "device " + a.device + ": an upload while " + std::string(to_string(a.state)));
  if (!secure_->plain) secure_->plain.emplace(secure_->params, assignments_.size());
  if (auto ok = secure_->plain->add(a.segments, e); !ok) {
    core::error why = make_error(errc::bad_values, ok.error().message);
    reject(a, why);
    return why;
  }
  return move(a, assignment_event::received);
}

// Adds each released segment's weighted mean change to the model: a group's to its subnet's
// parameters, the shared segment's to the output bias.
core::result<void> engine::apply_secure_sums() {
  secure_round& s = *secure_;
  secure_outcome& out = secure_outcome_;
  out = {};
  out.segments = s.params.segments.size();
  std::vector<crypto::secagg_segment_sum> sums;
  if (s.plain) {
    TESSERA_ASSIGN_OR_RETURN(sums, s.plain->finish());
    out.clipped = s.plain->clipped();
  } else if (auto r = s.server.finish(); r) {
    sums = std::move(r).value();
    out.clipped = s.server.clipped();
  } else {
    out.withheld = "no sum released: " + r.error().message;
  }
  out.dropped = static_cast<std::size_t>(
      std::count_if(assignments_.begin(), assignments_.end(), [](const assignment& a) { return a.state != assignment_state::accepted; }));
  if (sums.empty()) return {};
  const double clip = s.params.clip;
  // Differential privacy: each released sum (with its noise) goes to dp_sum_, which apply_private_sums
  // divides by the expected contributors; otherwise the weighted mean change goes to the model.
  const bool private_sums = private_rounds();
  std::vector<float>& target = private_sums ? dp_sum_ : params_;
  const auto withhold = [&](std::size_t seg, const std::string& why) {
    const std::string name = s.shared_segment && seg + 1 == sums.size() ? "the shared parameters" : "group " + std::to_string(seg);
    out.withheld += (out.withheld.empty() ? "" : "; ") + name + ": " + why;
  };
  // Adds a segment's release to `values`; false when it is withheld (its values stay as they are).
  const auto mean_change = [&](std::size_t seg, std::span<float> values) {
    const crypto::secagg_segment_sum& sum = sums[seg];
    if (!sum.released) {
      withhold(seg, sum.withheld);
      return false;
    }
    if (private_sums) {
      ++out.released;
      // The count values (±fitted_value each) summed: the fitting changes minus half the contributors.
      if (seg + 1 == sums.size() && s.params.fitted_value > 0) out.fitted_centred = sum.sum.back() / (2.0 * s.params.fitted_value);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<double>(values[i]) + sum.sum[i]);
      return true;
    }
    const double weight = sum.sum.back() / clip;
    if (!(weight > 0)) {
      withhold(seg, "the contributors' weights sum to nothing");
      return false;
    }
    ++out.released;
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(static_cast<double>(values[i]) + sum.sum[i] / weight);
    return true;
  };
  // A released segment's coordinates are what the server optimizer steps on (with differential
  // privacy too: the noised release is the round's change there).
  for (std::size_t g = 0; g < s.group_subnets.size(); ++g) {
    const core::subnet& sub = s.group_subnets[g];
    const std::size_t length = s.params.segments[g].length - 1;  // the segment's last value is the weights'
    std::vector<float> local(core::param_count(sub.arch));
    core::gather(full_, sub, target, local);
    const bool released = mean_change(g, std::span(local).first(length));
    core::scatter(full_, sub, local, target);
    if (released) mark_trained(sub, length);
  }
  if (s.shared_segment) {
    const std::size_t bias = core::param_slots(full_).back().bias;
    const auto outputs = static_cast<std::size_t>(full_.widths.back());
    if (mean_change(s.group_subnets.size(), std::span(target).subspan(bias, outputs)) && !trained_.empty())
      std::fill_n(trained_.begin() + static_cast<std::ptrdiff_t>(bias), outputs, 1.0f);
  }
  return {};
}

}  // namespace tessera::rounds
