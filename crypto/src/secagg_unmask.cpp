// The client's last steps (crypto/secagg.hpp): the pledge of whom it masked with, the consistency
// check, the unmasking; and the messages signed in them.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "secagg_client.hpp"
#include "secagg_parts.hpp"

namespace tessera::crypto {
namespace {

using detail::count_partners;
using detail::covers;
using detail::member_of;
using detail::position_in;
using detail::put_text;

constexpr std::string_view k_check_context = "tessera secagg survivors v1";
constexpr std::string_view k_masked_with_context = "tessera secagg masked with v1";

// The same names in the same order: what was signed is what is answered.
bool same_request(const secagg_unmask_request& a, const secagg_unmask_request& b) {
  return a.survivors == b.survivors && a.dropped == b.dropped && a.released == b.released;
}

}  // namespace

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

std::vector<std::byte> secagg_masked_with_message(std::uint64_t round, const secagg_masked_with& mw) {
  std::vector<std::byte> m;
  core::le_writer w(m);
  put_text(w, k_masked_with_context);
  w.u64(round);
  put_text(w, mw.id);
  w.u32(static_cast<std::uint32_t>(mw.without.size()));
  for (const auto& p : mw.without) put_text(w, p);
  return m;
}

// What unmask() and check() refuse in a request; fills the sets it names.
core::result<void> secagg_client::state::validate(const secagg_unmask_request& request, named_sets& out) const {
  const secagg_params& p = params;
  // Every name is a roster member; a neighbour (or this device) named must have shared keys with it.
  const auto check_name = [&](const std::string& u) -> core::result<std::size_t> {
    const std::size_t where = position_in(roster, u);
    if (where == roster.size()) return make_error(errc::invalid_argument, "the unmasking names " + u + ", which is not in the roster");
    if (holds(where) && !shared.contains(u))
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
    if (const std::size_t least = secagg_release_minimum(p, seg); covering < least)
      return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) + " with " + std::to_string(covering) +
                                                    " survivors, below its minimum of " + std::to_string(least) +
                                                    (least > p.segments[seg].min_aggregate ? " (the devices its noise is sized for)" : ""));
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
  const auto count = count_partners(*graph, params.segments[seg], seg, index, [&](std::size_t v) {
    const std::string& who = roster[v].keys.id;
    return shared.contains(who) && survivors.contains(who);
  });
  if (!count.enough())
    return make_error(errc::invalid_argument, "the unmasking releases segment " + std::to_string(seg) + " with " + std::to_string(count.counted) +
                                                  " of the devices this device masked it with among the survivors, below the " +
                                                  std::to_string(count.needed) + " its sum needs: the hub could unmask this device's part alone; refused");
  return {};
}

// Bonawitz et al.'s round 4 check, counted among the holders of this device's shares (Bell et al.:
// itself and its neighbours, of whom t is a majority): at least t of them signed this very request.
// Each holder signs one set a round, so the hub cannot show two of this device's holders' majorities
// different sets. Signatures are checked against the roster's certificates (already checked against
// the CA and its list); one that is not a holder's or does not verify is not counted (one device's
// garbage does not stop the round), and the refusal names it.
core::result<void> secagg_client::state::enough_signatures(const secagg_unmask_request& request, const named_sets& named) const {
  const std::vector<std::byte> message = secagg_check_message(params.round, request);
  std::set<std::string> valid;
  std::string not_counted;
  for (const auto& sig : request.signatures) {
    const std::size_t where = position_in(roster, sig.id);
    std::string why;
    if (!holds(where) || !named.survivors.contains(sig.id)) {
      why = "not a surviving holder of this device's shares";
    } else if (valid.contains(sig.id)) {
      why = "twice";
    } else if (where == index) {
      if (sig.signature != check_signature.signature) why = "not the signature this device made";
    } else if (!peers.at(sig.id).verify(message, sig.signature)) {
      why = "did not sign this set";
    }
    if (why.empty()) valid.insert(sig.id);
    else not_counted += (not_counted.empty() ? "" : ", ") + sig.id + " (" + why + ")";
  }
  if (valid.size() < params.threshold)
    return make_error(errc::auth_failed, "the unmasking carries " + std::to_string(valid.size()) + " valid signatures of its survivor set by "
                                             "this device and its neighbours, below the threshold " + std::to_string(params.threshold) +
                                             (not_counted.empty() ? "" : "; not counted: " + not_counted) +
                                             ": the hub may be showing devices different survivors; refused");
  return {};
}

