#include "tessera/edge/secure_round.hpp"

#include "tessera/core/io/file_io.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/masking.hpp"

namespace tessera::edge {
namespace {

core::error step_error(const std::string& what, const core::error& why) { return make_error(errc::secure_step, what + ": " + why.message); }

}  // namespace

secure_round::secure_round(std::uint64_t round, net::msg::secure_assign s, crypto::secagg_client client, const secure_identity& me,
                           const privacy_policy& policy)
    : round_(round), me_(&me), policy_(policy), s_(std::move(s)), client_(std::move(client)) {}

core::result<void> secure_round::check(const net::msg::secure_assign& s, const core::mlp_arch& arch) {
  const crypto::secagg_params& p = s.params;
  std::size_t values = 0;
  for (const auto seg : s.segments) values += p.segments[seg].length - 1;
  if (values != core::param_count(arch))
    return make_error(errc::secure_step, "the secure segments hold " + std::to_string(values) + " values, the subnet has " +
                                             std::to_string(core::param_count(arch)) + " parameters");
  return check_ring(p);
}

// The ring is needed only when masking, after the work: a ring no roster can use is refused now.
core::result<void> secure_round::check_ring(const crypto::secagg_params& p) {
  if (p.summands > 0 && p.summands < p.threshold)
    return make_error(errc::secure_step, "the secure part's field 'summands' " + std::to_string(p.summands) + " is below its 'threshold' " +
                                             std::to_string(p.threshold) + ": no roster is both large enough to unmask and small enough for the ring");
  // The fewest summands the ring may be made for; if it cannot hold their sum, it holds no larger one.
  const std::uint64_t summands = crypto::secagg_summands(p, p.threshold);
  if (auto ring = crypto::fixed_point::create(p.clip, p.bits, summands); !ring)
    return make_error(errc::secure_step, "the secure part's fields 'bits' " + std::to_string(p.bits) + " and '" +
                                             (p.summands > 0 ? "summands" : "threshold") + "' " + std::to_string(summands) +
                                             " make no ring: " + ring.error().message);
  return {};
}

core::result<std::unique_ptr<secure_round>> secure_round::start(const net::msg::secure_assign& s, std::uint64_t round,
                                                                 const net::digest& model, const core::mlp_arch& arch,
                                                                 const secure_identity& me, const privacy_policy& policy) {
  TESSERA_TRY(check(s, arch));
  return open(s, round, model, me, policy);
}

core::result<std::unique_ptr<secure_round>> secure_round::start_sum(const net::msg::secure_assign& s, std::uint64_t round,
                                                                     const net::digest& request, std::size_t length,
                                                                     const secure_identity& me, const privacy_policy& policy) {
  const crypto::secagg_params& p = s.params;
  if (s.segments.size() != 1 || p.segments[s.segments[0]].length != length)
    return make_error(errc::secure_step, "the secure sum's segments do not hold the " + std::to_string(length) + " values asked for");
  if (p.noise > 0 || p.fitted_value > 0 || p.sample_rate > 0)
    return make_error(errc::secure_step, "a secure sum of figures with a training round's noise, count or sampling");
  if (p.clip != 1.0 || p.bits != 64)
    return make_error(errc::secure_step, "a secure sum of figures in a ring other than 64 bits of values within ±1");
  TESSERA_TRY(check_ring(p));
  return open(s, round, request, me, policy);
}

core::result<std::unique_ptr<secure_round>> secure_round::open(const net::msg::secure_assign& s, std::uint64_t round,
                                                                const net::digest& model, const secure_identity& me,
                                                                const privacy_policy& policy) {
  std::string crl;
  if (!me.crl.empty()) {
    auto bytes = core::read_file_bounded(me.crl, 1u << 24);
    if (!bytes) return make_error(errc::secure_refused, "the revocation list (tls.crl) cannot be read: " + bytes.error().message);
    crl.assign(reinterpret_cast<const char*>(bytes.value().data()), bytes.value().size());
  }
  auto client = crypto::secagg_client::create(me.id, me.certificate_pem, me.key, me.ca_pem, s.params, {.segments = s.segments, .model = model},
                                              std::move(crl));
  if (!client) return step_error("the secure aggregation's keys", client.error());
  return std::unique_ptr<secure_round>(new secure_round(round, s, std::move(client).value(), me, policy));
}

net::msg::secagg_keys secure_round::keys_message() const { return {.round = round_, .keys = client_.keys()}; }

core::result<net::msg::secagg_shares> secure_round::on_roster(const net::msg::secagg_roster& r) {
  if (r.round != round_) return make_error(errc::secure_step, "a roster for round " + std::to_string(r.round) + " in round " + std::to_string(round_));
  if (shares_) return *shares_;  // the hub asks again after a broken link
  if (at_ != stage::keys) return make_error(errc::secure_step, "a roster after the shares");
  // The segments this device signed are its ASSIGN's: share_keys refuses a roster that gives it others.
  auto boxes = client_.share_keys(r.roster);
  if (!boxes) return step_error("the roster", boxes.error());
  // One box for each neighbour: with this device they hold its secrets.
  TESSERA_TRY(check_roster_threshold(s_.params.threshold, boxes.value().size(), policy_));
  shares_ = net::msg::secagg_shares{.round = round_, .boxes = std::move(boxes).value()};
  at_ = stage::shared;
  return *shares_;
}

core::result<void> secure_round::on_inbox(const net::msg::secagg_inbox& in) {
  if (in.round != round_) return make_error(errc::secure_step, "shares for round " + std::to_string(in.round) + " in round " + std::to_string(round_));
  if (at_ == stage::keys) return make_error(errc::secure_step, "shares before the roster");
  if (!inbox_) inbox_ = in.boxes;  // a repeat changes nothing
  return {};
}

void secure_round::keep_received(std::span<const float> params) { received_.assign(params.begin(), params.end()); }

core::result<void> secure_round::mask(std::span<const float> trained, double weight, bool fitted) {
  if (at_ != stage::shared || !inbox_) return make_error(errc::secure_step, "masking before the shares arrived");
  std::vector<std::vector<float>> input;
  {
    // Devices that sample themselves: the draw is this device's own, from its CSPRNG, and never leaves
    // it; the hub sees a masked input either way.
    if (withdrawn_) {
      drawn_ = false;
      trained = received_;  // what it trained is not finite: no change at all
    } else if (s_.params.sample_rate > 0) {
      auto key = crypto::random_key();
      if (!key) return make_error(errc::training_failed, "the self-sampling draw: " + key.error().message);
      drawn_ = crypto::secagg_draws_in(s_.params, key.value());
    }
    // Under differential privacy the change goes in unweighted (its L2 norm already clipped by the
    // training task), and secagg_client::mask adds this device's share of the noise.
    auto in = s_.params.noise > 0 ? crypto::secagg_change_input(received_, trained, s_.params, s_.segments, fitted, drawn_)
                                  : crypto::secagg_weighted_input(received_, trained, weight, s_.params, s_.segments);
    if (!in) return make_error(errc::training_failed, "the update: " + in.error().message);
    input = std::move(in).value();
    received_ = {};  // the memory goes back before the masked values take theirs
  }
  return seal(input);
}

core::result<void> secure_round::mask_values(std::vector<float> values) {
  if (at_ != stage::shared || !inbox_) return make_error(errc::secure_step, "masking before the shares arrived");
  std::vector<std::vector<float>> input;
  input.push_back(std::move(values));
  return seal(input);
}

// The input masked with the inbox's neighbours, packed for the upload, and the pledge of whom it masked with.
core::result<void> secure_round::seal(std::vector<std::vector<float>>& input) {
  auto masked = client_.mask(*inbox_, input, s_.rounding_key);
  if (!masked) return step_error("masking", masked.error());
  auto pledge = client_.masked_with(me_->key);
  if (!pledge) return step_error("the pledge of whom it masked with", pledge.error());
  masked_with_ = {.round = round_, .pledge = std::move(pledge).value()};
  input = {};
  upload_.resize(masked.value().y.size() * crypto::secagg_value_bytes(s_.params.bits));
  crypto::secagg_pack(masked.value().y, s_.params.bits, upload_);
  clipped_ = masked.value().clipped;
  inbox_ = std::vector<crypto::secagg_box>{};
  at_ = stage::masked;
  return {};
}

core::result<net::msg::secagg_check_reply> secure_round::on_check(const net::msg::secagg_check& c) {
  if (c.round != round_)
    return make_error(errc::secure_step, "a survivor set for round " + std::to_string(c.round) + " in round " + std::to_string(round_));
  if (at_ != stage::masked && at_ != stage::checked)
    return make_error(errc::secure_step, "a survivor set to sign before this device's masked update, or after its unmasking");
  // Asked again (a broken link) with the same set: the same signature; with another: refused.
  auto signature = client_.check(c.request, me_->key);
  if (!signature) return step_error("the consistency check", signature.error());
  at_ = stage::checked;
  return net::msg::secagg_check_reply{.round = round_, .signature = std::move(signature).value()};
}

core::result<net::msg::secagg_unmask_reply> secure_round::on_unmask(const net::msg::secagg_unmask& u) {
  if (u.round != round_) return make_error(errc::secure_step, "an unmasking for round " + std::to_string(u.round) + " in round " + std::to_string(round_));
  if (reply_) return *reply_;
  if (at_ != stage::checked) return make_error(errc::secure_step, "an unmasking before this device signed the survivor set");
  auto reply = client_.unmask(u.request);
  if (!reply) return step_error("the unmasking", reply.error());
  reply_ = net::msg::secagg_unmask_reply{.round = round_, .reply = std::move(reply).value()};
  at_ = stage::unmasked;
  upload_ = {};
  return *reply_;
}

}  // namespace tessera::edge
