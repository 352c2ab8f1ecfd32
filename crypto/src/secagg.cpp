#include "tessera/crypto/secagg.hpp"

#include "secagg_checks.hpp"
#include "secagg_parts.hpp"
#include "tessera/core/base/endian.hpp"
#include "tessera/crypto/secagg_graph.hpp"

#include <algorithm>
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
using detail::segment_info;


constexpr std::string_view k_sign_context = "tessera secagg keys v2";
constexpr std::string_view k_check_context = "tessera secagg survivors v1";

// The same names in the same order: what was signed is what is answered.
bool same_request(const secagg_unmask_request& a, const secagg_unmask_request& b) {
  return a.survivors == b.survivors && a.dropped == b.dropped && a.released == b.released;
}


// A string and its terminating zero, so that no two lists of strings have the same bytes.
template <class Out>
void put_text(core::le_writer<Out>& w, std::string_view s) {
  w.bytes(std::span(s.data(), s.size())).u8(0);
}
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

std::vector<std::byte> secagg_signed_message(std::uint64_t round, const std::string& id, const public_key& c_pk, const public_key& s_pk,
                                             std::span<const std::uint32_t> segments, const secagg_digest& model) {
  std::vector<std::byte> m;
  core::le_writer w(m);
  put_text(w, k_sign_context);
  w.u64(round);
  put_text(w, id);
  w.bytes(std::span(c_pk)).bytes(std::span(s_pk));
  w.u32(static_cast<std::uint32_t>(segments.size()));
  for (const std::uint32_t seg : segments) w.u32(seg);
  w.bytes(std::span(model));
  return m;
}

std::vector<std::byte> secagg_check_message(std::uint64_t round, const secagg_unmask_request& request) {
  std::vector<std::byte> m;
  core::le_writer w(m);
  put_text(w, k_check_context);
  w.u64(round);
  for (const auto* names : {&request.survivors, &request.dropped}) {
    w.u32(static_cast<std::uint32_t>(names->size()));
    for (const auto& n : *names) put_text(w, n);
  }
  w.u32(static_cast<std::uint32_t>(request.released.size()));
  for (const std::uint32_t seg : request.released) w.u32(seg);
  return m;
}

// ---- client ----

struct secagg_client::state {
  enum class stage { keys, shared, masked, checked, done };
  std::string id;
  std::string ca_pem;
  std::string crl_pem;  // the CA's revocation list (empty: not checked)
  secagg_params params;
  secagg_pledge pledge;  // what this device signed: its segments and the model's digest
  x25519_keypair c, s;
  secagg_keys keys;
  stage at = stage::keys;
  secagg_roster roster;
  std::optional<secagg_graph> graph;
  std::size_t index = 0;                                 // my position in the roster
  std::vector<std::size_t> neighbours;                   // roster positions: who holds my shares, and I theirs
  std::map<std::uint32_t, key256> seeds;                 // b_me,segment
  // Shares this device holds, by owner: of the owner's s_sk, and of its seeds by segment.
  std::map<std::string, shamir_share> key_shares;
  std::map<std::string, std::map<std::uint32_t, shamir_share>> seed_shares;
  std::set<std::string> shared;                          // U2 as this device saw it (itself included)
  std::optional<secagg_unmask_request> checked;          // the request this device signed (no signatures)
  secagg_signature check_signature;

  // Keys, seeds and shares are secrets: each wipes itself when the state goes, on any path.
  state(x25519_keypair c_, x25519_keypair s_) : c(std::move(c_)), s(std::move(s_)) {}

