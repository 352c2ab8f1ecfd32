// tessera/crypto/secagg.hpp — the secure aggregation protocol (Bonawitz et al., "Practical Secure
// Aggregation for Privacy-Preserving Machine Learning", CCS 2017, semi-honest server with signed keys),
// as two in-memory state machines: no sockets, no threads. The hub's engine drives `secagg_server`, an
// agent (and the simulator's devices) drive `secagg_client`; net/ carries the messages.
//
// The vector being summed is cut into segments (in IST: one per group of devices training the same
// neurons, and one for the parameters every device trains). A participant covers some segments; its
// masked input is the concatenation of its segments. Pairwise masks between u and v are drawn only on
// the segments both cover and where the neighbour graph joins them (secagg_graph.hpp, Bell et al. 2020:
// complete for small rosters and IST groups, a Harary graph on wide segments of large ones), so they
// cancel in each segment's sum. A device shares its secrets with its neighbours only. Each participant
// has one self-mask seed per segment it covers, shared separately: a segment with fewer than
// `min_aggregate` survivors, or whose survivors its masks do not connect, or whose secrets too few
// neighbours can recover, is not released; its survivors' self-mask shares are never revealed, and
// their inputs on it stay masked even though the dropped devices' keys are recovered for the others.
//
//   step              client (each device u)                      server (the hub)
//   advertise keys    two X25519 pairs; (round, u, c_pk, s_pk)    collects; the roster (>= threshold)
//                     signed with u's certificate key             with each device's neighbours' keys
//   share keys        checks its neighbours' signatures against   routes each box to its recipient
//                     the CA; t-of-n shares of s_sk and of every
//                     b_u,s to each neighbour, each box AES-256-
//                     GCM under KA(c_u, c_v)
//   masked input      y = fixed-point(x) + PRG(b_u,s) ± PRG(s_uv) collects the survivors' y
//                     in Z_2^bits, per segment, v its neighbours
//   unmask            shares of b_u,s for survivors (released     recovers the seeds and the dropped
//                     segments), of s_sk for the dropped; never   keys, removes the masks: per segment
//                     both for one device                        the sum over its survivors
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/agreement.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/shamir.hpp"

