#include "tessera/net/messages.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "message_reader.hpp"
#include "tessera/core/config/base64.hpp"
#include "tessera/crypto/digest.hpp"

namespace tessera::net {
namespace {

using detail::json;
using detail::reader;
using detail::hex_of;
using detail::depth_ok;

// One writer and one reader per control message; the secure-aggregation ones live in
// secagg_messages.cpp. Readers read fields in a fixed order, so the first error named is stable.
json fields(const msg::hello& v) {
  json codecs = json::array();
  for (codec c : v.codecs) codecs.push_back(std::string(core::to_string(c)));
  json resume = json::array();
  for (const auto& r : v.resume) resume.push_back({{"transfer", r.transfer}, {"offset", r.offset}});
  json j = {{"device_id", v.device_id}, {"version", v.version}, {"memory_budget_bytes", v.memory_budget_bytes},
            {"examples", v.examples}, {"codecs", codecs}, {"resume", resume}};
  if (!v.data_digest.empty()) j["data_digest"] = v.data_digest;
  if (v.validation_examples > 0) j["validation_examples"] = v.validation_examples;
  if (!v.layer_kinds.empty()) j["layer_kinds"] = v.layer_kinds;
  if (!v.features.empty()) j["features"] = v.features;
  return j;
}

void read_fields(reader& r, msg::hello& h) {
  h.device_id = r.string("device_id", 64);
  if (!r.failed() && !valid_device_id(h.device_id)) r.fail("device_id", "must match [A-Za-z0-9._-]{1,64}");
  h.version = r.u32("version", 1, UINT32_MAX);
  h.memory_budget_bytes = r.u64("memory_budget_bytes");
  h.examples = r.u64("examples");
  if (const json* cs = r.array("codecs", 8)) {
    for (const auto& c : *cs) {
      if (!c.is_string()) {
        r.fail("codecs", "expected strings");
        break;
      }
      if (auto k = core::k_codec_names.find(c.get<std::string>())) h.codecs.push_back(*k);
    }
  }
  if (const json* rs = r.array("resume", max_resume_entries)) {
    for (std::size_t i = 0; i < rs->size() && !r.failed(); ++i) {
      const json& e = (*rs)[i];
      const std::string key = "resume[" + std::to_string(i) + "]";
      if (!e.is_object()) {
        r.fail(key, "expected an object");
        break;
      }
      reader er(e, r.what());
      msg::resume_entry entry{er.u64("transfer"), er.u64("offset")};
      if (er.failed()) r.fail(key, er.error().message);
      h.resume.push_back(entry);
    }
  }
  if (r.has("data_digest")) h.data_digest = r.string("data_digest", max_code_chars);
  if (r.has("validation_examples")) h.validation_examples = r.u64("validation_examples");
  if (const json* kinds = r.has("layer_kinds") ? r.array("layer_kinds", max_layer_kinds) : nullptr) {
    for (const auto& k : *kinds) {  // names this side does not know are kept: the hub compares names
      if (!k.is_string() || k.get_ref<const std::string&>().size() > max_code_chars) {
        r.fail("layer_kinds", "expected names of at most " + std::to_string(max_code_chars) + " characters");
        break;
      }
      h.layer_kinds.push_back(k.get<std::string>());
    }
  }
  if (const json* fs = r.has("features") ? r.array("features", max_layer_kinds) : nullptr) {
    for (const auto& f : *fs) {  // names this side does not know are kept: the hub looks for the ones it needs
      if (!f.is_string() || f.get_ref<const std::string&>().size() > max_code_chars) {
        r.fail("features", "expected names of at most " + std::to_string(max_code_chars) + " characters");
        break;
      }
      h.features.push_back(f.get<std::string>());
    }
  }
}

json fields(const msg::welcome& v) {
  return {{"heartbeat_ms", v.heartbeat_ms}, {"max_frame_payload", v.max_frame_payload},
          {"max_chunk_bytes", v.max_chunk_bytes}};
}

void read_fields(reader& r, msg::welcome& w) {
  w.heartbeat_ms = r.u32("heartbeat_ms", 1, 3'600'000);
  w.max_frame_payload = r.u32("max_frame_payload", 1024, hard_max_payload);
  w.max_chunk_bytes = r.u32("max_chunk_bytes", 1, hard_max_payload);
}

json fields(const msg::assign& v) {
  json hyper = json::parse(v.hyper_json, nullptr, false);
  // Our own caller passed hyper-parameters that are not a JSON object: a bug, not input.
  TESSERA_ASSERT(hyper.is_object());
  json j = {{"round", v.round}, {"widths", v.widths}, {"hyper", hyper},
            {"transfer", v.transfer}, {"size", v.size}, {"codec", std::string(core::to_string(v.blob_codec))},
            {"sha256", hex_of(v.sha256)}};
  if (v.evaluate) j["evaluate"] = true;
  if (v.secure) j["secure"] = detail::secure_assign_object(*v.secure);
  if (v.evaluate && v.secure) {
    j["max_examples"] = v.max_examples;
    j["loss_bound"] = v.loss_bound;
  }
  return j;
}

void read_fields(reader& r, msg::assign& a) {
  a.round = r.u64("round");
  if (const json* ws = r.array("widths", max_widths)) {
    for (const auto& w : *ws) {
      if (!w.is_number_unsigned() || w.get<std::uint64_t>() < 1 || w.get<std::uint64_t>() > (1u << 24)) {
        r.fail("widths", "expected integers in 1..16777216");
        break;
      }
      a.widths.push_back(w.get<std::uint32_t>());
    }
  }
  if (const json* hp = r.field("hyper")) {
    if (!hp->is_object()) r.fail("hyper", "expected an object");
    else a.hyper_json = hp->dump();
  }
  a.transfer = r.u64("transfer");
  a.size = r.u64("size");
  a.blob_codec = r.blob_codec("codec");
  a.sha256 = r.sha256("sha256");
  if (r.has("evaluate")) a.evaluate = r.boolean("evaluate");
  if (r.has("secure")) detail::read_secure_assign(r, a.secure.emplace());
  if (!r.failed() && a.evaluate && a.secure) {  // the masked score's scale
    a.max_examples = r.u64("max_examples", std::uint64_t{1} << 24);
    a.loss_bound = r.finite("loss_bound");
    if (!r.failed() && !(a.loss_bound > 0)) r.fail("loss_bound", "must be positive");
  }
}

json fields(const msg::ack& v) { return {{"transfer", v.transfer}, {"offset", v.offset}}; }

void read_fields(reader& r, msg::ack& a) {
  a.transfer = r.u64("transfer");
  a.offset = r.u64("offset");
}

json fields(const msg::update& v) {
  json j = {{"round", v.round}, {"examples", v.examples}, {"steps", v.steps},
            {"transfer", v.transfer}, {"size", v.size}, {"codec", std::string(core::to_string(v.blob_codec))},
            {"sha256", hex_of(v.sha256)}};
  if (v.loss) j["loss"] = *v.loss;
  if (v.clipped > 0) j["clipped"] = v.clipped;
  return j;
}

void read_fields(reader& r, msg::update& u) {
  u.round = r.u64("round");
  u.examples = r.u64("examples");
  u.steps = r.u64("steps");
  if (r.has("loss")) u.loss = r.number_or_null("loss");  // not finite: the hub rejects the update with its reason, keeping the link
  u.transfer = r.u64("transfer");
  u.size = r.u64("size");
  u.blob_codec = r.blob_codec("codec");
  u.sha256 = r.sha256("sha256");
  if (r.has("clipped")) u.clipped = r.u64("clipped");
}

json fields(const msg::result& v) {
  json j = {{"accepted", v.accepted}, {"reason", v.reason}};
  if (!v.code.empty()) j["code"] = v.code;
  return j;
}

void read_fields(reader& r, msg::result& v) {
  v.accepted = r.boolean("accepted");
  if (r.has("code")) v.code = r.string("code", max_code_chars);  // absent from older hubs
  v.reason = r.string("reason", max_reason_chars);
}

json fields(const msg::ping& v) { return {{"seq", v.seq}}; }
json fields(const msg::pong& v) { return {{"seq", v.seq}}; }
void read_fields(reader& r, msg::ping& v) { v.seq = r.u64("seq"); }
void read_fields(reader& r, msg::pong& v) { v.seq = r.u64("seq"); }

json fields(const msg::refuse& v) {
  json j = {{"reason", v.reason}};
  if (!v.code.empty()) j["code"] = v.code;
  if (v.lasting) j["lasting"] = true;
  return j;
}

void read_fields(reader& r, msg::refuse& v) {
  v.reason = r.string("reason", max_reason_chars);
  if (r.has("code")) v.code = r.string("code", max_code_chars);  // absent from older peers
  if (r.has("lasting")) v.lasting = r.boolean("lasting");
}

json fields(const msg::stats& v) {
  json j = {{"pass", v.pass}, {"task", std::string(core::k_task_names.name(v.task))},
            {"inputs", v.inputs}, {"outputs", v.outputs}};
  if (v.pass == 2) {
    j["mean"] = core::encode_doubles(v.mean);
    j["target_mean"] = v.target_mean;
  }
  if (v.secure) {
    j["secure"] = detail::secure_assign_object(*v.secure);
    j["max_examples"] = v.max_examples;
    j["bounds"] = core::encode_doubles(v.bounds);
  }
  return j;
}

void read_fields(reader& r, msg::stats& s) {
  s.pass = r.u32("pass", 1, 2);
  s.task = r.task("task");
  s.inputs = r.u64("inputs", max_stats_features);
  s.outputs = r.u64("outputs", max_stats_classes);
  if (!r.failed() && (s.inputs < 1 || s.outputs < 1)) r.fail(s.inputs < 1 ? "inputs" : "outputs", "must be at least 1");
  if (!r.failed() && s.pass == 2) {
    s.mean = r.doubles("mean", s.inputs);
    s.target_mean = r.finite("target_mean");
  }
  if (!r.failed() && r.has("secure")) {
    detail::read_secure_assign(r, s.secure.emplace());
    s.max_examples = r.u64("max_examples", std::uint64_t{1} << 24);
    s.bounds = r.doubles("bounds", s.inputs + 1);  // every feature's, then the target's
    if (!r.failed() && !std::all_of(s.bounds.begin(), s.bounds.end(), [](double b) { return std::isfinite(b) && b > 0; }))
      r.fail("bounds", "must be positive and finite");
  }
}

json fields(const msg::stats_reply& v) {
  if (!v.masked.empty()) return {{"pass", v.pass}, {"masked", core::base64_encode(v.masked)}};
  json j = {{"pass", v.pass}, {"examples", v.examples}, {"features", v.features}};
  if (v.pass == 1) {
    j["sum"] = core::encode_doubles(v.sum);
    j["min"] = core::encode_doubles(v.min);
    j["max"] = core::encode_doubles(v.max);
    j["label_counts"] = v.label_counts;
    j["target_sum"] = v.target_sum;
  } else {
    j["sq_dev"] = core::encode_doubles(v.sq_dev);
    j["target_sq_dev"] = v.target_sq_dev;
  }
  return j;
}

void read_fields(reader& r, msg::stats_reply& s) {
  s.pass = r.u32("pass", 1, 2);
  if (r.has("masked")) {  // one 8-byte ring value per figure: the count, the features, the classes
    s.masked = r.bytes("masked", 8 * (1 + max_stats_features + max_stats_classes));
    if (!r.failed() && s.masked.empty()) r.fail("masked", "empty");
    return;
  }
  s.examples = r.u64("examples", std::uint64_t{1} << 53);
  s.features = r.u64("features", max_stats_features);
  if (r.failed()) return;
  if (s.pass == 2) {
    s.sq_dev = r.doubles("sq_dev", s.features);
    s.target_sq_dev = r.finite("target_sq_dev");
    return;
  }
  s.sum = r.doubles("sum", s.features);
  s.min = r.doubles("min", s.features);
  s.max = r.doubles("max", s.features);
  if (const json* counts = r.array("label_counts", max_stats_classes)) {
    for (const auto& c : *counts) {
      if (!c.is_number_unsigned()) {
        r.fail("label_counts", "expected non-negative integers");
        break;
      }
      s.label_counts.push_back(c.get<std::uint64_t>());
    }
  }
  s.target_sum = r.finite("target_sum");
}

json fields(const msg::evaluation& v) {
  if (!v.masked.empty()) return {{"round", v.round}, {"transfer", v.transfer}, {"masked", core::base64_encode(v.masked)}};
  return {{"round", v.round}, {"transfer", v.transfer}, {"examples", v.examples}, {"loss_sum", v.loss_sum},
          {"correct", v.correct}};
}

void read_fields(reader& r, msg::evaluation& e) {
  e.round = r.u64("round");
  e.transfer = r.u64("transfer");
  if (r.has("masked")) {  // the score's three ring values, 8 bytes each
    e.masked = r.bytes("masked", 3 * 8);
    if (!r.failed() && e.masked.size() != 3 * 8) r.fail("masked", "not three 64-bit ring values");
    return;
  }
  e.examples = r.u64("examples", std::uint64_t{1} << 53);
  e.loss_sum = r.finite("loss_sum");
  e.correct = r.u64("correct", e.examples);
  if (!r.failed() && e.loss_sum < 0) r.fail("loss_sum", "negative");
}

json to_object(const message& m) {
  return std::visit(
      [](const auto& v) -> json {
        if constexpr (requires { fields(v); }) return fields(v);
        else return detail::secagg_to_object(v);
      },
      m);
}

// The empty message a control frame of type `t` carries (the variant's order is type_of's table).
template <std::size_t I = 0>
message message_of(frame_type t) {
  if constexpr (I + 1 == std::variant_size_v<message>) {
    return message{std::in_place_index<I>};
  } else {
    message m{std::in_place_index<I>};
    return type_of(m) == t ? m : message_of<I + 1>(t);
  }
}

core::result<message> parse_object(frame_type t, const json& j) {
  if (t == frame_type::chunk) return make_error(errc::unknown_type, "CHUNK is not a control message");
  reader r(j, to_string(t));
  message out = t >= frame_type::secagg_keys ? detail::parse_secagg(t, r) : message_of(t);
  std::visit(
      [&r](auto& v) {
        if constexpr (requires { read_fields(r, v); }) read_fields(r, v);
      },
      out);
  if (r.failed()) return r.error();
  return out;
}

}  // namespace

bool valid_device_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
  });
}

