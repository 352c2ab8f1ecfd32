// tessera/crypto/secagg_graph.hpp — who masks with whom in secure aggregation, and who holds whose
// shares: the neighbour graphs of Bell, Bonawitz, Gascón, Lepoint and Raykova, "Secure Single-Server
// Aggregation with (Poly)Logarithmic Overhead" (CCS 2020).
//
// With `neighbors` = 0, or a roster of at most neighbors + 1 devices, the graph is complete (Bonawitz et
// al. 2017): every device shares its secrets with every other, and two devices mask each segment both
// cover. Otherwise each segment covered by at most neighbors + 1 devices (an IST group) stays complete
// among them, and a wider segment (the parameters every IST device trains, a FedAvg model) connects its
// devices in a Harary graph: a ring in an order no party picks (SHA-256 of the protocol round, the
// segment and the id), each device joined to the ⌈neighbors / 2⌉ nearest on either side. That graph is
// neighbors-connected: the survivors stay connected unless many neighbours of one device drop. A device
// shares its secrets with its neighbours only (the union over its segments), so its work and its bytes
// grow with neighbors, not with the fleet.
//
// The hub may release a segment's sum only if the survivors covering it are connected by the segment's
// masks: otherwise it would hold the sum of each connected part on its own (it has every masked input,
// and the masks inside a part cancel). Clients check this before they reveal anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/crypto/secagg.hpp"

namespace tessera::crypto {

class secagg_graph {
 public:
  // The roster's members in order: their ids and their (sorted) segments; `p.neighbors` as above.
  [[nodiscard]] static secagg_graph build(const secagg_params& p, std::span<const std::string> ids,
                                          std::span<const std::vector<std::uint32_t>> segments);
  [[nodiscard]] static secagg_graph build(const secagg_params& p, const secagg_roster& roster);

  [[nodiscard]] std::size_t size() const noexcept { return segments_.size(); }
  // Whether every device is every other's neighbour (Bonawitz et al.'s protocol).
  [[nodiscard]] bool complete() const noexcept { return complete_; }
  [[nodiscard]] bool covers(std::size_t u, std::uint32_t segment) const;
  // Whether u and v (roster positions, u != v) mask `segment` with each other.
  [[nodiscard]] bool masks(std::uint32_t segment, std::size_t u, std::size_t v) const;
  // u's neighbours (sorted roster positions, u left out): the devices that hold its shares.
  [[nodiscard]] std::vector<std::size_t> neighbours(std::size_t u) const;
  // Whether the members with alive[u] that cover `segment` are connected by its masks (none or one: yes).
  [[nodiscard]] bool connected(std::uint32_t segment, const std::vector<bool>& alive) const;

 private:
  struct ring {
    std::vector<std::size_t> order;       // the covering members, in ring order
    std::vector<std::uint32_t> position;  // by roster position: its place in `order`, or npos
  };
  static constexpr std::uint32_t npos = UINT32_MAX;
  [[nodiscard]] const ring* sparse(std::uint32_t segment) const;
  [[nodiscard]] std::size_t reach() const noexcept { return (neighbors_ + 1) / 2; }

  std::size_t neighbors_ = 0;
  bool complete_ = true;
  std::vector<std::vector<std::uint32_t>> segments_;  // by roster position
  std::vector<std::vector<std::size_t>> coverers_;    // by segment: roster positions, sorted
  std::vector<std::uint32_t> sparse_index_;           // by segment: index into rings_, or npos
  std::vector<ring> rings_;
};

// The threshold a device's secrets need: a majority of their holders (its neighbours and itself), and at
// least 2. The hub sets it from the most holders any device of the round has; a device holds the hub to
// it with the holders its roster gives it (edge/privacy_policy.hpp).
[[nodiscard]] constexpr std::size_t secagg_majority(std::size_t holders) noexcept { return holders / 2 + 1 > 2 ? holders / 2 + 1 : 2; }

// The most holders one device's secrets can have in a round of `roster` devices under `neighbors`: every
// other device and itself while the graph is complete; otherwise its ring neighbours on the wide
// segment, plus (`largest_group` > 0, an IST group segment) the other devices of the largest group, or
// that segment's own ring neighbours when the group is itself too wide to stay complete.
[[nodiscard]] constexpr std::size_t secagg_most_holders(std::size_t neighbors, std::size_t roster, std::size_t largest_group) noexcept {
  if (neighbors == 0 || roster <= neighbors + 1) return roster;
  const std::size_t ring = 2 * ((neighbors + 1) / 2);
  const std::size_t group = largest_group == 0 ? 0 : largest_group <= neighbors + 1 ? largest_group - 1 : ring;
  return ring + group + 1 < roster ? ring + group + 1 : roster;
}

}  // namespace tessera::crypto