core::result<secagg_masked_with> secagg_client::masked_with(const signing_key& key) const {
  const state& st = *s_;
  if (st.at == state::stage::keys || st.at == state::stage::shared) return make_error(errc::invalid_argument, "a pledge before masking");
  secagg_masked_with m{.id = st.id, .without = {}, .signature = {}};
  for (const std::size_t v : st.neighbours)
    if (!st.shared.contains(st.roster[v].keys.id)) m.without.push_back(st.roster[v].keys.id);
  std::sort(m.without.begin(), m.without.end());
  TESSERA_ASSIGN_OR_RETURN(m.signature, key.sign(secagg_masked_with_message(st.params.round, m)));
  return m;
}

// Each neighbour this device names a survivor must have pledged whom it masked with, and on every
// released segment it covers enough of those must survive: otherwise its input on the segment stands
// apart from the sum, and this device's share of its seed would give it away.
core::result<void> secagg_client::state::neighbours_partnered(const secagg_unmask_request& request, const named_sets& named) const {
  std::map<std::string, const secagg_masked_with*> pledges;
  for (const auto& m : request.partners)
    if (!pledges.emplace(m.id, &m).second) return make_error(errc::invalid_argument, "the survivor set carries two pledges of " + m.id);
  for (const std::size_t u : neighbours) {
    const secagg_member& who = roster[u];
    if (!named.survivors.contains(who.keys.id)) continue;
    const auto it = pledges.find(who.keys.id);
    if (it == pledges.end())
      return make_error(errc::auth_failed, "the survivor set names " + who.keys.id + " without its signed pledge of whom it masked with: refused");
    if (!peers.at(who.keys.id).verify(secagg_masked_with_message(params.round, *it->second), it->second->signature))
      return make_error(errc::auth_failed, "device " + who.keys.id + " did not sign the pledge of whom it masked with: refused");
    const std::set<std::string> without(it->second->without.begin(), it->second->without.end());
    for (const std::uint32_t seg : named.released) {
      if (!covers(who, seg)) continue;
      const auto count = count_partners(*graph, params.segments[seg], seg, u, [&](std::size_t v) {
        const std::string& partner = roster[v].keys.id;
        return !without.contains(partner) && named.survivors.contains(partner);
      });
      if (!count.enough())
        return make_error(errc::invalid_argument, "device " + who.keys.id + " masked segment " + std::to_string(seg) + " with " +
                                                      std::to_string(count.counted) + " of the survivors, below the " + std::to_string(count.needed) +
                                                      " its sum needs: the hub could unmask its part alone; refused");
    }
  }
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
  TESSERA_TRY(st.neighbours_partnered(unsigned_request, named));
  unsigned_request.partners.clear();  // checked; not part of what is signed or answered
  TESSERA_ASSIGN_OR_RETURN(auto sig, key.sign(secagg_check_message(st.params.round, unsigned_request)));
  st.check_signature = {.id = st.id, .signature = std::move(sig)};
  st.checked = std::move(unsigned_request);
  st.checked_names = std::move(named);
  st.at = state::stage::checked;
  return st.check_signature;
}

core::result<secagg_unmask_reply> secagg_client::unmask(const secagg_unmask_request& request) {
  state& st = *s_;
  if (st.at != state::stage::checked) return make_error(errc::invalid_argument, "unmasking before the consistency check, or twice");
  if (!same_request(*st.checked, request))
    return make_error(errc::invalid_argument, "the unmasking asks for another survivor set than the one this device signed: refused");
  // The names are the ones validated when this device signed them.
  const state::named_sets& named = st.checked_names;
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
