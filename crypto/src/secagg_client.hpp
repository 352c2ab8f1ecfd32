// crypto/src/secagg_client.hpp — internal: a secure aggregation client's state, shared by secagg.cpp
// (keys, shares, masking) and secagg_unmask.cpp (the pledge, the consistency check, the unmasking).
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/endian.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/crypto/secagg_graph.hpp"

namespace tessera::crypto {
namespace detail {

// A string and its terminating zero, so that no two lists of strings have the same bytes.
template <class Out>
void put_text(core::le_writer<Out>& w, std::string_view s) {
  w.bytes(std::span(s.data(), s.size())).u8(0);
}

}  // namespace detail

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
  std::map<std::string, verifying_key> peers;            // the neighbours' keys, checked against the CA in share_keys
  // An unmasking request's names, checked (validate) and, to be answered, signed by enough survivors.
  struct named_sets {
    std::set<std::string> survivors, dropped;
    std::set<std::uint32_t> released;
  };
  std::optional<secagg_unmask_request> checked;          // the request this device signed (no signatures)
  named_sets checked_names;                              // its names, as validate() read them
  secagg_signature check_signature;

  // Keys, seeds and shares are secrets: each wipes itself when the state goes, on any path.
  state(x25519_keypair c_, x25519_keypair s_) : c(std::move(c_)), s(std::move(s_)) {}

  // The three steps of mask(): take the shares the inbox holds, refuse when too few neighbours' masks
  // would hide the input, mask the encoded input.
  core::result<void> open_boxes(const std::vector<secagg_box>& boxes);
  [[nodiscard]] core::result<void> enough_pairwise_masks() const;
  core::result<void> add_masks(std::span<std::uint64_t> y);
  // Whether roster position v holds this device's shares: itself or a neighbour.
  [[nodiscard]] bool holds(std::size_t v) const { return v == index || std::binary_search(neighbours.begin(), neighbours.end(), v); }
  // share_keys' checks of the roster: groups (devices sharing a segment not everyone covers) cover the
  // same segments; each neighbour's certificate, signature, parameters and model.
  [[nodiscard]] core::result<void> same_groups(const secagg_roster& offered) const;
  [[nodiscard]] core::result<void> check_neighbours(const secagg_roster& offered, const std::vector<std::size_t>& near);
  [[nodiscard]] core::result<void> validate(const secagg_unmask_request& request, named_sets& out) const;
  [[nodiscard]] core::result<void> enough_surviving_partners(std::uint32_t seg, const std::set<std::string>& survivors) const;
  [[nodiscard]] core::result<void> neighbours_partnered(const secagg_unmask_request& request, const named_sets& named) const;
  [[nodiscard]] core::result<void> enough_signatures(const secagg_unmask_request& request, const named_sets& named) const;
};

}  // namespace tessera::crypto
