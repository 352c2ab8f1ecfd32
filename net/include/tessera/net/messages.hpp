// tessera/net/messages.hpp — the control messages of DESIGN.md §3 and their JSON encoding.
//
// Every control frame's payload is one JSON object. Parsing validates every field the message needs
// (presence, type, range) and reports the first failure as errc::bad_field naming the field, e.g.
// "ASSIGN: field 'sha256': expected 64 hex characters". Unknown extra fields are ignored so newer peers
// can add fields. Nesting is limited (max_json_depth) before the JSON parser runs, so a payload of
// brackets cannot exhaust the stack. Tensor bytes never travel here: they go in CHUNK frames.
//
//   net::msg::hello h{.device_id = "pi-07", .memory_budget_bytes = 64 << 20, .examples = 6000,
//                     .codecs = {core::codec_kind::f32}};
//   std::vector<std::byte> frame = net::encode_message(h);         // header + JSON payload
//   auto m = net::parse_message(net::frame_type::hello, payload);   // result<net::message>
//   if (m) if (auto* got = std::get_if<net::msg::hello>(&m.value())) use(got->device_id);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/net/frame.hpp"

namespace tessera::net {

inline constexpr int max_json_depth = 16;
inline constexpr std::size_t max_reason_chars = 1024;
inline constexpr std::size_t max_resume_entries = 16;
inline constexpr std::size_t max_widths = 64;

// How a parameter blob is encoded on the wire: core::codec_kind, by its names "f32", "f16", "q8"
// (core/math/codec.hpp documents the bytes).
using codec = core::codec_kind;
inline constexpr std::size_t max_code_chars = 64;
// Features and classes a STATS exchange may describe (the frame size bounds them further).
inline constexpr std::uint64_t max_stats_features = 1u << 20;
inline constexpr std::uint64_t max_stats_classes = 1u << 16;

using digest = std::array<std::uint8_t, 32>;  // SHA-256 of a whole blob

// Same rule as crypto::valid_device_id ([A-Za-z0-9._-]{1,64}); kept here so the codec needs no OpenSSL.
[[nodiscard]] bool valid_device_id(std::string_view id) noexcept;

// Secure aggregation limits: members of a roster, segments of a round, bytes of a certificate, a
// signature and a box of shares.
inline constexpr std::size_t max_secagg_members = 4096;
inline constexpr std::size_t max_secagg_segments = 4097;
inline constexpr std::size_t max_certificate_chars = 8192;
inline constexpr std::size_t max_signature_bytes = 256;
inline constexpr std::size_t max_box_bytes = 16384;
inline constexpr std::size_t max_layer_kinds = 32;

// A HELLO feature: the agent trains tasks with frozen layers ("frozen" in ASSIGN: successive layer
// training), sending back only the layers after them.
inline constexpr const char* k_feature_frozen_layers = "frozen_layers";
// A HELLO feature: the agent holds frozen layers encoded ("frozen_codec" f16 or q8 in ASSIGN).
inline constexpr const char* k_feature_compact_frozen = "compact_frozen_layers";

namespace msg {

struct resume_entry {
  std::uint64_t transfer = 0;
  std::uint64_t offset = 0;  // bytes of the blob the agent holds (and acknowledged)
};

struct hello {
  std::string device_id{};
  std::uint32_t version = protocol_version;
  std::uint64_t memory_budget_bytes = 0;
  std::uint64_t examples = 0;          // examples held by the device
  std::vector<codec> codecs{};           // codecs the agent can decode/encode; unknown names are skipped
  std::vector<resume_entry> resume{};    // downloads in progress, so the hub resumes them
  std::string data_digest{};             // identifies the device's data (shape and targets); optional
  std::uint64_t validation_examples = 0; // held out for evaluation; optional (0: cannot evaluate)
  // The layer kinds the agent can train (core::k_layer_names); optional. An agent that sends none
  // predates convolutional networks: it trains the `hidden` shorthand's dense layers only.
  std::vector<std::string> layer_kinds{};
  // What the agent can do beyond the protocol's version, by name (k_feature_frozen_layers); optional.
  std::vector<std::string> features{};
};

struct welcome {
  std::uint32_t heartbeat_ms = 10000;
  std::uint32_t max_frame_payload = default_max_payload;
  std::uint32_t max_chunk_bytes = 256u << 10;
};

// ASSIGN's part under secure aggregation: the protocol's parameters for the round (params.round is its
// fresh number, which the device's key signature binds), the segments this device covers, the key of
// its stochastic rounding (no secret: rounds/assignment.hpp), and its masked upload's size.
struct secure_assign {
  crypto::secagg_params params{};
  std::vector<std::uint32_t> segments{};
  std::array<std::byte, 32> rounding_key{};
  std::uint64_t upload_size = 0;
};

struct assign {
  std::uint64_t round = 0;
  std::vector<std::uint32_t> widths{};   // subnet widths per hidden layer
  std::string hyper_json = "{}";       // a JSON object, passed through untouched
  std::uint64_t transfer = 0;
  std::uint64_t size = 0;              // bytes
  codec blob_codec = codec::f32;
  digest sha256{};
  // The download is the whole model, to be scored on the device's validation split and answered with
  // EVALUATION, not trained; optional (false).
  bool evaluate = false;
  std::optional<secure_assign> secure{};  // optional: secure aggregation's part
  // An evaluation under secure aggregation: the score is a masked sum (core::score_vector), scaled by
  // these (present then only).
  std::uint64_t max_examples = 0;
  double loss_bound = 0;
};

struct ack {
  std::uint64_t transfer = 0;
  std::uint64_t offset = 0;            // all bytes before this offset are held by the receiver
};

struct update {
  std::uint64_t round = 0;
  std::uint64_t examples = 0;
  std::uint64_t steps = 0;
  // The mean training loss: null on the wire when not finite (parsed as NaN, the hub rejects it);
  // absent in a secure round, where it would be one device's figure in the clear.
  std::optional<double> loss;
  std::uint64_t transfer = 0;
  std::uint64_t size = 0;
  codec blob_codec = codec::f32;
  digest sha256{};
  std::uint64_t clipped = 0;           // plain DP rounds: 1 if the change was clipped; optional (0)
};

struct result {
  bool accepted = false;
  std::string code{};                  // why rejected, as core::error_name ("rounds.size_mismatch"); optional
  std::string reason{};
};

struct ping {
  std::uint64_t seq = 0;
};

struct pong {
  std::uint64_t seq = 0;
};

struct refuse {
  std::string reason{};
  std::string code{};                  // why, as core::error_name ("edge.labels_mismatch"); optional
  // The cause outlasts a reconnection (a revoked certificate, another device connected with the same
  // id): the peer waits its longest backoff before it tries again.
  bool lasting = false;
};
// REFUSE's code when the hub's run is over: the agent exits or waits for the next run (its after_run).
inline constexpr std::string_view k_run_finished = "run_finished";

// One pass of the feature statistics (core/data/fed_stats.hpp). Pass 1 asks for counts and sums; pass 2 for
// squared deviations about the fleet's mean, which it carries. Arrays of numbers travel as base64 of
// little-endian float64 (exact), their lengths fixed by `inputs` and `outputs`.
struct stats {
  std::uint32_t pass = 1;                // 1 or 2
  core::task_kind task = core::task_kind::classification;
  std::uint64_t inputs = 0;              // features the model takes (the device checks its data has them)
  std::uint64_t outputs = 0;             // classes (classification) or 1
  std::vector<double> mean{};            // pass 2: the fleet's mean per feature
  double target_mean = 0;                // pass 2, regression
  // Optional: secure aggregation. The pass is one masked sum (rounds/secure_sum.hpp) of the devices'
  // vectors (core/data/stats_vector.hpp) scaled by `max_examples` and `bounds` (every feature's, then
  // the target's); the reply is masked.
  std::optional<secure_assign> secure{};
  std::uint64_t max_examples = 0;
  std::vector<double> bounds{};
};

struct stats_reply {
  std::uint32_t pass = 1;
  std::uint64_t examples = 0;
  std::uint64_t features = 0;                  // length of every per-feature array
  // pass 1
  std::vector<double> sum{}, min{}, max{};
  std::vector<std::uint64_t> label_counts{};   // classification
  double target_sum = 0;
  // pass 2
  std::vector<double> sq_dev{};
  double target_sq_dev = 0;
  // Under secure aggregation the reply is only the masked vector, packed as the ring's values
  // (crypto::secagg_pack): none of the figures above.
  std::vector<std::byte> masked{};
};

// The answer to an evaluating ASSIGN: the device's validation examples, the sum over its batches of
// each batch's mean loss times its rows, and the correct predictions (classification).
struct evaluation {
  std::uint64_t round = 0;
  std::uint64_t transfer = 0;          // the ASSIGN's download it scored
  std::uint64_t examples = 0;
  double loss_sum = 0.0;               // finite, >= 0
  std::uint64_t correct = 0;           // <= examples
  // Under secure aggregation only the masked score (core::score_vector as the ring's values): none of
  // the figures above.
  std::vector<std::byte> masked{};
};

// Secure aggregation's steps (crypto/secagg.hpp); `round` is the federation's round they belong to.
struct secagg_keys {                   // agent → hub: the device's keys, signed with its certificate's key
  std::uint64_t round = 0;
  crypto::secagg_keys keys{};
};
// hub → agent: every device that advertised keys, in order. A member whose keys this device does not
// get (not its neighbour) goes by its id alone; keys travel only with their certificate (a keys object
// with an empty one is refused), so the round trip keeps every member's keys.
struct secagg_roster {
  std::uint64_t round = 0;
  crypto::secagg_roster roster{};
};
struct secagg_shares {                 // agent → hub: one box for every other member
  std::uint64_t round = 0;
  std::vector<crypto::secagg_box> boxes{};
};
struct secagg_inbox {                  // hub → agent: the boxes addressed to it
  std::uint64_t round = 0;
  std::vector<crypto::secagg_box> boxes{};
};
struct secagg_masked_with {            // agent → hub, before its masked UPDATE: whom it masked with
  std::uint64_t round = 0;
  crypto::secagg_masked_with pledge{};
};
struct secagg_check {                  // hub → agent: the survivor set to sign (the consistency check),
  std::uint64_t round = 0;             // with the pledges of the agent's surviving neighbours
  crypto::secagg_unmask_request request{};  // without signatures
};
struct secagg_check_reply {            // agent → hub: its signature over that set
  std::uint64_t round = 0;
  crypto::secagg_signature signature{};
};
struct secagg_unmask {                 // hub → agent: survivors, dropped, released segments, and at least
  std::uint64_t round = 0;             // threshold survivors' signatures over them
  crypto::secagg_unmask_request request{};
};
struct secagg_unmask_reply {           // agent → hub: the shares asked for
  std::uint64_t round = 0;
  crypto::secagg_unmask_reply reply{};
};

}  // namespace msg

using message = std::variant<msg::hello, msg::welcome, msg::assign, msg::ack, msg::update, msg::result, msg::ping,
                             msg::pong, msg::refuse, msg::stats, msg::stats_reply, msg::evaluation, msg::secagg_keys,
                             msg::secagg_roster, msg::secagg_shares, msg::secagg_inbox, msg::secagg_unmask,
                             msg::secagg_unmask_reply, msg::secagg_check, msg::secagg_check_reply, msg::secagg_masked_with>;

[[nodiscard]] frame_type type_of(const message& m) noexcept;
// The round a message names (ASSIGN, UPDATE, EVALUATION, the secure aggregation steps), or 0.
[[nodiscard]] std::uint64_t round_of(const message& m) noexcept;
// The JSON payload of a control message.
[[nodiscard]] std::string to_json(const message& m);
// What a device signs its keys of a masked sum over (secure aggregation outside a round): the SHA-256 of
// everything the hub asked — the question, the scale its vector is divided by, the protocol's part —
// but the device's own rounding key (and an evaluation's transfer number, which is the device's). Every
// device of the sum must have been asked the same, or its neighbours refuse the roster: a hub cannot
// give one device a scale that singles its figures out of the sum.
[[nodiscard]] digest sum_request_digest(const msg::stats& q);
[[nodiscard]] digest sum_request_digest(const msg::assign& a);
// Header + JSON payload, ready to write.
[[nodiscard]] std::vector<std::byte> encode_message(const message& m);
// Parses and validates the payload of a control frame of type `t` (any type but CHUNK).
[[nodiscard]] core::result<message> parse_message(frame_type t, std::span<const std::byte> payload);

}  // namespace tessera::net
