// The secure kind of aggregation: the segments of a round, the masked uploads, and the release.
#include "secure_aggregation.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/secagg_graph.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

// One round's protocol: its parameters, its server (the hub's devices go through it) or the plain sum
// (the simulator's), and each group's subnet.
struct secure_aggregation::open_round {
  explicit open_round(crypto::secagg_params p) : params(p), server(std::move(p)) {}
  crypto::secagg_params params;
  crypto::secagg_server server;
  std::optional<crypto::secagg_plain_sum> plain;
  std::vector<core::subnet> group_subnets;
  bool shared_segment = false;  // IST: the last segment is the output bias every device trains
};

secure_aggregation::secure_aggregation(const run_config& config)
    : ist_(config.strategy == strategy_kind::ist), bits_(config.secure_aggregation.bits) {}

secure_aggregation::~secure_aggregation() = default;

core::result<std::size_t> secure_aggregation::admit(const round_view& v, std::vector<device_offer>& taking,
                                                    std::vector<excluded_device>&) const {
  if (taking.empty()) return make_error(errc::no_devices, "no device can take part in this round");
  // Every group has `replication` devices or more: fewer groups than devices.
  const auto& sa = v.config.secure_aggregation;
  const std::size_t group_devices = ist_ ? taking.size() / sa.replication : taking.size();
  if (group_devices == 0 || taking.size() < sa.min_aggregate())
    return make_error(errc::fleet_too_small,
                      "secure aggregation releases no sum from fewer than " + std::to_string(sa.min_aggregate()) + " devices" +
                          (ist_ ? " and trains every group on " + std::to_string(sa.replication) : std::string()) + ": " +
                          std::to_string(taking.size()) + " device" + (taking.size() == 1 ? "" : "s") + " can take part");
  return group_devices;
}

// The contributors a private round's noise is sized for: a (1 − expected dropout) share of its fewest
// assigned to one segment (a group, or every device for the shared segment and FedAvg's), never below
// the sums' min_aggregate. Each device adds the sum's variance over this many; a segment with fewer
// survivors is not released (crypto::secagg_release_minimum), so every released sum carries σ.
static std::size_t noise_contributors_of(std::size_t fewest, double expected_dropout, std::size_t min_aggregate) {
  const auto expected = static_cast<std::size_t>(std::floor((1.0 - expected_dropout) * static_cast<double>(fewest)));
  return std::max(min_aggregate, expected);
}

// The segments of a secure round: one per group (its subnet's parameters but the output bias, which
// every IST device trains and has a segment of its own), each with one more value for the weights.
core::result<void> secure_aggregation::begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) {
  round_.reset();
  if (assignments.empty()) return {};
  const auto& sa = v.config.secure_aggregation;
  const auto outputs = static_cast<std::size_t>(v.full.widths.back());
  crypto::secagg_params p;
  // A fresh number per round attempt: keys signed for another round, or an earlier attempt of this one,
  // do not verify.
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 nonce, crypto::random_key());
  const bool read = core::le_reader(std::span(nonce).first(sizeof p.round)).u64(p.round);
  TESSERA_ASSERT(read);
  p.bits = sa.bits;
  p.clip = sa.clip;
  p.neighbors = sa.neighbors;
  // The devices of each IST group: the largest sets the threshold, the fewest the noise's contributors.
  std::size_t largest_group = 0, fewest = assignments.size();
  if (ist_) {
    std::vector<std::size_t> sizes(plan.groups, 0);
    for (const auto& a : assignments) ++sizes[a.group];
    for (const std::size_t n : sizes) {
      largest_group = std::max(largest_group, n);
      if (n > 0) fewest = std::min(fewest, n);
    }
  }
  if (noise_) {
    // Each device's clipped change, unweighted, with its share of the noise: the ring's clip is the
    // L2 clip (no coordinate of a clipped change passes it) and its scale is fixed by the population.
    p.clip = noise_->clip;
    p.summands = noise_->summands;
    p.noise_contributors = noise_contributors_of(fewest, noise_->expected_dropout, sa.min_aggregate());
    p.noise = noise_->sum_variance / static_cast<double>(p.noise_contributors);
    p.fitted_value = noise_->fitted_value;
    p.sample_rate = noise_->sample_rate;
  }
  // A secret needs a majority of its holders (crypto/secagg_graph.hpp): every assigned device while
  // each is every other's neighbour; beyond that a device's ring neighbours and, under IST, its
  // group's devices, so the round's largest group counts. Every device's own holders are at most these,
  // so each finds the threshold a majority of its own (as its privacy policy checks).
  p.threshold = crypto::secagg_majority(crypto::secagg_most_holders(sa.neighbors, assignments.size(), largest_group));
  std::vector<core::subnet> subnets;
  for (std::size_t g = 0; g < plan.groups; ++g) {
    subnets.push_back(core::make_subnet(v.full, v.config.model.compensation, plan, g));
    p.segments.push_back({.length = core::param_count(subnets.back().arch) - (ist_ ? outputs : 0) + 1, .min_aggregate = sa.min_aggregate()});
  }
  if (ist_) p.segments.push_back({.length = outputs + 1, .min_aggregate = sa.min_aggregate()});
  const std::size_t value_bytes = crypto::secagg_value_bytes(sa.bits);
  for (auto& a : assignments) {
    a.segments = {static_cast<std::uint32_t>(a.group)};
    if (ist_) a.segments.push_back(static_cast<std::uint32_t>(plan.groups));
    std::size_t values = 0;
    for (auto seg : a.segments) values += p.segments[seg].length;
    a.upload_bytes = values * value_bytes;
    // The plan's seed and the round: a FedAvg plan's seed is 0, and a device's rounding (and, in the
    // simulator, its noise) must not repeat from round to round.
    std::vector<std::byte> ikm;
    core::le_writer(ikm).u64(plan.seed).u64(static_cast<std::uint64_t>(v.round())).bytes(std::span(a.device.data(), a.device.size()));
    TESSERA_ASSIGN_OR_RETURN(const crypto::key256 rounding, crypto::derive_key(ikm, "tessera secagg rounding v1"));
    std::copy(rounding.begin(), rounding.end(), a.rounding_key.begin());  // no secret (assignment.hpp)
  }
  round_ = std::make_unique<open_round>(std::move(p));
  round_->group_subnets = std::move(subnets);
  round_->shared_segment = ist_;
  return {};
}

