#include "tessera/crypto/secagg.hpp"

#include "secagg_checks.hpp"
#include "secagg_client.hpp"
#include "secagg_parts.hpp"
#include "tessera/core/base/endian.hpp"
#include "tessera/crypto/secagg_graph.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace tessera::crypto {
namespace {

using detail::check_params;
using detail::check_segments;
using detail::covers;
using detail::mask_segment;
using detail::member_of;
using detail::position_in;
using detail::round_info;
using detail::put_text;
using detail::segment_info;

constexpr std::string_view k_sign_context = "tessera secagg keys v2";

template <class Out>
void put_share(core::le_writer<Out>& w, const shamir_share& s) {
  w.u32(s.x);
  for (auto y : s.y) w.u64(y);
}
// Reads what put_share wrote; false if the bytes end first or a value lies outside the field.
bool get_share(core::le_reader& r, shamir_share& s) {
  if (!r.u32(s.x)) return false;
  for (auto& y : s.y)
    if (!r.u64(y) || y >= gf61_prime) return false;
  return true;
}

std::vector<std::byte> box_associated(std::uint64_t round, const std::string& from, const std::string& to) {
  std::vector<std::byte> a;
  core::le_writer w(a);
  put_text(w, "tessera secagg box v1");
  w.u64(round);
  put_text(w, from);
  put_text(w, to);
  return a;
}


}  // namespace

std::vector<std::byte> secagg_signed_message(const secagg_params& p, const std::string& id, const public_key& c_pk, const public_key& s_pk,
                                             std::span<const std::uint32_t> segments, const sha256_digest& model) {
  std::vector<std::byte> m;
  core::le_writer w(m);
  put_text(w, k_sign_context);
  // Every parameter of the round: devices shown different rings, thresholds, graphs, noise or segment
  // tables by the hub do not verify each other.
  w.u64(p.round).u32(static_cast<std::uint32_t>(p.bits)).u64(std::bit_cast<std::uint64_t>(p.clip)).u64(p.threshold).u64(p.neighbors);
  w.u64(p.summands).u64(std::bit_cast<std::uint64_t>(p.noise)).u64(std::bit_cast<std::uint64_t>(p.fitted_value));
  w.u64(std::bit_cast<std::uint64_t>(p.sample_rate)).u64(p.noise_contributors);
  w.u32(static_cast<std::uint32_t>(p.segments.size()));
  for (const auto& s : p.segments) w.u64(s.length).u64(s.min_aggregate);
  put_text(w, id);
  w.bytes(std::span(c_pk)).bytes(std::span(s_pk));
  w.u32(static_cast<std::uint32_t>(segments.size()));
  for (const std::uint32_t seg : segments) w.u32(seg);
  w.bytes(std::as_bytes(std::span(model)));
  return m;
}

// ---- client ----

secagg_client::secagg_client(std::unique_ptr<state> s) : s_(std::move(s)) {}
secagg_client::secagg_client(secagg_client&&) noexcept = default;
secagg_client& secagg_client::operator=(secagg_client&&) noexcept = default;
secagg_client::~secagg_client() = default;

const secagg_keys& secagg_client::keys() const noexcept { return s_->keys; }

core::result<secagg_client> secagg_client::create(std::string id, std::string certificate_pem, const signing_key& key, std::string ca_pem,
                                                  secagg_params params, secagg_pledge pledge, std::string crl_pem) {
  TESSERA_TRY(check_params(params));
  TESSERA_TRY(check_segments(pledge.segments, params.segments.size(), "this device's pledge"));
  TESSERA_ASSIGN_OR_RETURN(auto c, x25519_keypair::generate());
  TESSERA_ASSIGN_OR_RETURN(auto s, x25519_keypair::generate());
  auto st = std::make_unique<state>(std::move(c), std::move(s));
  st->id = std::move(id);
  st->ca_pem = std::move(ca_pem);
  st->crl_pem = std::move(crl_pem);
  st->params = std::move(params);
  st->pledge = std::move(pledge);
  st->keys.id = st->id;
  st->keys.model = st->pledge.model;
  st->keys.certificate_pem = std::move(certificate_pem);
  st->keys.c_pk = st->c.public_bytes();
  st->keys.s_pk = st->s.public_bytes();
  TESSERA_ASSIGN_OR_RETURN(st->keys.signature, key.sign(secagg_signed_message(st->params, st->id, st->keys.c_pk, st->keys.s_pk,
                                                                              st->pledge.segments, st->pledge.model)));
  return secagg_client(std::move(st));
}

