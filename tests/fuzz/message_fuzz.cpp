// libFuzzer target for the control-message decoder (tessera/net/messages.hpp), structure-aware: the
// first input byte names the frame type (1..19 as themselves, what the seeds use; any other value folded
// into that range, CHUNK included), the rest is the JSON payload handed to net::parse_message.
//
// Oracles, besides "no crash, no undefined behaviour, no leak, no allocation beyond the limits run-fuzz
// sets":
//   - a refusal is typed (tessera.net's bad_json or bad_field; for CHUNK also unknown_type), with a message
//     that names the message type first ("ASSIGN: field 'sha256': ...");
//   - whatever parses has the type asked for, and encode∘parse is idempotent on the encoder's output:
//     encode_message(m) is a frame of that type whose payload is to_json(m), and it parses to a message
//     that encodes to the identical bytes;
//   - what a parsed message promises holds: sizes of the statistics' arrays, valid device ids, a roster
//     member's keys either whole with their certificate or absent (its id alone);
//   - nothing is lost on the way out: parse → encode → parse gives the same secure aggregation keys,
//     SECAGG_KEYS' and every roster member's (id, certificate, both public keys, signature, segments);
//   - the checks behind the parser agree with it: an ASSIGN's task (net::task_from_assign) is accepted
//     or refused as bad_field naming ASSIGN, and an accepted task survives task_to_json → task_from_assign
//     unchanged; an ASSIGN's `secure` part is accepted by secure aggregation's own parameter and segment
//     checks (crypto::secagg_plain_sum::add), and when its ring exists (crypto::fixed_point) the covered
//     segments encode to exactly `upload_size` bytes that unpack to the same values.
//
// Built and run by tests/fuzz/run-fuzz (clang++ -fsanitize=fuzzer,address,undefined).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/task.hpp"

namespace core = tessera::core;
namespace crypto = tessera::crypto;
namespace net = tessera::net;