namespace tessera::crypto {

class secagg_graph;

struct secagg_segment {
  std::size_t length = 0;          // values
  std::size_t min_aggregate = 2;   // fewer survivors covering it: not released
};

// What every party agrees on before the round: its number, the ring, the clip, the threshold of the
// secret sharing, and the segments.
struct secagg_params {
  std::uint64_t round = 0;
  int bits = 32;
  double clip = 1.0;
  std::size_t threshold = 2;       // t: shares needed to recover a secret, and survivors needed to unmask
  std::vector<secagg_segment> segments;
  std::size_t neighbors = 0;       // 0: every device is every other's neighbour (secagg_graph.hpp)
  // The inputs the ring is sized for (fixed_point's summands): 0, the roster's size; more leaves room
  // for noise and fixes the ring's scale before anyone knows the roster.
  std::uint64_t summands = 0;
  // Differential privacy (> 0): each device's input is its unweighted change (secagg_change_input), and
  // it adds to every value it encodes symmetric Skellam noise of this variance, in ring steps² (the
  // hub's share of the noise: crypto/noise.hpp), drawn from a key of its own CSPRNG.
  double noise = 0;
  // Adaptive clipping under differential privacy (> 0, at most clip): the weight value of a device's
  // last covered segment is +fitted_value if its change fitted within the clip, −fitted_value if it
  // was clipped — the sum is the noised count of fitting changes, centred (Andrew et al. 2021).
  double fitted_value = 0;
  // Devices that sample themselves (> 0, at most 1): every device of the round draws from its own
  // CSPRNG whether it contributes, with this probability; one not drawn sends its noise alone (a zero
  // change, a count value of 0), masked like any input, so the hub cannot tell who trained and
  // amplification by sampling holds against it too. 0: the hub drew the sample.
  double sample_rate = 0;
  // Differential privacy: the contributors the noise is sized for (0: each segment's min_aggregate).
  // Each device's share is the sum's noise over this many, so a segment is released only from at
  // least this many survivors, whatever its min_aggregate: fewer would carry less noise than σ.
  std::size_t noise_contributors = 0;
};

// The fewest survivors a segment is released from: its min_aggregate, and under the devices' noise at
// least the contributors the noise is sized for.
[[nodiscard]] constexpr std::size_t secagg_release_minimum(const secagg_params& p, std::size_t segment) noexcept {
  const std::size_t least = p.segments[segment].min_aggregate;
  return p.noise > 0 && p.noise_contributors > least ? p.noise_contributors : least;
}

// The inputs the ring holds: params.summands, or the roster's size.
[[nodiscard]] constexpr std::uint64_t secagg_summands(const secagg_params& p, std::size_t roster) noexcept {
  return p.summands > 0 ? p.summands : roster;
}

// The sampling rate a device's release is composed at: the round's own when the devices sample
// themselves, else 1 (the hub knows who it asked).
[[nodiscard]] constexpr double secagg_sampling_rate(const secagg_params& p) noexcept { return p.sample_rate > 0 ? p.sample_rate : 1.0; }
// Whether a device draws itself into a self-sampled round, from `key` (an agent's from its CSPRNG,
// the simulator's seeded); always true in other rounds.
[[nodiscard]] bool secagg_draws_in(const secagg_params& p, key256_view key);

// What a device vouches for besides its keys: the segments it covers and the SHA-256 of the model it
// was sent for the round. Every device of one group (the same segments) is sent the same model; each
// checks its neighbours' digests against its own, so a hub that sends one device of a group a model of
// its own making (to single out that device's update in the group's sum: Pasquini, Francati, Ateniese,
// CCS 2022) is refused before any share leaves.
struct secagg_pledge {
  std::vector<std::uint32_t> segments;  // sorted, distinct
  sha256_digest model{};                // what ASSIGN announced and the download was checked against
};

// Step 1, client → server.
struct secagg_keys {
  std::string id;
  std::string certificate_pem;     // issued by the fleet's CA: the key that signed
  public_key c_pk{}, s_pk{};
  sha256_digest model{};           // the pledge's digest (its segments are the roster member's)
  std::vector<std::byte> signature;
};

// Step 1, server → clients: who takes part, in order (a share's x is position + 1), and what each covers.
// With a sparse graph a device's roster carries the keys of its neighbours only: the others' keys are
// empty (id alone), and the device never uses them.
struct secagg_member {
  secagg_keys keys;
  std::vector<std::uint32_t> segments;  // sorted, distinct, < params.segments.size()
};
using secagg_roster = std::vector<secagg_member>;

// Step 2: one encrypted box of shares, from → to.
struct secagg_box {
  std::string from, to;
  std::vector<std::byte> box;
};

// Step 3, client → server.
struct secagg_masked {
  std::string id;
  std::vector<std::uint64_t> y;    // the covered segments' values, in segment order
  std::size_t clipped = 0;         // values the clip saturated: for the device's own log, never sent
};

// Step 3, client → server, beside the masked input: whom this device masked with, as the neighbours (by
// the roster's graph) whose boxes it did not take — usually none, so the pledge stays small however
// many neighbours a device has — sorted, signed with its certificate's key. The hub controls each device's
// inbox: without this, it could hand a device exactly threshold − 1 boxes, name those senders dropped
// and the device a survivor, and collect the device's seed from its other neighbours. Each neighbour
// checks the pledge before it signs a survivor set (secagg_client::check).
struct secagg_masked_with {
  std::string id;
  std::vector<std::string> without;  // neighbours it did not mask with
  std::vector<std::byte> signature;
};
[[nodiscard]] std::vector<std::byte> secagg_masked_with_message(std::uint64_t round, const secagg_masked_with& m);

// A survivor's signature over an unmasking request (the consistency check), made with its certificate's
// key; a device counts those of its own neighbours, whose certificates its roster holds.
struct secagg_signature {
  std::string id;
  std::vector<std::byte> signature;
};

// Step 4, server → clients: first to be signed (the consistency check, Bonawitz et al.'s round 3:
// `signatures` empty), then to be answered, carrying the signatures over the same survivors, dropped
// and released of at least `threshold` of the asked device's holders (itself and its neighbours).
struct secagg_unmask_request {
  std::vector<std::string> survivors;   // sent a masked input
  std::vector<std::string> dropped;     // shared keys, sent no masked input
  std::vector<std::uint32_t> released;  // segments whose sums will be revealed
  std::vector<secagg_signature> signatures;
  // To be signed only: the pledges of the survivors that are the asked device's neighbours.
  std::vector<secagg_masked_with> partners;
};

// The message a survivor signs in the consistency check: the round, and the request's survivors,
// dropped and released (its signatures are not part of it).
[[nodiscard]] std::vector<std::byte> secagg_check_message(std::uint64_t round, const secagg_unmask_request& request);

// Step 4, client → server.
struct secagg_share {
  std::string owner;               // whose secret
  std::uint32_t segment = 0;       // for a self-mask seed; ignored for a key
  shamir_share share;
};
struct secagg_unmask_reply {
  std::string id;
  std::vector<secagg_share> seeds;  // b_owner,segment of survivors
  std::vector<secagg_share> keys;   // s_sk of the dropped
};

// A device's input to the sums, from its update: the subnet's flat parameters as received and as
// trained, cut in the order of the covered segments. Each segment's input is weight·(trained − received)
// for its length − 1 values, then weight·clip: the hub divides a segment's released sum by the sum of
// its last values (over clip) to get the weighted mean change. `weight` is in [0, 1] (the device's
// examples over the most a round allows); the values must exactly fill the covered segments.
[[nodiscard]] core::result<std::vector<std::vector<float>>> secagg_weighted_input(std::span<const float> received,
                                                                                  std::span<const float> trained, double weight,
                                                                                  const secagg_params& p,
                                                                                  std::span<const std::uint32_t> segments);

// A device's input under differential privacy: each segment's values are trained − received (already
// clipped to the L2 norm the task gave), and the weight's value is 0 — the number of contributors, which
// a weight would reveal, is not released; the hub divides by the expected number instead. With
// p.fitted_value > 0 the last segment's weight value is ±fitted_value (`fitted`: the change was within
// the clip before clipping). A device that sampled itself out (`drawn` false) puts in zeros only, its
// count value included: its noise is all it adds.
[[nodiscard]] core::result<std::vector<std::vector<float>>> secagg_change_input(std::span<const float> received,
                                                                                std::span<const float> trained,
                                                                                const secagg_params& p,
                                                                                std::span<const std::uint32_t> segments,
                                                                                bool fitted = true, bool drawn = true);

// An input in the ring before any mask: every covered segment encoded in order (fixed_point for
// `summands` = secagg_summands), rounding stochastic from one keystream of `rounding_key` read in
// segment order; with p.noise > 0, Skellam noise of that variance added to every value from
// `noise_key` (required then). secagg_client::mask masks exactly this; tessera-sim adds it unmasked
// (secagg_plain_sum), and since the masks cancel in the ring the released sums are the same bits.
struct secagg_encoded {
  std::vector<std::uint64_t> y;
  std::size_t clipped = 0;
};
[[nodiscard]] core::result<secagg_encoded> secagg_encode(const secagg_params& p, std::size_t summands,
                                                         std::span<const std::uint32_t> segments,
                                                         const std::vector<std::vector<float>>& input, key256_view rounding_key,
                                                         const key256* noise_key = nullptr);

// Ring values on the wire: 4 bytes each for bits ≤ 32, else 8, little-endian. Unpacking checks the
// size and that every value lies in the ring.
[[nodiscard]] constexpr std::size_t secagg_value_bytes(int bits) noexcept { return bits <= 32 ? 4 : 8; }
void secagg_pack(std::span<const std::uint64_t> y, int bits, std::span<std::byte> out);
[[nodiscard]] core::result<std::vector<std::uint64_t>> secagg_unpack(std::span<const std::byte> in, int bits);

// The message a device signs to advertise its keys for a round: the round's parameters (its number,
// ring, threshold, graph, noise and segment table), its id, its keys, the segments it covers and the
// digest of the model it was sent. A roster member whose segments or digest differ from what it
// signed, or whose keys were signed for another round or other parameters, does not verify.
[[nodiscard]] std::vector<std::byte> secagg_signed_message(const secagg_params& p, const std::string& id, const public_key& c_pk,
                                                           const public_key& s_pk, std::span<const std::uint32_t> segments,
                                                           const sha256_digest& model);

class secagg_client {
 public:
  // `id` is this device's id as in its certificate; `ca_pem` the fleet's CA certificate; `crl_pem` its
  // revocation list (empty: not checked), against which every roster member's certificate is checked.
  // `pledge`: the segments the device's assignment gave it and the digest of the model it was sent.
  [[nodiscard]] static core::result<secagg_client> create(std::string id, std::string certificate_pem, const signing_key& key,
                                                          std::string ca_pem, secagg_params params, secagg_pledge pledge,
                                                          std::string crl_pem = {});
  secagg_client(secagg_client&&) noexcept;
  secagg_client& operator=(secagg_client&&) noexcept;
  ~secagg_client();