// A segment every member covers (IST's output bias, FedAvg's model) mixes devices sent different
// subnets by design; any other is a group's, and a group's devices cover the same segments and were
// sent the same model. A hub that gives one device a list of its own (so that no other device's list
// equals it and nobody compares models) while it still shares a group's segment is refused.
core::result<void> secagg_client::state::same_groups(const secagg_roster& offered) const {
  std::vector<std::size_t> covering(params.segments.size(), 0);
  for (const auto& m : offered)
    for (const std::uint32_t seg : m.segments) ++covering[seg];
  for (const auto& m : offered) {
    if (m.keys.id == id || m.segments == pledge.segments) continue;
    for (const std::uint32_t seg : m.segments)
      if (covering[seg] < offered.size() && std::binary_search(pledge.segments.begin(), pledge.segments.end(), seg))
        return make_error(errc::auth_failed, "device " + m.keys.id + " shares segment " + std::to_string(seg) +
                                                 " (a group's) with this device but covers other segments: a group's devices cover the "
                                                 "same ones; refused");
  }
  return {};
}

// Only the neighbours' keys are used: each must be signed by its device's certificate for this round's
// parameters, its segments and the model it was sent, which a device of this one's group shares.
// Their checked keys are kept for the pledges and signatures of the round's last steps.
core::result<void> secagg_client::state::check_neighbours(const secagg_roster& offered, const std::vector<std::size_t>& near) {
  peers.clear();
  for (const std::size_t v : near) {
    const secagg_member& m = offered[v];
    const std::string& who = m.keys.id;
    auto cert = verifying_key::from_certificate_pem(m.keys.certificate_pem, ca_pem, crl_pem);
    if (!cert) return core::error{cert.error().code, "the roster's certificate for " + who + ": " + cert.error().message};
    const verifying_key& peer = peers.emplace(who, std::move(cert).value()).first->second;
    if (peer.device_id() != who) return make_error(errc::auth_failed, "the roster's certificate for " + who + " is " + peer.device_id() + "'s");
    if (!peer.verify(secagg_signed_message(params, who, m.keys.c_pk, m.keys.s_pk, m.segments, m.keys.model), m.keys.signature))
      return make_error(errc::auth_failed, "device " + who + " did not sign these keys, segments and model for round " + std::to_string(params.round) +
                                               " (keys from another round or with other parameters, or a roster that shows it covering "
                                               "other segments than it does)");
    if (m.segments == pledge.segments && m.keys.model != pledge.model)
      return make_error(errc::auth_failed, "device " + who + ", of this device's group, was sent another model than this device (or asked another "
                                               "question): a hub that sends one group different models or questions can single out a "
                                               "device's input; refused");
  }
  return {};
}

