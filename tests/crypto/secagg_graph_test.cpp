// Tests of tessera/crypto/secagg_graph.hpp: complete graphs where Bonawitz et al.'s protocol applies,
// Harary graphs on wide segments (degree, symmetry, the order no party picks), and the connectivity the
// release rule depends on.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "tessera/crypto/secagg_graph.hpp"

using namespace tessera;

namespace {

// `groups` groups of three (segments 0 .. groups-1) and a segment every device covers (the last).
struct fleet {
  crypto::secagg_params params;
  std::vector<std::string> ids;
  std::vector<std::vector<std::uint32_t>> segments;
};
fleet ist_fleet(std::size_t groups, std::size_t neighbors, std::uint64_t round = 11) {
  fleet f;
  f.params.round = round;
  f.params.threshold = 2;
  f.params.neighbors = neighbors;
  for (std::size_t g = 0; g <= groups; ++g) f.params.segments.push_back({.length = 4, .min_aggregate = 2});
  const auto shared = static_cast<std::uint32_t>(groups);
  for (std::size_t d = 0; d < 3 * groups; ++d) {
    f.ids.push_back("dev-" + std::to_string(d));
    f.segments.push_back({static_cast<std::uint32_t>(d / 3), shared});
  }
  return f;
}

std::set<std::string> neighbour_ids(const fleet& f, const crypto::secagg_graph& g, const std::string& id) {
  const auto at = static_cast<std::size_t>(std::find(f.ids.begin(), f.ids.end(), id) - f.ids.begin());
  std::set<std::string> out;
  for (std::size_t v : g.neighbours(at)) out.insert(f.ids[v]);
  return out;
}

}  // namespace

TEST_CASE("secagg graph: complete without neighbors, or for a roster of at most neighbors + 1 devices") {
  for (const std::size_t k : {std::size_t{0}, std::size_t{8}}) {
    CAPTURE(k);
    const fleet f = ist_fleet(3, k);  // 9 devices
    const auto g = crypto::secagg_graph::build(f.params, f.ids, f.segments);
    CHECK(g.complete());
    for (std::size_t u = 0; u < 9; ++u) CHECK(g.neighbours(u).size() == 8);
    CHECK(g.masks(0, 0, 1));
    CHECK_FALSE(g.masks(0, 0, 3));  // sa-3 trains another group
    CHECK(g.masks(3, 0, 8));        // the shared segment: everyone
  }
}

TEST_CASE("secagg graph: a wide segment is a Harary graph of degree neighbors; groups stay complete") {
  const fleet f = ist_fleet(20, 6);  // 60 devices, groups of 3 < 7
  const auto g = crypto::secagg_graph::build(f.params, f.ids, f.segments);
  REQUIRE_FALSE(g.complete());
  const std::uint32_t shared = 20;
  for (std::size_t u = 0; u < 60; ++u) {
    CAPTURE(u);
    std::size_t degree = 0;
    for (std::size_t v = 0; v < 60; ++v) {
      CHECK(g.masks(shared, u, v) == g.masks(shared, v, u));
      degree += g.masks(shared, u, v) ? 1 : 0;
    }
    CHECK(degree == 6);
    // Group mates mask their group's segment with each other, whatever the ring says.
    const auto group = static_cast<std::uint32_t>(u / 3);
    for (std::size_t v = 3 * group; v < 3 * group + 3; ++v) CHECK(g.masks(group, u, v) == (u != v));
    // Neighbours: the ring's 6 and the group's 2 (some may coincide), never more.
    const auto n = g.neighbours(u);
    CHECK(n.size() >= 6);
    CHECK(n.size() <= 8);
    for (std::size_t v : n) CHECK((g.masks(shared, u, v) || g.masks(group, u, v)));
  }
  // An odd neighbors rounds up to the next even degree.
  fleet odd = f;
  odd.params.neighbors = 5;
  const auto g5 = crypto::secagg_graph::build(odd.params, odd.ids, odd.segments);
  std::size_t degree = 0;
  for (std::size_t v = 0; v < 60; ++v) degree += g5.masks(shared, 7, v) ? 1 : 0;
  CHECK(degree == 6);
}

TEST_CASE("secagg graph: the ring's order comes from the protocol round and the ids, not the roster's order") {
  const fleet a = ist_fleet(20, 4, 11);
  fleet shuffled = a;
  std::reverse(shuffled.ids.begin(), shuffled.ids.end());
  std::reverse(shuffled.segments.begin(), shuffled.segments.end());
  const auto ga = crypto::secagg_graph::build(a.params, a.ids, a.segments);
  const auto gs = crypto::secagg_graph::build(shuffled.params, shuffled.ids, shuffled.segments);
  for (const auto& id : a.ids) CHECK(neighbour_ids(a, ga, id) == neighbour_ids(shuffled, gs, id));
  // Another round, other neighbours.
  const fleet b = ist_fleet(20, 4, 12);
  const auto gb = crypto::secagg_graph::build(b.params, b.ids, b.segments);
  std::size_t same = 0;
  for (const auto& id : a.ids) same += neighbour_ids(a, ga, id) == neighbour_ids(b, gb, id) ? 1 : 0;
  CHECK(same < 10);
}

TEST_CASE("secagg graph: survivors stay connected through fewer than neighbors dropouts, and not when two arcs are cut out") {
  const fleet f = ist_fleet(10, 4);  // 30 devices, reach 2 on the ring
  const auto g = crypto::secagg_graph::build(f.params, f.ids, f.segments);
  const std::uint32_t shared = 10;
  // Any 3 dropped devices leave the rest connected (the ring lattice is 4-connected).
  std::size_t tried = 0;
  for (std::size_t a = 0; a < 30; ++a)
    for (std::size_t b = a + 1; b < 30; ++b)
      for (std::size_t c = b + 1; c < 30; c += 3) {
        std::vector<bool> alive(30, true);
        alive[a] = alive[b] = alive[c] = false;
        CHECK(g.connected(shared, alive));
        ++tried;
      }
  CHECK(tried > 1000);
  // Two pairs of ring neighbours (found through masks) cut the ring in two.
  std::vector<bool> alive(30, true);
  std::size_t first = 0, second = 0;
  for (std::size_t v = 1; v < 30; ++v) {
    std::vector<bool> trial(30, true);
    trial[0] = trial[v] = false;
    if (!g.masks(shared, 0, v)) continue;
    // v is within 2 of 0; find a pair far from both whose removal disconnects.
    for (std::size_t x = 1; x < 30 && first == 0; ++x)
      for (std::size_t y = x + 1; y < 30 && first == 0; ++y) {
        if (x == v || y == v || !g.masks(shared, x, y)) continue;
        std::vector<bool> cut = trial;
        cut[x] = cut[y] = false;
        if (!g.connected(shared, cut)) {
          first = v;
          second = x;
          alive = cut;
        }
      }
    if (first != 0) break;
  }
  REQUIRE(first != 0);
  CHECK_FALSE(g.connected(shared, alive));
  CHECK(second != 0);
  // A group's segment is complete among its devices: connected whoever is left.
  CHECK(g.connected(0, alive));
}
