#include "tessera/crypto/secagg.hpp"

#include "secagg_checks.hpp"
#include "secagg_parts.hpp"
#include "tessera/crypto/secagg_graph.hpp"

#include <algorithm>
#include <string>

namespace tessera::crypto {

using detail::check_params;
using detail::check_segments;
using detail::covers;
using detail::mask_segment;
using detail::member_of;
using detail::position_in;
using detail::segment_info;

secagg_server::secagg_server(secagg_params params) : params_(std::move(params)) {}

const secagg_member* secagg_server::member(const std::string& id) const { return member_of(roster_, id); }
std::size_t secagg_server::position(const std::string& id) const { return position_in(roster_, id); }

core::result<void> secagg_server::add_keys(secagg_keys k, std::vector<std::uint32_t> segments) {
  TESSERA_TRY(check_params(params_));
  if (graph_) return make_error(errc::invalid_argument, "keys from " + k.id + " after the roster was closed");
  if (member(k.id) != nullptr) return make_error(errc::invalid_argument, "device " + k.id + " advertised keys twice");
  TESSERA_TRY(check_segments(segments, params_.segments.size(), "device " + k.id));
  if (roster_.size() >= shamir_max_shares) return make_error(errc::invalid_argument, "a roster beyond " + std::to_string(shamir_max_shares) + " devices");
  if (params_.summands > 0 && roster_.size() >= params_.summands)
    return make_error(errc::invalid_argument, "device " + k.id + ": more devices than the " + std::to_string(params_.summands) + " the ring is sized for");
  roster_.push_back({.keys = std::move(k), .segments = std::move(segments)});
  return {};
}

core::result<secagg_roster> secagg_server::roster() {
  if (roster_.size() < params_.threshold)
    return make_error(errc::invalid_argument, std::to_string(roster_.size()) + " devices advertised keys, below the threshold " +
                                                  std::to_string(params_.threshold));
  if (!graph_) {
    auto graph = std::make_shared<const secagg_graph>(secagg_graph::build(params_, roster_));
    for (std::size_t u = 0; u < roster_.size(); ++u)
      if (const std::size_t n = graph->neighbours(u).size(); n + 1 < params_.threshold)
        return make_error(errc::invalid_argument, "device " + roster_[u].keys.id + " has " + std::to_string(n) +
                                                      " neighbours: its secrets need " + std::to_string(params_.threshold) + " holders");
    graph_ = std::move(graph);
  }
  return roster_;
}

core::result<secagg_roster> secagg_server::roster_for(const std::string& id) {
  if (!graph_) {
    TESSERA_TRY(roster());
  }
  const std::size_t u = position(id);
  if (u == roster_.size()) return make_error(errc::invalid_argument, "device " + id + " is not in the roster");
  if (graph_->complete()) return roster_;
  const std::vector<std::size_t> keep = graph_->neighbours(u);
  secagg_roster out;
  out.reserve(roster_.size());
  for (std::size_t v = 0; v < roster_.size(); ++v) {
    if (v == u || std::binary_search(keep.begin(), keep.end(), v)) {
      out.push_back(roster_[v]);
      continue;
    }
    secagg_member m;  // by its id and segments alone
    m.keys.id = roster_[v].keys.id;
    m.segments = roster_[v].segments;
    out.push_back(std::move(m));
  }
  return out;
}

core::result<void> secagg_server::add_boxes(const std::string& from, std::vector<secagg_box> boxes) {
  if (!graph_ || member(from) == nullptr || shared_.contains(from)) return make_error(errc::invalid_argument, "boxes from " + from + " that were not expected");
  const std::vector<std::size_t> neighbours = graph_->neighbours(position(from));
  std::set<std::string> to;
  for (const auto& b : boxes)
    if (b.from != from || !std::binary_search(neighbours.begin(), neighbours.end(), position(b.to)) || !to.insert(b.to).second)
      return make_error(errc::invalid_argument, "device " + from + " sent a box from " + b.from + " to " + b.to);
  for (auto& b : boxes) inbox_[b.to].push_back(std::move(b));
  shared_.insert(from);
  return {};
}

std::vector<secagg_box> secagg_server::inbox(const std::string& to) const {
  auto it = inbox_.find(to);
  return it == inbox_.end() ? std::vector<secagg_box>{} : it->second;
}

core::result<void> secagg_server::add_masked(secagg_masked m) {
  const secagg_member* who = member(m.id);
  if (who == nullptr || !shared_.contains(m.id) || masked_.contains(m.id) || checked_)
    return make_error(errc::invalid_argument, "a masked input from " + m.id + " that was not expected");
  std::size_t length = 0;
  for (std::uint32_t seg : who->segments) length += params_.segments[seg].length;
  if (m.y.size() != length)
    return make_error(errc::invalid_argument, "device " + m.id + " sent " + std::to_string(m.y.size()) + " masked values, expected " + std::to_string(length));
  const std::uint64_t high = params_.bits >= 64 ? 0 : ~((std::uint64_t{1} << params_.bits) - 1);
  for (auto v : m.y)
    if ((v & high) != 0) return make_error(errc::invalid_argument, "device " + m.id + " sent a value outside the ring");
  masked_.emplace(m.id, std::move(m));
  return {};
}

// A segment is released when enough survivors cover it, its masks connect them, each covering
// survivor is tied to the sum by enough partners it masked with (its pledge, or every neighbour the
// graph gives it when it sent none: the rule each survivor checks before it signs), and every secret its
// unmasking needs has `threshold` surviving holders: each covering survivor's seed, and the key of
// every dropped device that masked with one of them.
secagg_unmask_request secagg_server::release() const {
  secagg_unmask_request r;
  if (!graph_) return r;
  std::vector<bool> alive(roster_.size(), false), gone(roster_.size(), false);
  for (std::size_t u = 0; u < roster_.size(); ++u) {
    const std::string& id = roster_[u].keys.id;
    if (masked_.contains(id)) {
      r.survivors.push_back(id);
      alive[u] = true;
    } else if (shared_.contains(id)) {
      r.dropped.push_back(id);
      gone[u] = true;
    }
  }
  // Surviving holders of each member's shares (a survivor holds its own).
  std::vector<std::size_t> holders(roster_.size(), 0);
  for (std::size_t u = 0; u < roster_.size(); ++u) {
    if (!alive[u] && !gone[u]) continue;
    for (std::size_t v : graph_->neighbours(u)) holders[u] += alive[v] ? 1 : 0;
    holders[u] += alive[u] ? 1 : 0;
  }
  for (std::uint32_t seg = 0; seg < params_.segments.size(); ++seg) {
    std::size_t covering = 0;
    bool recoverable = true, partnered = true;
    for (std::size_t u = 0; u < roster_.size(); ++u) {
      if (!alive[u] || !graph_->covers(u, seg)) continue;
      ++covering;
      recoverable = recoverable && holders[u] >= params_.threshold;
      for (std::size_t v : graph_->neighbours(u))
        if (gone[v] && graph_->masks(seg, u, v)) recoverable = recoverable && holders[v] >= params_.threshold;
      const auto pledge = masked_with_.find(roster_[u].keys.id);
      const auto masked_with = [&](std::size_t v) {
        if (pledge == masked_with_.end()) return true;
        const auto& without = pledge->second.without;
        return std::find(without.begin(), without.end(), roster_[v].keys.id) == without.end();
      };
      partnered = partnered &&
                  detail::count_partners(*graph_, params_.segments[seg], seg, u, [&](std::size_t v) { return alive[v] && masked_with(v); }).enough();
    }
    if (covering >= secagg_release_minimum(params_, seg) && recoverable && partnered && graph_->connected(seg, alive)) r.released.push_back(seg);
  }
  return r;
}

secagg_unmask_request secagg_server::check_request() {
  if (!checked_) checked_ = release();
  return *checked_;
}

core::result<void> secagg_server::add_signature(secagg_signature s) {
  if (!checked_ || !masked_.contains(s.id) || signatures_.contains(s.id))
    return make_error(errc::invalid_argument, "a consistency signature from " + s.id + " that was not expected");
  signatures_.emplace(s.id, std::move(s));  // checked by the clients, who hold the CA
  return {};
}

core::result<void> secagg_server::add_masked_with(secagg_masked_with m) {
  if (member(m.id) == nullptr || !shared_.contains(m.id) || masked_with_.contains(m.id) || checked_)
    return make_error(errc::invalid_argument, "a pledge of whom it masked with from " + m.id + " that was not expected");
  masked_with_.emplace(m.id, std::move(m));
  return {};
}

secagg_unmask_request secagg_server::unmask_request() const {
  secagg_unmask_request r = checked_ ? *checked_ : release();
  for (const auto& [id, sig] : signatures_) r.signatures.push_back(sig);
  return r;
}

secagg_unmask_request secagg_server::unmask_request_for(const std::string& id) const {
  const std::size_t u = position(id);
  if (u == roster_.size() || !graph_) return unmask_request();
  secagg_unmask_request r = checked_ ? *checked_ : release();
  const auto neighbours = graph_->neighbours(u);
  for (const auto& [signer, sig] : signatures_) {
    const std::size_t v = position(signer);
    if (v == u || std::binary_search(neighbours.begin(), neighbours.end(), v)) r.signatures.push_back(sig);
  }
  return r;
}

secagg_unmask_request secagg_server::check_request_for(const std::string& id) const {
  secagg_unmask_request r = checked_ ? *checked_ : release();
  const std::size_t u = position(id);
  if (u == roster_.size() || !graph_) return r;
  for (const std::size_t v : graph_->neighbours(u))
    if (auto it = masked_with_.find(roster_[v].keys.id); it != masked_with_.end() && masked_.contains(it->first)) r.partners.push_back(it->second);
  return r;
}

core::result<void> secagg_server::add_reply(secagg_unmask_reply r) {
  if (!masked_.contains(r.id) || replies_.contains(r.id)) return make_error(errc::invalid_argument, "an unmasking reply from " + r.id + " that was not expected");
  replies_.emplace(r.id, std::move(r));
  return {};
}

core::result<std::vector<secagg_segment_sum>> secagg_server::finish() const {
  const secagg_params& p = params_;
  if (replies_.size() < p.threshold)
    return make_error(errc::invalid_argument, std::to_string(replies_.size()) + " unmasking replies, below the threshold " + std::to_string(p.threshold));
  const secagg_unmask_request req = unmask_request();
  // The shares the replies hold, by owner (and segment).
  std::map<std::string, std::vector<shamir_share>> key_shares;
  std::map<std::pair<std::string, std::uint32_t>, std::vector<shamir_share>> seed_shares;
  for (const auto& [id, reply] : replies_) {
    for (const auto& s : reply.keys) key_shares[s.owner].push_back(s.share);
    for (const auto& s : reply.seeds) seed_shares[{s.owner, s.segment}].push_back(s.share);
  }
  // The dropped devices' mask keys that enough replies hold, checked against the keys they advertised.
  std::map<std::string, x25519_keypair> dropped_keys;
  for (const auto& v : req.dropped) {
    const auto& shares = key_shares[v];
    if (shares.size() < p.threshold) continue;  // the segments that need it are withheld below
    TESSERA_ASSIGN_OR_RETURN(const key256 sk, shamir_recover(shares, p.threshold));
    TESSERA_ASSIGN_OR_RETURN(auto pair, x25519_keypair::from_private(sk));
    if (pair.public_bytes() != member(v)->keys.s_pk)
      return make_error(errc::auth_failed, "the key recovered for " + v + " is not the one it advertised");
    dropped_keys.emplace(v, std::move(pair));
  }
  std::vector<std::size_t> dropped_at;
  for (const auto& v : req.dropped) dropped_at.push_back(position(v));
  TESSERA_ASSIGN_OR_RETURN(const auto fp, fixed_point::create(p.clip, p.bits, secagg_summands(p, roster_.size())));
  std::vector<secagg_segment_sum> out(p.segments.size());
  for (std::uint32_t seg = 0; seg < out.size(); ++seg) {  // a withheld segment's count, for the report
    for (const auto& u : req.survivors) out[seg].contributors += covers(*member(u), seg) ? 1 : 0;
    out[seg].withheld = out[seg].contributors < secagg_release_minimum(p, seg)
                            ? detail::too_few(out[seg].contributors, p, seg)
                            : std::to_string(out[seg].contributors) + " contributors that too few neighbours could unmask, or their masks did not connect";
  }
  for (std::uint32_t seg : req.released) {
    std::vector<std::uint64_t> acc(p.segments[seg].length, 0);
    std::string missing;
    for (const auto& u : req.survivors) {
      const secagg_member& mu = *member(u);
      if (!covers(mu, seg)) continue;
      const std::size_t u_at = position(u);
      // u's values for this segment inside its masked vector.
      std::size_t offset = 0;
      for (std::uint32_t s : mu.segments) {
        if (s == seg) break;
        offset += p.segments[s].length;
      }
      add_into(acc, std::span(masked_.at(u).y).subspan(offset, acc.size()), p.bits);
      const auto& shares = seed_shares[{u, seg}];
      if (shares.size() < p.threshold) {
        missing = "too few replies hold " + u + "'s seed";
        break;
      }
      TESSERA_ASSIGN_OR_RETURN(const key256 seed, shamir_recover(shares, p.threshold));
      TESSERA_ASSIGN_OR_RETURN(const key256 self, derive_key(seed, segment_info("self", p.round, seg)));
      mask_segment(acc, p.bits, self, false);
      // Masks u drew with devices that dropped after sharing keys do not cancel: remove them.
      for (std::size_t i = 0; i < req.dropped.size() && missing.empty(); ++i) {
        const std::string& v = req.dropped[i];
        if (!graph_->masks(seg, u_at, dropped_at[i])) continue;
        const auto key = dropped_keys.find(v);
        if (key == dropped_keys.end()) {
          missing = "too few replies hold " + v + "'s key";
          break;
        }
        TESSERA_ASSIGN_OR_RETURN(const key256 pair, key->second.agree(mu.keys.s_pk, segment_info("pair", p.round, seg)));
        mask_segment(acc, p.bits, pair, !(u_at < dropped_at[i]));  // undo u's sign
      }
      if (!missing.empty()) break;
    }
    if (!missing.empty()) {  // u's input stays masked: nothing of it is learned
      out[seg].withheld = missing;
      continue;
    }
    out[seg].released = true;
    out[seg].withheld.clear();
    out[seg].sum.resize(acc.size());
    fp.decode_sum(acc, out[seg].sum);
  }
  return out;
}

}  // namespace tessera::crypto