  [[nodiscard]] const secagg_keys& keys() const noexcept;
  // Checks the roster (every neighbour's certificate against the CA and its list, every neighbour's
  // signature over its keys, segments and model digest, the same digest as this device's for every
  // neighbour with the same segments, this device's own keys and segments, at least `threshold`
  // members) and returns one box for every neighbour.
  [[nodiscard]] core::result<std::vector<secagg_box>> share_keys(const secagg_roster& roster);
  // The boxes addressed to this device (their senders are the devices that shared keys), and the
  // update: one vector per covered segment. Rounding is stochastic, from `rounding_key`. Refused when
  // fewer than threshold − 1 neighbours' boxes came (an empty or short inbox): the self mask alone
  // would hide the input, and the hub recovers it from the neighbours at unmasking.
  [[nodiscard]] core::result<secagg_masked> mask(const std::vector<secagg_box>& boxes, const std::vector<std::vector<float>>& input,
                                                 key256_view rounding_key);
  // After mask(): whom it masked with, signed with `key` (this device's certificate key).
  [[nodiscard]] core::result<secagg_masked_with> masked_with(const signing_key& key) const;
  // The consistency check: signs the request with `key` (this device's certificate key), once per
  // round: asked again, the same request gets the same signature and another is refused. Refuses a
  // request that unmask() would refuse, and one whose `partners` lack the signed pledge of a neighbour
  // it names a survivor, or show that neighbour masking a released segment with fewer survivors than
  // the segment's other contributors need.
  [[nodiscard]] core::result<secagg_signature> check(const secagg_unmask_request& request, const signing_key& key);
  // Refuses a request other than the one this device signed, one carrying fewer than `threshold` valid
  // signatures over it by surviving holders of this device's shares (itself and its neighbours),
  // one that asks for both kinds of share of one device, that names fewer than `threshold` survivors,
  // or devices this device never heard of.
  [[nodiscard]] core::result<secagg_unmask_reply> unmask(const secagg_unmask_request& request);