  // The three steps of mask(): take the shares the inbox holds, refuse when too few neighbours' masks
  // would hide the input, mask the encoded input.
  core::result<void> open_boxes(const std::vector<secagg_box>& boxes);
  [[nodiscard]] core::result<void> enough_pairwise_masks() const;
  core::result<void> add_masks(std::span<std::uint64_t> y);
  // An unmasking request's names, checked (validate) and, to be answered, signed by enough survivors.
  struct named_sets {
    std::set<std::string> survivors, dropped;
    std::set<std::uint32_t> released;
  };
  [[nodiscard]] core::result<void> validate(const secagg_unmask_request& request, named_sets& out) const;
  [[nodiscard]] core::result<void> enough_surviving_partners(std::uint32_t seg, const std::set<std::string>& survivors) const;
  [[nodiscard]] core::result<void> enough_signatures(const secagg_unmask_request& request, const named_sets& named) const;
};

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
  TESSERA_ASSIGN_OR_RETURN(st->keys.signature, key.sign(secagg_signed_message(st->params.round, st->id, st->keys.c_pk, st->keys.s_pk,
                                                                              st->pledge.segments, st->pledge.model)));
  return secagg_client(std::move(st));
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
  // Only the neighbours' keys are used: each must be signed by its device's certificate for this round.
  for (std::size_t v : neighbours) {
    const secagg_member& m = roster[v];
    const std::string& who = m.keys.id;
    auto checked = verifying_key::from_certificate_pem(m.keys.certificate_pem, st.ca_pem, st.crl_pem);
    if (!checked) return core::error{checked.error().code, "the roster's certificate for " + who + ": " + checked.error().message};
    const verifying_key& peer = checked.value();
    if (peer.device_id() != who)
      return make_error(errc::auth_failed, "the roster's certificate for " + who + " is " + peer.device_id() + "'s");
    if (!peer.verify(secagg_signed_message(p.round, who, m.keys.c_pk, m.keys.s_pk, m.segments, m.keys.model), m.keys.signature))
      return make_error(errc::auth_failed, "device " + who + " did not sign these keys, segments and model for round " + std::to_string(p.round) +
                                               " (keys from another round, or a roster that shows it covering other segments than it does)");
    if (m.segments == st.pledge.segments && m.keys.model != st.pledge.model)
      return make_error(errc::auth_failed, "device " + who + ", of this device's group, was sent another model than this device: "
                                               "a hub that sends one group different models can single out a device's update; refused");
  }
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
    std::size_t partners = 0, arrived = 0;
    for (const std::size_t v : neighbours) {
      if (!graph->masks(seg, index, v)) continue;
      ++partners;
      arrived += shared.contains(roster[v].keys.id) ? 1 : 0;
    }
    const std::size_t need = secagg_partners_needed(params.segments[seg], partners);
    if (arrived < need)
      return make_error(errc::invalid_argument, "segment " + std::to_string(seg) + ": shares from " + std::to_string(arrived) + " of the " +
                                                    std::to_string(partners) + " devices that mask it with this device arrived, below the " +
                                                    std::to_string(need) + " its sum needs: the hub could unmask this segment of its input "
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

// What unmask() and check() refuse in a request; fills the sets it names.
core::result<void> secagg_client::state::validate(const secagg_unmask_request& request, named_sets& out) const {
  const secagg_params& p = params;
  // Every name is a roster member; a neighbour (or this device) named must have shared keys with it.
  const auto check_name = [&](const std::string& u) -> core::result<std::size_t> {
    const std::size_t where = position_in(roster, u);
    if (where == roster.size()) return make_error(errc::invalid_argument, "the unmasking names " + u + ", which is not in the roster");
    const bool known = where == index || std::binary_search(neighbours.begin(), neighbours.end(), where);
    if (known && !shared.contains(u))
      return make_error(errc::invalid_argument, "the unmasking names " + u + ", which did not share keys with this device");
    return where;
  };
  std::vector<bool> alive(roster.size(), false);
  for (const auto& u : request.survivors) {
    TESSERA_ASSIGN_OR_RETURN(const std::size_t where, check_name(u));
    if (!out.survivors.insert(u).second) return make_error(errc::invalid_argument, "the unmasking names " + u + " twice");
    alive[where] = true;
  }
  for (const auto& v : request.dropped) {
    TESSERA_TRY(check_name(v));
    // Never both for one device: its seed and its key together would unmask its input.
    if (out.survivors.contains(v))
      return make_error(errc::invalid_argument, "the unmasking asks for both the seed and the key of " + v + ": refused");
    if (!out.dropped.insert(v).second) return make_error(errc::invalid_argument, "the unmasking names " + v + " twice");
  }
  if (!out.survivors.contains(id)) return make_error(errc::invalid_argument, "the unmasking counts this device among the dropped");
  if (out.survivors.size() < p.threshold)
    return make_error(errc::invalid_argument, std::to_string(out.survivors.size()) + " survivors, below the threshold " + std::to_string(p.threshold));
  for (std::uint32_t seg : request.released) {
    if (seg >= p.segments.size() || !out.released.insert(seg).second)
      return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) + ", which does not exist or twice");
    std::size_t covering = 0;
    for (const auto& u : out.survivors) covering += covers(*member_of(roster, u), seg) ? 1 : 0;
    if (covering < p.segments[seg].min_aggregate)
      return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) + " with " + std::to_string(covering) +
                                                    " survivors, below its minimum of " + std::to_string(p.segments[seg].min_aggregate));
    // Survivors the masks do not connect: the hub would hold each part's sum on its own.
    if (!graph->connected(seg, alive))
      return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) +
                                                    ", whose survivors its masks do not connect: refused");
    if (covers(roster[index], seg)) TESSERA_TRY(enough_surviving_partners(seg, out.survivors));
  }
  return {};
}