core::result<std::vector<secagg_box>> secagg_client::share_keys(const secagg_roster& roster) {
  state& st = *s_;
  if (st.at != state::stage::keys) return make_error(errc::invalid_argument, "keys shared already this round");
  const secagg_params& p = st.params;
  if (roster.size() < p.threshold)
    return make_error(errc::invalid_argument, "a roster of " + std::to_string(roster.size()) + " devices, below the threshold " +
                                                  std::to_string(p.threshold));
  if (roster.size() > shamir_max_shares) return make_error(errc::invalid_argument, "a roster beyond " + std::to_string(shamir_max_shares) + " devices");
  if (p.summands > 0 && roster.size() > p.summands)  // the sum could wrap around the ring
    return make_error(errc::invalid_argument, "a roster of " + std::to_string(roster.size()) + " devices in a ring sized for " + std::to_string(p.summands));
  bool me = false;
  std::set<std::string> seen;
  for (const auto& m : roster) {
    const std::string& who = m.keys.id;
    if (!seen.insert(who).second) return make_error(errc::invalid_argument, "device " + who + " appears twice in the roster");
    TESSERA_TRY(check_segments(m.segments, p.segments.size(), "device " + who));
    if (who == st.id) {
      if (m.keys.c_pk != st.keys.c_pk || m.keys.s_pk != st.keys.s_pk || m.keys.model != st.keys.model)
        return make_error(errc::auth_failed, "the roster carries other keys for this device (" + st.id + ")");
      if (m.segments != st.pledge.segments)
        return make_error(errc::auth_failed, "the roster gives this device (" + st.id + ") other segments than it signed");
      me = true;
    }
  }
  if (!me) return make_error(errc::invalid_argument, "the roster leaves this device (" + st.id + ") out");
  const std::size_t index = position_in(roster, st.id);
  secagg_graph graph = secagg_graph::build(p, roster);
  std::vector<std::size_t> neighbours = graph.neighbours(index);
  if (neighbours.size() + 1 < p.threshold)
    return make_error(errc::invalid_argument, "this device has " + std::to_string(neighbours.size()) + " neighbours in the roster: its secrets need " +
                                                  std::to_string(p.threshold) + " holders");
  TESSERA_TRY(st.same_groups(roster));
  TESSERA_TRY(st.check_neighbours(roster, neighbours));
  st.roster = roster;
  st.index = index;
  st.graph = std::move(graph);
  st.neighbours = std::move(neighbours);
  const std::vector<std::uint32_t>& mine = st.roster[st.index].segments;

  // The secrets: the mask key s_sk and one self-mask seed per covered segment, each split t-of-n with
  // x = roster position + 1; the neighbours get theirs.
  TESSERA_ASSIGN_OR_RETURN(const key256 s_sk, st.s.private_bytes());
  auto key_split = shamir_split(s_sk, p.threshold, roster.size());
  TESSERA_TRY(key_split);
  std::map<std::uint32_t, std::vector<shamir_share>> seed_split;
  for (std::uint32_t seg : mine) {
    TESSERA_ASSIGN_OR_RETURN(st.seeds[seg], random_key());
    TESSERA_ASSIGN_OR_RETURN(seed_split[seg], shamir_split(st.seeds[seg], p.threshold, roster.size()));
  }
  // My own shares stay here.
  st.key_shares.insert_or_assign(st.id, shamir_share(key_split.value()[st.index]));
  for (std::uint32_t seg : mine) st.seed_shares[st.id].insert_or_assign(seg, shamir_share(seed_split[seg][st.index]));
  std::vector<secagg_box> out;
  for (const std::size_t v : st.neighbours) {
    const std::string& to = roster[v].keys.id;
    secret_bytes plain;  // shares: a secret until sealed
    core::le_writer w(plain);
    put_share(w, key_split.value()[v]);
    w.u32(static_cast<std::uint32_t>(mine.size()));
    for (std::uint32_t seg : mine) {
      w.u32(seg);
      put_share(w, seed_split[seg][v]);
    }
    TESSERA_ASSIGN_OR_RETURN(const key256 k, st.c.agree(roster[v].keys.c_pk, round_info("boxes", p.round)));
    TESSERA_ASSIGN_OR_RETURN(auto box, aead_seal(k, box_associated(p.round, st.id, to), plain));
    out.push_back({.from = st.id, .to = to, .box = std::move(box)});
  }
  st.at = state::stage::shared;
  return out;
}

// Opens the boxes: their senders are the neighbours that shared keys (U2).
core::result<void> secagg_client::state::open_boxes(const std::vector<secagg_box>& boxes) {
  shared = {id};
  for (const auto& b : boxes) {
    const std::size_t from_at = position_in(roster, b.from);
    const bool neighbour = std::binary_search(neighbours.begin(), neighbours.end(), from_at);
    if (b.to != id || !neighbour || shared.contains(b.from))
      return make_error(errc::invalid_argument, "a box from " + b.from + " to " + b.to + " that this device cannot take");
    const secagg_member* from = &roster[from_at];
    TESSERA_ASSIGN_OR_RETURN(const key256 k, c.agree(from->keys.c_pk, round_info("boxes", params.round)));
    TESSERA_ASSIGN_OR_RETURN(auto plain, aead_open(k, box_associated(params.round, b.from, id), b.box));
    core::le_reader r(plain);
    shamir_share key_share;
    std::uint32_t n = 0;
    bool ok = get_share(r, key_share) && r.u32(n) && n == from->segments.size();
    std::map<std::uint32_t, shamir_share> seeds_of_sender;
    for (std::uint32_t i = 0; ok && i < n; ++i) {
      std::uint32_t seg = 0;
      shamir_share sh;
      ok = r.u32(seg) && get_share(r, sh) && covers(*from, seg) && sh.x == index + 1 &&
           seeds_of_sender.emplace(seg, std::move(sh)).second;
    }
    ok = ok && r.done() && key_share.x == index + 1;
    if (!ok) return make_error(errc::bad_format, "the box from " + b.from + " does not hold this device's shares");
    key_shares.insert_or_assign(b.from, std::move(key_share));
    seed_shares.insert_or_assign(b.from, std::move(seeds_of_sender));
    shared.insert(b.from);
  }
  return {};
}