std::uint64_t secure_aggregation::most_clipped(const assignment& a) const noexcept {
  return a.upload_bytes / crypto::secagg_value_bytes(bits_);
}

const crypto::secagg_params& secure_aggregation::params() const {
  TESSERA_ASSERT(round_ != nullptr);
  return round_->params;
}

crypto::secagg_server& secure_aggregation::server() {
  TESSERA_ASSERT(round_ != nullptr && !round_->plain);
  return round_->server;
}

core::result<void> secure_aggregation::receive(const round_view&, assignment& a, std::span<const std::byte> blob) {
  TESSERA_ASSERT(round_ != nullptr && !round_->plain);
  auto y = crypto::secagg_unpack(blob, round_->params.bits);
  core::result<void> ok = y ? round_->server.add_masked({.id = a.device, .y = std::move(y).value()})
                            : core::result<void>(std::move(y).error());
  if (!ok) return make_error(errc::bad_values, ok.error().message);
  return {};
}

core::result<void> secure_aggregation::add_encoded(const assignment& a, const crypto::secagg_encoded& e, std::size_t roster) {
  TESSERA_ASSERT(round_ != nullptr);
  if (!round_->plain) round_->plain.emplace(round_->params, roster);
  if (auto ok = round_->plain->add(a.segments, e); !ok) return make_error(errc::bad_values, ok.error().message);
  return {};
}

core::result<void> secure_aggregation::finish(const round_view& v, std::span<const assignment> assignments, std::span<float> params,
                                              reached_mask& reached, round_metrics& m) {
  if (!round_) return {};
  TESSERA_TRY(release(v, assignments, params, reached));
  note_outcome(m);
  return {};
}

void secure_aggregation::note_outcome(round_metrics& m) const {
  m.secagg.dropped = outcome_.dropped;
  m.secagg.withheld = outcome_.segments - outcome_.released;
}

// Adds each released segment to `target`: a group's to its subnet's parameters, the shared segment's
// to the output bias.
core::result<void> secure_aggregation::release(const round_view& v, std::span<const assignment> assignments, std::span<float> target,
                                               reached_mask& reached) {
  TESSERA_ASSERT(round_ != nullptr);
  const std::unique_ptr<open_round> s = std::move(round_);
  secure_outcome& out = outcome_;
  out = {};
  out.segments = s->params.segments.size();
  std::vector<crypto::secagg_segment_sum> sums;
  if (s->plain) {
    TESSERA_ASSIGN_OR_RETURN(sums, s->plain->finish());
    out.clipped = s->plain->clipped();
  } else if (auto r = s->server.finish(); r) {
    sums = std::move(r).value();
  } else {
    out.withheld = "no sum released: " + r.error().message;
  }
  out.dropped = static_cast<std::size_t>(
      std::count_if(assignments.begin(), assignments.end(), [](const assignment& a) { return a.state != assignment_state::accepted; }));
  if (sums.empty()) return {};
  const double clip = s->params.clip;
  // A private round: each released sum (with its noise) goes to the private kind's sum, which divides
  // it by the expected contributors; otherwise the weighted mean change goes to the model.
  const bool private_sums = noise_.has_value();
  const auto withhold = [&](std::size_t seg, const std::string& why) {
    const std::string name = s->shared_segment && seg + 1 == sums.size() ? "the shared parameters" : "group " + std::to_string(seg);
    out.withheld += (out.withheld.empty() ? "" : "; ") + name + ": " + why;
  };
  // Adds a segment's release to `values`; false when it is withheld (its values stay as they are).
  const auto add_release = [&](std::size_t seg, std::span<float> values) {
    const crypto::secagg_segment_sum& sum = sums[seg];
    if (!sum.released) {
      withhold(seg, sum.withheld);
      return false;
    }
    if (private_sums) {
      ++out.released;
      // The count values (±fitted_value each) summed: the fitting changes minus half the contributors.
      if (seg + 1 == sums.size() && s->params.fitted_value > 0) out.fitted_centred = sum.sum.back() / (2.0 * s->params.fitted_value);
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
  // A released segment's coordinates are what the server optimizer steps on (in a private round too:
  // the noised release is the round's change there).
  for (std::size_t g = 0; g < s->group_subnets.size(); ++g) {
    const core::subnet& sub = s->group_subnets[g];
    const std::size_t length = s->params.segments[g].length - 1;  // the segment's last value is the weights'
    std::vector<float> local(core::param_count(sub.arch));
    core::gather(v.full, sub, target, local);
    const bool released = add_release(g, std::span(local).first(length));
    core::scatter(v.full, sub, local, target);
    if (released) reached.mark(sub, length);
  }
  if (s->shared_segment) {
    const std::size_t bias = core::param_slots(v.full).back().bias;
    const auto outputs = static_cast<std::size_t>(v.full.widths.back());
    if (add_release(s->group_subnets.size(), target.subspan(bias, outputs))) reached.mark_range(bias, outputs);
  }
  return {};
}

}  // namespace tessera::rounds
