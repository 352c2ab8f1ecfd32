#include "tessera/crypto/secagg_graph.hpp"

#include <algorithm>
#include <deque>

#include "tessera/core/base/endian.hpp"
#include "tessera/crypto/digest.hpp"

namespace tessera::crypto {
namespace {

// A member's place on a segment's ring: SHA-256 over the protocol round, the segment and its id, so
// that neither the hub nor a device picks its neighbours.
sha256_digest ring_key(std::uint64_t round, std::uint32_t segment, const std::string& id) {
  static constexpr std::string_view k_context("tessera secagg graph v1\0", 24);  // with its terminating zero
  std::vector<std::byte> m;
  core::le_writer(m).bytes(std::span(k_context)).u64(round).u32(segment).bytes(std::span(id.data(), id.size()));
  return sha256_of(m);
}

}  // namespace

secagg_graph secagg_graph::build(const secagg_params& p, const secagg_roster& roster) {
  std::vector<std::string> ids;
  std::vector<std::vector<std::uint32_t>> segments;
  for (const auto& m : roster) {
    ids.push_back(m.keys.id);
    segments.push_back(m.segments);
  }
  return build(p, ids, segments);
}

secagg_graph secagg_graph::build(const secagg_params& p, std::span<const std::string> ids,
                                 std::span<const std::vector<std::uint32_t>> segments) {
  secagg_graph g;
  g.neighbors_ = p.neighbors;
  g.segments_.assign(segments.begin(), segments.end());
  g.coverers_.resize(p.segments.size());
  for (std::size_t u = 0; u < segments.size(); ++u)
    for (std::uint32_t s : segments[u])
      if (s < g.coverers_.size()) g.coverers_[s].push_back(u);
  g.complete_ = p.neighbors == 0 || segments.size() <= p.neighbors + 1;
  g.sparse_index_.assign(p.segments.size(), npos);
  if (g.complete_) return g;
  for (std::uint32_t s = 0; s < g.coverers_.size(); ++s) {
    const auto& c = g.coverers_[s];
    if (c.size() <= p.neighbors + 1) continue;  // an IST group: complete among its devices
    std::vector<std::pair<sha256_digest, std::size_t>> keyed;
    keyed.reserve(c.size());
    for (std::size_t u : c) keyed.emplace_back(ring_key(p.round, s, ids[u]), u);
    std::sort(keyed.begin(), keyed.end());
    ring r;
    r.position.assign(segments.size(), npos);
    for (const auto& [key, u] : keyed) {
      r.position[u] = static_cast<std::uint32_t>(r.order.size());
      r.order.push_back(u);
    }
    g.sparse_index_[s] = static_cast<std::uint32_t>(g.rings_.size());
    g.rings_.push_back(std::move(r));
  }
  return g;
}

const secagg_graph::ring* secagg_graph::sparse(std::uint32_t segment) const {
  return segment < sparse_index_.size() && sparse_index_[segment] != npos ? &rings_[sparse_index_[segment]] : nullptr;
}

bool secagg_graph::covers(std::size_t u, std::uint32_t segment) const {
  return u < segments_.size() && std::binary_search(segments_[u].begin(), segments_[u].end(), segment);
}

bool secagg_graph::masks(std::uint32_t segment, std::size_t u, std::size_t v) const {
  if (u == v || !covers(u, segment) || !covers(v, segment)) return false;
  const ring* r = sparse(segment);
  if (r == nullptr) return true;
  const std::size_t n = r->order.size();
  const std::size_t a = r->position[u], b = r->position[v];
  const std::size_t d = a > b ? a - b : b - a;
  return std::min(d, n - d) <= reach();
}

std::vector<std::size_t> secagg_graph::neighbours(std::size_t u) const {
  std::vector<std::size_t> out;
  if (u >= segments_.size()) return out;
  if (complete_) {
    for (std::size_t v = 0; v < segments_.size(); ++v)
      if (v != u) out.push_back(v);
    return out;
  }
  for (std::uint32_t s : segments_[u]) {
    if (const ring* r = sparse(s)) {
      const std::size_t n = r->order.size(), at = r->position[u];
      for (std::size_t step = 1; step <= reach(); ++step) {
        out.push_back(r->order[(at + step) % n]);
        out.push_back(r->order[(at + n - step) % n]);
      }
    } else if (s < coverers_.size()) {
      out.insert(out.end(), coverers_[s].begin(), coverers_[s].end());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::erase(out, u);
  return out;
}

bool secagg_graph::connected(std::uint32_t segment, const std::vector<bool>& alive) const {
  if (segment >= coverers_.size()) return true;
  const ring* r = sparse(segment);
  if (r == nullptr) return true;  // complete among its devices
  const std::size_t n = r->order.size();
  // Walk the ring's alive members from the first one found.
  std::vector<bool> seen(n, false);
  std::size_t total = 0, start = n;
  for (std::size_t i = 0; i < n; ++i)
    if (r->order[i] < alive.size() && alive[r->order[i]]) {
      ++total;
      if (start == n) start = i;
    }
  if (total <= 1) return true;
  std::deque<std::size_t> todo{start};
  seen[start] = true;
  std::size_t reached = 1;
  while (!todo.empty()) {
    const std::size_t at = todo.front();
    todo.pop_front();
    for (std::size_t step = 1; step <= reach(); ++step)
      for (const std::size_t next : {(at + step) % n, (at + n - step) % n}) {
        if (seen[next] || r->order[next] >= alive.size() || !alive[r->order[next]]) continue;
        seen[next] = true;
        ++reached;
        todo.push_back(next);
      }
  }
  return reached == total;
}

}  // namespace tessera::crypto