frame_type type_of(const message& m) noexcept {
  static constexpr frame_type types[] = {frame_type::hello, frame_type::welcome, frame_type::assign,
                                         frame_type::ack,   frame_type::update,  frame_type::result,
                                         frame_type::ping,  frame_type::pong,    frame_type::refuse,
                                         frame_type::stats, frame_type::stats_reply, frame_type::evaluation,
                                         frame_type::secagg_keys, frame_type::secagg_roster, frame_type::secagg_shares,
                                         frame_type::secagg_inbox, frame_type::secagg_unmask, frame_type::secagg_unmask_reply,
                                         frame_type::secagg_check, frame_type::secagg_check_reply, frame_type::secagg_masked_with};
  static_assert(std::size(types) == std::variant_size_v<message>);
  return types[m.index()];
}

std::uint64_t round_of(const message& m) noexcept {
  return std::visit(
      [](const auto& v) -> std::uint64_t {
        if constexpr (requires { v.round; }) return v.round;
        else return 0;
      },
      m);
}

std::string to_json(const message& m) { return to_object(m).dump(); }

digest sum_request_digest(const msg::stats& q) {
  msg::stats asked = q;
  if (asked.secure) asked.secure->rounding_key = {};
  const std::string text = to_json(asked);
  return crypto::sha256_of(std::as_bytes(std::span(text)));
}

digest sum_request_digest(const msg::assign& a) {
  msg::assign asked = a;
  asked.transfer = 0;
  if (asked.secure) asked.secure->rounding_key = {};
  const std::string text = to_json(asked);
  return crypto::sha256_of(std::as_bytes(std::span(text)));
}

std::vector<std::byte> encode_message(const message& m) {
  const std::string text = to_json(m);
  return encode_frame(type_of(m), std::as_bytes(std::span(text.data(), text.size())));
}

core::result<message> parse_message(frame_type t, std::span<const std::byte> payload) {
  const std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
  const std::string what(to_string(t));
  if (!depth_ok(text)) return make_error(errc::bad_json, what + ": JSON nested deeper than 16 levels");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(errc::bad_json, what + ": payload is not valid JSON");
  if (!j.is_object()) return make_error(errc::bad_json, what + ": payload is not a JSON object");
  return parse_object(t, j);
}

}  // namespace tessera::net