 private:
  struct state;
  explicit secagg_client(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// A segment's result: the sum over its survivors, or nothing (too few survivors).
struct secagg_segment_sum {
  bool released = false;
  std::size_t contributors = 0;   // survivors covering the segment (released or not)
  std::vector<double> sum;
  std::string withheld;           // why not released
};

class secagg_server {
 public:
  explicit secagg_server(secagg_params params);

  [[nodiscard]] const secagg_params& params() const noexcept { return params_; }
  // Step 1: each device's keys (the server does not check signatures: the clients do).
  [[nodiscard]] core::result<void> add_keys(secagg_keys k, std::vector<std::uint32_t> segments);
  // Ends step 1 (later keys are refused) and returns the roster with every member's keys; roster_for
  // gives one device's, with its neighbours' keys only.
  [[nodiscard]] core::result<secagg_roster> roster();
  [[nodiscard]] core::result<secagg_roster> roster_for(const std::string& id);
  // Step 2: a device's boxes; then each device's inbox.
  [[nodiscard]] core::result<void> add_boxes(const std::string& from, std::vector<secagg_box> boxes);
  [[nodiscard]] std::vector<secagg_box> inbox(const std::string& to) const;
  // Step 3.
  [[nodiscard]] core::result<void> add_masked(secagg_masked m);
  // Step 4: ends step 3 (later masked inputs and pledges are refused) and fixes the request for the
  // survivors to sign (what later calls return, whatever arrives after); their signatures; the
  // request with them, to be answered.
  [[nodiscard]] secagg_unmask_request check_request();
  [[nodiscard]] core::result<void> add_signature(secagg_signature s);
  // A device's pledge of whom it masked with (the clients check it); the check request for one device
  // carries its neighbours' pledges.
  [[nodiscard]] core::result<void> add_masked_with(secagg_masked_with m);
  [[nodiscard]] secagg_unmask_request check_request_for(const std::string& id) const;
  [[nodiscard]] secagg_unmask_request unmask_request() const;
  // The request for one device to answer: the signatures of its surviving neighbours and its own.
  [[nodiscard]] secagg_unmask_request unmask_request_for(const std::string& id) const;
  // Then the replies (at least `threshold`), then the sums.
  [[nodiscard]] core::result<void> add_reply(secagg_unmask_reply r);
  [[nodiscard]] core::result<std::vector<secagg_segment_sum>> finish() const;

 private:
  [[nodiscard]] const secagg_member* member(const std::string& id) const;
  // The survivors, the dropped and the segments to release, from what has arrived.
  [[nodiscard]] secagg_unmask_request release() const;
  [[nodiscard]] std::size_t position(const std::string& id) const;
  secagg_params params_;
  secagg_roster roster_;
  std::shared_ptr<const secagg_graph> graph_;     // once the roster is closed
  std::map<std::string, std::vector<secagg_box>> inbox_;
  std::set<std::string> shared_;                  // U2
  std::map<std::string, secagg_masked> masked_;   // U3
  std::optional<secagg_unmask_request> checked_;  // fixed by check_request(): step 3 is over
  std::map<std::string, secagg_signature> signatures_;  // U4
  std::map<std::string, secagg_masked_with> masked_with_;
  std::map<std::string, secagg_unmask_reply> replies_;
};

// The sums secure aggregation releases, computed from unmasked encodings (the simulator's devices):
// the same ring, the same release rule (a segment needs min_aggregate contributors), the same decoding.
class secagg_plain_sum {
 public:
  // `summands`: the roster's size the encodings were made for.
  secagg_plain_sum(secagg_params params, std::size_t summands);
  [[nodiscard]] core::result<void> add(std::span<const std::uint32_t> segments, const secagg_encoded& e);
  [[nodiscard]] core::result<std::vector<secagg_segment_sum>> finish() const;
  [[nodiscard]] std::size_t clipped() const noexcept { return clipped_; }

 private:
  secagg_params params_;
  std::size_t summands_ = 0;
  std::vector<std::vector<std::uint64_t>> acc_;
  std::vector<std::size_t> contributors_;
  std::size_t added_ = 0, clipped_ = 0;
};

}  // namespace tessera::crypto