// The graph says whom this device should have masked with; the inbox the hub delivered says whom it
// did. A hub that named every device it really masked with dropped (their keys recovered, their masks
// removed) would hold its input on the segment apart from the others' sum, even though the graph
// shows it connected: so, as at masking, enough of the devices it masked the segment with must be
// among the survivors (secagg_server releases by the same rule).
core::result<void> secagg_client::state::enough_surviving_partners(std::uint32_t seg, const std::set<std::string>& survivors) const {
  std::size_t partners = 0, surviving = 0;
  for (const std::size_t v : neighbours) {
    if (!graph->masks(seg, index, v)) continue;
    ++partners;
    const std::string& who = roster[v].keys.id;
    surviving += shared.contains(who) && survivors.contains(who) ? 1 : 0;
  }
  const std::size_t need = secagg_partners_needed(params.segments[seg], partners);
  if (surviving < need)
    return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) + " with " + std::to_string(surviving) +
                                                  " of the devices this device masked it with among the survivors, below the " +
                                                  std::to_string(need) + " its sum needs: the hub could unmask this device's part alone; refused");
  return {};
}

// Bonawitz et al.'s round 4 check: at least t distinct survivors signed this very request. A hub that
// shows two devices different survivor sets (to collect one device's seed from some and its key from
// others) cannot get t honest signatures on both: each device signs once, and t is a majority.
core::result<void> secagg_client::state::enough_signatures(const secagg_unmask_request& request, const named_sets& named) const {
  const std::vector<std::byte> message = secagg_check_message(params.round, request);
  std::set<std::string> signers;
  for (const auto& sig : request.signatures) {
    if (!named.survivors.contains(sig.id))
      return make_error(errc::auth_failed, "the unmasking carries a consistency signature of " + sig.id + ", which is not a survivor: refused");
    if (!signers.insert(sig.id).second) return make_error(errc::invalid_argument, "the unmasking carries two signatures of " + sig.id);
    auto signer = verifying_key::from_certificate_pem(sig.certificate_pem, ca_pem, crl_pem);
    if (!signer) return core::error{signer.error().code, "the consistency signature of " + sig.id + ": " + signer.error().message};
    if (signer.value().device_id() != sig.id)
      return make_error(errc::auth_failed, "the consistency signature of " + sig.id + " comes with " + signer.value().device_id() + "'s certificate");
    if (!signer.value().verify(message, sig.signature))
      return make_error(errc::auth_failed, "device " + sig.id + " did not sign this survivor set: the hub shows devices different "
                                               "survivors; refused");
  }
  if (signers.size() < params.threshold)
    return make_error(errc::auth_failed, "the unmasking carries " + std::to_string(signers.size()) + " survivors' signatures of its "
                                             "survivor set, below the threshold " + std::to_string(params.threshold) + ": refused");
  return {};
}

core::result<secagg_signature> secagg_client::check(const secagg_unmask_request& request, const signing_key& key) {
  state& st = *s_;
  secagg_unmask_request unsigned_request = request;
  unsigned_request.signatures.clear();
  if (st.at == state::stage::checked) {
    if (!same_request(*st.checked, unsigned_request))
      return make_error(errc::invalid_argument, "a second survivor set to sign in one round (a device signs one): refused");
    return st.check_signature;
  }
  if (st.at != state::stage::masked) return make_error(errc::invalid_argument, "a consistency check before masking, or after unmasking");
  state::named_sets named;
  TESSERA_TRY(st.validate(unsigned_request, named));
  TESSERA_ASSIGN_OR_RETURN(auto sig, key.sign(secagg_check_message(st.params.round, unsigned_request)));
  st.check_signature = {.id = st.id, .certificate_pem = st.keys.certificate_pem, .signature = std::move(sig)};
  st.checked = std::move(unsigned_request);
  st.at = state::stage::checked;
  return st.check_signature;
}

core::result<secagg_unmask_reply> secagg_client::unmask(const secagg_unmask_request& request) {
  state& st = *s_;
  if (st.at != state::stage::checked) return make_error(errc::invalid_argument, "unmasking before the consistency check, or twice");
  if (!same_request(*st.checked, request))
    return make_error(errc::invalid_argument, "the unmasking asks for another survivor set than the one this device signed: refused");
  state::named_sets named;
  TESSERA_TRY(st.validate(request, named));
  TESSERA_TRY(st.enough_signatures(request, named));
  secagg_unmask_reply reply{.id = st.id, .seeds = {}, .keys = {}};
  for (const auto& u : named.survivors) {
    const auto held = st.seed_shares.find(u);
    if (held == st.seed_shares.end()) continue;  // not a neighbour
    for (std::uint32_t seg : named.released)
      if (auto it = held->second.find(seg); it != held->second.end()) reply.seeds.push_back({.owner = u, .segment = seg, .share = it->second});
  }
  for (const auto& v : named.dropped)
    if (auto it = st.key_shares.find(v); it != st.key_shares.end()) reply.keys.push_back({.owner = v, .segment = 0, .share = it->second});
  st.at = state::stage::done;
  return reply;
}

}  // namespace tessera::crypto