core::result<void> secagg_client::state::enough_pairwise_masks() const {
  // Bonawitz et al.'s U2 ≥ t, before anything leaves this device: its self mask's seed is shared with
  // its neighbours, and t of them hand it to the hub at unmasking. Masked with fewer than t − 1
  // neighbours' pairwise masks (a hub that delivers an empty or short inbox), the input would be
  // hidden by the self mask alone, which the hub then recovers from the honest neighbours.
  if (shared.size() < params.threshold)
    return make_error(errc::invalid_argument, "shares from " + std::to_string(shared.size() - 1) + " of this device's " +
                                                  std::to_string(neighbours.size()) + " neighbours arrived, below the " +
                                                  std::to_string(params.threshold - 1) + " the threshold " +
                                                  std::to_string(params.threshold) +
                                                  " needs: masking with fewer would let the hub unmask this device's input alone; refused");
  // And per segment: each covered segment's input must carry pairwise masks from neighbours that shared,
  // as many as its sum's other contributors need (min_aggregate − 1) where the graph gives that many,
  // and never none. Otherwise a hub can pass the count above with boxes from devices of other groups
  // (IST: they mask only the shared segment) and read the group segment from its self mask's seed.
  for (const std::uint32_t seg : roster[index].segments) {
    const auto count = detail::count_partners(*graph, params.segments[seg], seg, index,
                                          [&](std::size_t v) { return shared.contains(roster[v].keys.id); });
    if (!count.enough())
      return make_error(errc::invalid_argument, "segment " + std::to_string(seg) + ": shares from " + std::to_string(count.counted) + " of the " +
                                                    std::to_string(count.partners) + " devices that mask it with this device arrived, below the " +
                                                    std::to_string(count.needed) + " its sum needs: the hub could unmask this segment of its input "
                                                    "alone; refused");
  }
  return {};
}

// y holds the encoded input of every covered segment, in order; each gets its self mask and the
// pairwise masks of the neighbours that shared.
core::result<void> secagg_client::state::add_masks(std::span<std::uint64_t> y) {
  std::size_t offset = 0;
  for (const std::uint32_t seg : roster[index].segments) {
    const std::span<std::uint64_t> part = y.subspan(offset, params.segments[seg].length);
    offset += part.size();
    TESSERA_ASSIGN_OR_RETURN(const key256 self, derive_key(seeds.at(seg), segment_info("self", params.round, seg)));
    mask_segment(part, params.bits, self, true);
    for (const std::size_t v : neighbours) {
      const secagg_member& other = roster[v];
      if (!graph->masks(seg, index, v) || !shared.contains(other.keys.id)) continue;
      TESSERA_ASSIGN_OR_RETURN(const key256 pair, s.agree(other.keys.s_pk, segment_info("pair", params.round, seg)));
      mask_segment(part, params.bits, pair, index < v);
    }
  }
  return {};
}

core::result<secagg_masked> secagg_client::mask(const std::vector<secagg_box>& boxes, const std::vector<std::vector<float>>& input,
                                                key256_view rounding_key) {
  state& st = *s_;
  if (st.at != state::stage::shared) return make_error(errc::invalid_argument, "masking before the keys are shared, or twice");
  const secagg_params& p = st.params;
  const secagg_member& me = st.roster[st.index];
  if (input.size() != me.segments.size())
    return make_error(errc::invalid_argument, std::to_string(input.size()) + " input vectors for " + std::to_string(me.segments.size()) + " segments");
  TESSERA_TRY(st.open_boxes(boxes));
  TESSERA_TRY(st.enough_pairwise_masks());
  std::optional<key256> noise_key;
  if (p.noise > 0) {  // this device's share of the noise, from its own CSPRNG: nobody else can remove it
    TESSERA_ASSIGN_OR_RETURN(noise_key, random_key());
  }
  TESSERA_ASSIGN_OR_RETURN(auto encoded, secagg_encode(p, st.roster.size(), me.segments, input, rounding_key, noise_key ? &*noise_key : nullptr));
  secagg_masked out{.id = st.id, .y = std::move(encoded.y), .clipped = encoded.clipped};
  TESSERA_TRY(st.add_masks(out.y));
  st.at = state::stage::masked;
  return out;
}

}  // namespace tessera::crypto
