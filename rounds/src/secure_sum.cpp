#include "tessera/rounds/secure_sum.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tessera/core/base/endian.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/crypto/secagg_graph.hpp"
#include "tessera/rounds/error.hpp"
#include "tessera/rounds/natural_order.hpp"

namespace tessera::rounds {

struct secure_sum::state {
  state(crypto::secagg_params p, std::vector<std::string> m, std::string why)
      : params(p), members(std::move(m)), purpose(std::move(why)), server(std::move(p)) {}
  crypto::secagg_params params;
  std::vector<std::string> members;
  std::string purpose;
  crypto::secagg_server server;
  std::optional<crypto::secagg_plain_sum> plain;
  std::vector<std::string> added;  // the plain sum's members
};

secure_sum::secure_sum(std::unique_ptr<state> s) : s_(std::move(s)) {}
secure_sum::secure_sum(secure_sum&&) noexcept = default;
secure_sum& secure_sum::operator=(secure_sum&&) noexcept = default;
secure_sum::~secure_sum() = default;

core::result<secure_sum> secure_sum::create(const secure_aggregation_config& sa, std::vector<std::string> members, std::size_t length,
                                            std::string_view purpose) {
  std::sort(members.begin(), members.end(), natural_less);
  if (std::adjacent_find(members.begin(), members.end()) != members.end())
    return make_error(errc::secure_step, "a secure sum names device " + *std::adjacent_find(members.begin(), members.end()) + " twice");
  if (length == 0) return make_error(errc::secure_step, "a secure sum of no values");
  crypto::secagg_params p;
  // A fresh number: keys signed for another sum do not verify in this one.
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 nonce, crypto::random_key());
  const bool read = core::le_reader(std::span(nonce).first(sizeof p.round)).u64(p.round);
  TESSERA_ASSERT(read);
  p.bits = 64;
  p.clip = 1.0;
  p.neighbors = sa.neighbors;
  p.summands = members.size();
  p.threshold = threshold_for(sa, members.size());
  p.segments = {{.length = length, .min_aggregate = sa.min_aggregate()}};
  if (members.size() < p.threshold)
    return make_error(errc::fleet_too_small, std::to_string(members.size()) + " device(s) for a secure sum that needs " +
                                                 std::to_string(p.threshold) + " to unmask");
  return secure_sum(std::make_unique<state>(p, std::move(members), std::string(purpose)));
}

std::size_t secure_sum::threshold_for(const secure_aggregation_config& sa, std::size_t members) noexcept {
  return crypto::secagg_majority(crypto::secagg_most_holders(sa.neighbors, members, 0));
}

const crypto::secagg_params& secure_sum::params() const noexcept { return s_->params; }
const std::vector<std::string>& secure_sum::members() const noexcept { return s_->members; }
bool secure_sum::is_member(const std::string& id) const { return std::binary_search(s_->members.begin(), s_->members.end(), id, natural_less); }
crypto::secagg_server& secure_sum::server() noexcept { return s_->server; }

std::array<std::byte, 32> secure_sum::rounding_key(const std::string& id) const {
  std::vector<std::byte> ikm;
  core::le_writer(ikm).u64(s_->purpose.size()).bytes(std::span(s_->purpose.data(), s_->purpose.size())).bytes(std::span(id.data(), id.size()));
  auto key = crypto::derive_key(ikm, "tessera secure sum rounding v1");
  TESSERA_ASSERT(key.ok());  // HKDF of 32 bytes does not fail
  std::array<std::byte, 32> out{};
  std::copy(key.value().begin(), key.value().end(), out.begin());
  return out;
}

core::result<void> secure_sum::add_plain(const std::string& id, const std::vector<float>& values) {
  if (!is_member(id)) return make_error(errc::secure_step, "device " + id + " is no member of the secure sum");
  if (std::find(s_->added.begin(), s_->added.end(), id) != s_->added.end())
    return make_error(errc::secure_step, "device " + id + " added to the secure sum twice");
  if (!s_->plain) s_->plain.emplace(s_->params, s_->members.size());
  const std::uint32_t segment = 0;
  const auto key = rounding_key(id);
  TESSERA_ASSIGN_OR_RETURN(const auto encoded, crypto::secagg_encode(s_->params, s_->members.size(), std::span(&segment, 1), {values}, key));
  if (encoded.clipped > 0) return make_error(errc::secure_step, "device " + id + ": " + std::to_string(encoded.clipped) + " values beyond ±1");
  TESSERA_TRY(s_->plain->add(std::span(&segment, 1), encoded));
  s_->added.push_back(id);
  return {};
}

core::result<secure_sum::released> secure_sum::finish() const {
  released out;
  std::vector<crypto::secagg_segment_sum> sums;
  if (s_->plain) {
    TESSERA_ASSIGN_OR_RETURN(sums, s_->plain->finish());
    out.survivors = s_->added;
  } else {
    TESSERA_ASSIGN_OR_RETURN(sums, s_->server.finish());
    out.survivors = s_->server.unmask_request().survivors;
  }
  std::sort(out.survivors.begin(), out.survivors.end(), natural_less);
  if (sums.empty() || !sums[0].released)
    return make_error(errc::no_devices, "the secure sum is withheld: " + (sums.empty() ? std::string("no sum") : sums[0].withheld));
  out.sum = std::move(sums[0].sum);
  TESSERA_ASSIGN_OR_RETURN(const auto ring, crypto::fixed_point::create(s_->params.clip, s_->params.bits, s_->params.summands));
  out.resolution = static_cast<double>(out.survivors.size()) * ring.step();
  return out;
}

std::int64_t evaluation_max_examples(std::span<const evaluator> evaluators) noexcept {
  std::uint64_t most = 1;
  for (const auto& e : evaluators) most = std::max(most, e.examples);
  return static_cast<std::int64_t>(most);
}

core::result<secure_sum> evaluation_sum(const secure_aggregation_config& sa, std::span<const evaluator> evaluators, std::int64_t round) {
  std::vector<std::string> ids;
  for (const auto& e : evaluators) ids.push_back(e.id);
  if (const std::size_t t = secure_sum::fewest_for(sa, ids.size()); ids.size() < t)
    return make_error(errc::fleet_too_small, std::to_string(ids.size()) + " device(s) can score the model, and their masked sum is released from " +
                                                 std::to_string(t) + " or more");
  return secure_sum::create(sa, std::move(ids), core::k_score_vector_length, "evaluation of round " + std::to_string(round));
}

core::result<void> add_released_scores(const secure_sum::released& r, std::int64_t max_examples, federated_scores& scores) {
  TESSERA_ASSIGN_OR_RETURN(const auto s, core::score_from_vector(r.sum, max_examples, k_evaluation_loss_bound));
  scores.add_sum(r.survivors.size(), {.id = {}, .examples = s.examples, .loss_sum = s.loss_sum, .correct = s.correct});
  return {};
}

}  // namespace tessera::rounds
