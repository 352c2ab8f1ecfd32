// crypto/src/secagg_parts.hpp — internal: what secure aggregation's client (secagg.cpp) and server
// (secagg_server.cpp) both use: the segment masks, the HKDF info strings and roster lookups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/crypto/secagg_graph.hpp"

namespace tessera::crypto::detail {

// The mask of one segment, added (sign true) or subtracted, on `y` (that segment's values).
inline void mask_segment(std::span<std::uint64_t> y, int bits, key256_view key, bool add) {
  apply_mask(y, bits, key, add ? mask_sign::add : mask_sign::subtract);
}

inline std::string round_info(std::string_view what, std::uint64_t round) { return "tessera secagg " + std::string(what) + " r" + std::to_string(round); }
inline std::string segment_info(std::string_view what, std::uint64_t round, std::uint32_t segment) {
  return round_info(what, round) + " s" + std::to_string(segment);
}

// A member's position in the roster (a share's x is position + 1); roster.size() if absent.
inline std::size_t position_in(const secagg_roster& roster, const std::string& id) {
  for (std::size_t i = 0; i < roster.size(); ++i)
    if (roster[i].keys.id == id) return i;
  return roster.size();
}
inline const secagg_member* member_of(const secagg_roster& roster, const std::string& id) {
  const std::size_t i = position_in(roster, id);
  return i < roster.size() ? &roster[i] : nullptr;
}

inline bool covers(const secagg_member& m, std::uint32_t segment) {
  return std::binary_search(m.segments.begin(), m.segments.end(), segment);
}

// Device u's mask partners on `segment` (by the graph) and how many of them `counts` accepts (whose
// boxes it took, that survive, ...). One rule, at masking, at unmasking and in the hub's release: a
// device's input on a segment stays hidden in the sum only if as many partners as the sum's other
// contributors (min_aggregate − 1) are counted, where the graph gives that many, and never none.
struct partner_count {
  std::size_t partners = 0, counted = 0, needed = 0;
  [[nodiscard]] bool enough() const noexcept { return counted >= needed; }
};
template <class Counts>
partner_count count_partners(const secagg_graph& g, const secagg_segment& s, std::uint32_t segment, std::size_t u, Counts counts) {
  partner_count c;
  for (const std::size_t v : g.neighbours(u)) {
    if (!g.masks(segment, u, v)) continue;
    ++c.partners;
    c.counted += counts(v) ? 1 : 0;
  }
  const std::size_t others = s.min_aggregate > 0 ? s.min_aggregate - 1 : 0;
  c.needed = std::max<std::size_t>(1, std::min(others, c.partners));
  return c;
}

}  // namespace tessera::crypto::detail