namespace {

// Secure parts covering more values than this are checked but not encoded (the encoding is linear in
// them; a few thousand reach every branch of it).
constexpr std::uint64_t max_encoded_values = 4096;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

net::frame_type type_of_byte(std::uint8_t b) {
  return static_cast<net::frame_type>(1 + (b + net::max_frame_type - 1) % net::max_frame_type);
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void check_refusal(net::frame_type t, const core::error& e) {
  check(e.code.category() == net::category_of(net::errc::bad_json));
  // CHUNK's payload is refused as a control message once it is a JSON object (before: as any other).
  check(e.code == net::errc::bad_json || e.code == net::errc::bad_field ||
        (t == net::frame_type::chunk && e.code == net::errc::unknown_type));
  check(!e.message.empty() && e.message.starts_with(net::to_string(t)));
}

// The task an ASSIGN carries in its hyper-parameters.
void check_task(const net::msg::assign& a) {
  auto task = net::task_from_assign(a);
  if (!task) {
    check(task.error().code == net::errc::bad_field && task.error().message.starts_with("ASSIGN: field '"));
    return;
  }
  const core::training_task& t = task.value();
  check(net::hidden_widths(t.arch) == a.widths);
  check(t.steps >= 1 && t.steps <= net::max_task_steps && t.batch >= 1 && t.batch <= net::max_task_batch);
  net::msg::assign again = a;
  again.hyper_json = net::task_to_json(t);
  auto back = net::task_from_assign(again);
  check(back.ok());
  check(net::task_to_json(back.value()) == again.hyper_json);
}

// ASSIGN's secure part against secure aggregation's own checks.
void check_secure(const net::msg::secure_assign& s) {
  const crypto::secagg_params& p = s.params;
  std::uint64_t values = 0;
  for (const auto seg : s.segments) {
    check(seg < p.segments.size());
    values += p.segments[seg].length;
  }
  check(s.upload_size == values * crypto::secagg_value_bytes(p.bits));

  // The ring for the fewest devices the protocol allows; refusing it is the crypto module's call, typed.
  const std::size_t summands = p.threshold;
  auto ring = crypto::fixed_point::create(p.clip, p.bits, crypto::secagg_summands(p, summands));
  if (!ring) {
    check(ring.error().code == crypto::errc::invalid_argument && !ring.error().message.empty());
    return;
  }
  if (values > max_encoded_values) return;
  std::vector<std::vector<float>> input;
  for (const auto seg : s.segments) {
    auto& v = input.emplace_back(p.segments[seg].length);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p.clip * (static_cast<double>(i % 5) - 2.0) / 2.0);
  }
  const crypto::key256 noise_key{std::byte{7}};
  auto encoded = crypto::secagg_encode(p, summands, s.segments, input, s.rounding_key, &noise_key);
  check(encoded.ok());
  check(encoded.value().y.size() == values);
  // What the hub adds it into checks the parameters and the segments again: the parser let nothing
  // through that they refuse.
  crypto::secagg_plain_sum sum(p, summands);
  check(sum.add(s.segments, encoded.value()).ok());
  std::vector<std::byte> upload(static_cast<std::size_t>(s.upload_size));
  crypto::secagg_pack(encoded.value().y, p.bits, upload);
  auto unpacked = crypto::secagg_unpack(upload, p.bits);
  check(unpacked.ok() && unpacked.value() == encoded.value().y);
}

// What each kind of message promises once parsed.
void check_parsed(const net::message& m) {
  if (const auto* h = std::get_if<net::msg::hello>(&m)) {
    check(net::valid_device_id(h->device_id) && h->version >= 1 && h->resume.size() <= net::max_resume_entries);
  } else if (const auto* a = std::get_if<net::msg::assign>(&m)) {
    check(a->widths.size() <= net::max_widths);
    check_task(*a);
    if (a->secure) check_secure(*a->secure);
  } else if (const auto* s = std::get_if<net::msg::stats>(&m)) {
    check(s->pass == 1 || s->mean.size() == s->inputs);
  } else if (const auto* r = std::get_if<net::msg::stats_reply>(&m)) {
    if (r->pass == 1) check(r->sum.size() == r->features && r->min.size() == r->features && r->max.size() == r->features);
    else check(r->sq_dev.size() == r->features);
  } else if (const auto* e = std::get_if<net::msg::evaluation>(&m)) {
    check(e->correct <= e->examples && e->loss_sum >= 0);
  } else if (const auto* k = std::get_if<net::msg::secagg_keys>(&m)) {
    check(net::valid_device_id(k->keys.id) && !k->keys.certificate_pem.empty());
  } else if (const auto* ro = std::get_if<net::msg::secagg_roster>(&m)) {
    for (const auto& member : ro->roster) {
      const crypto::secagg_keys& k = member.keys;
      check(net::valid_device_id(k.id));
      check(!k.certificate_pem.empty() ||
            (k.c_pk == crypto::public_key{} && k.s_pk == crypto::public_key{} && k.signature.empty()));
    }
  }
}

bool same_keys(const crypto::secagg_keys& a, const crypto::secagg_keys& b) {
  return a.id == b.id && a.certificate_pem == b.certificate_pem && a.c_pk == b.c_pk && a.s_pk == b.s_pk && a.signature == b.signature;
}

// Secure aggregation's keys survive parse → encode → parse: the idempotence below cannot see a field
// the first encoding dropped.
void check_keys_kept(const net::message& first, const net::message& again) {
  if (const auto* k = std::get_if<net::msg::secagg_keys>(&first)) {
    check(same_keys(k->keys, std::get<net::msg::secagg_keys>(again).keys));
  } else if (const auto* ro = std::get_if<net::msg::secagg_roster>(&first)) {
    const crypto::secagg_roster& back = std::get<net::msg::secagg_roster>(again).roster;
    check(back.size() == ro->roster.size());
    for (std::size_t i = 0; i < back.size(); ++i)
      check(same_keys(back[i].keys, ro->roster[i].keys) && back[i].segments == ro->roster[i].segments);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const net::frame_type t = type_of_byte(data[0]);
  const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data) + 1, size - 1);

  auto parsed = net::parse_message(t, payload);
  if (!parsed) {
    check_refusal(t, parsed.error());
    return 0;
  }
  const net::message& m = parsed.value();
  check(net::type_of(m) == t);
  check_parsed(m);

  // encode∘parse is idempotent on the encoder's output.
  const std::vector<std::byte> first = net::encode_message(m);
  auto frame = net::decode_frame(first, net::hard_max_payload);
  check(frame.ok());
  check(frame.value().header.type == t && frame.value().frame_bytes == first.size());
  const std::string json = net::to_json(m);
  check(same_bytes(frame.value().payload, std::as_bytes(std::span(json.data(), json.size()))));
  auto again = net::parse_message(t, frame.value().payload);
  check(again.ok());
  check(net::round_of(again.value()) == net::round_of(m));
  check_parsed(again.value());
  check_keys_kept(m, again.value());
  check(net::encode_message(again.value()) == first);
  return 0;
}
