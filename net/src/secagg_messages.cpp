// The secure aggregation messages' JSON (DESIGN §3): keys, roster, shares, inbox, unmasking, and
// ASSIGN's `secure` part. Binary values travel as base64; every count and length is bounded before use.
#include <algorithm>

#include "message_reader.hpp"
#include "tessera/crypto/noise.hpp"

namespace tessera::net::detail {
namespace {

std::string b64(std::span<const std::byte> b) { return core::base64_encode(b); }

std::array<std::byte, 32> key32(reader& r, const char* key) {
  std::array<std::byte, 32> out{};
  const auto v = r.bytes(key, 32);
  if (r.failed()) return out;
  if (v.size() != out.size()) r.fail(key, "expected 32 bytes");
  else std::copy(v.begin(), v.end(), out.begin());
  return out;
}

// Calls f(reader&) for each object of an array, with a reader that names "TYPE: key[i]".
template <class F>
void each_object(reader& r, const char* key, std::size_t max_items, F&& f) {
  const json* items = r.array(key, max_items);
  if (items == nullptr) return;
  for (std::size_t i = 0; i < items->size() && !r.failed(); ++i) {
    const std::string path = std::string(key) + "[" + std::to_string(i) + "]";
    if (!(*items)[i].is_object()) {
      r.fail(path, "expected an object");
      return;
    }
    const std::string what = std::string(r.what()) + ": " + path;
    reader inner((*items)[i], what);
    f(inner);
    r.take(inner);
  }
}

// Calls f(reader&) for the object under `key`, with a reader that names "TYPE: key".
template <class F>
void nested_object(reader& r, const char* key, F&& f) {
  const json* o = r.field(key);
  if (o == nullptr) return;
  if (!o->is_object()) {
    r.fail(key, "expected an object");
    return;
  }
  const std::string what = std::string(r.what()) + ": " + key;
  reader inner(*o, what);
  f(inner);
  r.take(inner);
}

// Sorted, distinct integers below `count` (a device's segments, the released ones).
std::vector<std::uint32_t> read_indices(reader& r, const char* key, std::size_t count, bool nonempty) {
  std::vector<std::uint32_t> out;
  const json* items = r.array(key, max_secagg_segments);
  if (items == nullptr) return out;
  for (const auto& v : *items) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= count) {
      r.fail(key, "expected segment numbers below " + std::to_string(count));
      return {};
    }
    const auto x = static_cast<std::uint32_t>(v.get<std::uint64_t>());
    if (!out.empty() && x <= out.back()) {
      r.fail(key, "not sorted and distinct");
      return {};
    }
    out.push_back(x);
  }
  if (nonempty && out.empty()) r.fail(key, "empty");
  return out;
}

std::vector<std::string> read_ids(reader& r, const char* key) {
  std::vector<std::string> out;
  const json* items = r.array(key, max_secagg_members);
  if (items == nullptr) return out;
  for (const auto& v : *items) {
    if (!v.is_string() || !valid_device_id(v.get<std::string>())) {
      r.fail(key, "expected device ids");
      return {};
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// A roster member whose keys this device does not get (not its neighbour: crypto's roster_for) has none
// at all, and goes by its id alone. Keys are never without the certificate that signed them: the parser
// refuses that, so the id alone stands for exactly this, and a member with any key goes out whole.
bool without_keys(const crypto::secagg_keys& k) {
  return k.certificate_pem.empty() && k.c_pk == crypto::public_key{} && k.s_pk == crypto::public_key{} && k.model == crypto::sha256_digest{} &&
         k.signature.empty();
}

json keys_object(const crypto::secagg_keys& k) {
  return {{"id", k.id}, {"certificate", k.certificate_pem}, {"c_pk", b64(k.c_pk)}, {"s_pk", b64(k.s_pk)},
          {"model", hex_of(k.model)}, {"signature", b64(k.signature)}};
}
crypto::secagg_keys read_keys(reader& r) {
  crypto::secagg_keys k;
  k.id = r.device("id");
  k.certificate_pem = r.string("certificate", max_certificate_chars);
  if (!r.failed() && k.certificate_pem.empty()) r.fail("certificate", "empty (keys come with the certificate that signed them)");
  k.c_pk = key32(r, "c_pk");
  k.s_pk = key32(r, "s_pk");
  k.model = r.sha256("model");  // hex, as ASSIGN's sha256
  k.signature = r.bytes("signature", max_signature_bytes);
  return k;
}

json boxes_array(const std::vector<crypto::secagg_box>& boxes) {
  json a = json::array();
  for (const auto& b : boxes) a.push_back({{"from", b.from}, {"to", b.to}, {"box", b64(b.box)}});
  return a;
}
std::vector<crypto::secagg_box> read_boxes(reader& r) {
  std::vector<crypto::secagg_box> out;
  each_object(r, "boxes", max_secagg_members, [&](reader& br) {
    crypto::secagg_box b;
    b.from = br.device("from");
    b.to = br.device("to");
    b.box = br.bytes("box", max_box_bytes);
    out.push_back(std::move(b));
  });
  return out;
}

json signature_object(const crypto::secagg_signature& s) { return {{"id", s.id}, {"signature", b64(s.signature)}}; }
crypto::secagg_signature read_signature(reader& r) {
  crypto::secagg_signature s;
  s.id = r.device("id");
  s.signature = r.bytes("signature", max_signature_bytes);
  return s;
}

json masked_with_object(const crypto::secagg_masked_with& m) {
  return {{"id", m.id}, {"without", m.without}, {"signature", b64(m.signature)}};
}
crypto::secagg_masked_with read_masked_with(reader& r) {
  crypto::secagg_masked_with m;
  m.id = r.device("id");
  m.without = read_ids(r, "without");
  m.signature = r.bytes("signature", max_signature_bytes);
  return m;
}

// A JSON array of `items`, each written by `write`; and the list of objects under `key`, each read by
// `read` (at most max_secagg_members).
template <class T, class Write>
json array_of(const std::vector<T>& items, Write write) {
  json a = json::array();
  for (const auto& item : items) a.push_back(write(item));
  return a;
}
template <class Read>
auto read_list(reader& r, const char* key, Read read) {
  std::vector<decltype(read(r))> out;
  each_object(r, key, max_secagg_members, [&](reader& item) { out.push_back(read(item)); });
  return out;
}

// An unmasking request's names (its pledges travel in SECAGG_CHECK, its signatures in SECAGG_UNMASK).
json request_object(std::uint64_t round, const crypto::secagg_unmask_request& q) {
  return {{"round", round}, {"survivors", q.survivors}, {"dropped", q.dropped}, {"released", q.released}};
}
crypto::secagg_unmask_request read_request(reader& r) {
  crypto::secagg_unmask_request q;
  q.survivors = read_ids(r, "survivors");
  q.dropped = read_ids(r, "dropped");
  q.released = read_indices(r, "released", max_secagg_segments, /*nonempty=*/false);
  return q;
}

json shares_array(const std::vector<crypto::secagg_share>& shares) {
  json a = json::array();
  for (const auto& s : shares) {
    json y = json::array();
    for (const std::uint64_t v : s.share.y) y.push_back(v);
    a.push_back({{"owner", s.owner}, {"segment", s.segment}, {"x", s.share.x}, {"y", std::move(y)}});
  }
  return a;
}
std::vector<crypto::secagg_share> read_shares(reader& r, const char* key, std::size_t max_items) {
  std::vector<crypto::secagg_share> out;
  each_object(r, key, max_items, [&](reader& sr) {
    crypto::secagg_share s;
    s.owner = sr.device("owner");
    s.segment = sr.u32("segment", 0, max_secagg_segments - 1);
    s.share.x = sr.u32("x", 1, crypto::shamir_max_shares);
    if (const json* y = sr.array("y", crypto::shamir_chunks)) {
      if (y->size() != crypto::shamir_chunks) sr.fail("y", "expected " + std::to_string(crypto::shamir_chunks) + " values");
      for (std::size_t i = 0; i < y->size() && !sr.failed(); ++i) {
        if (!(*y)[i].is_number_unsigned() || (*y)[i].get<std::uint64_t>() >= crypto::gf61_prime) sr.fail("y", "expected values below 2^61 - 1");
        else s.share.y[i] = (*y)[i].get<std::uint64_t>();
      }
    }
    out.push_back(std::move(s));
  });
  return out;
}

}  // namespace

json secure_assign_object(const msg::secure_assign& s) {
  json segments = json::array();
  for (const auto& g : s.params.segments) segments.push_back({{"length", g.length}, {"min_aggregate", g.min_aggregate}});
  json j = {{"protocol_round", s.params.round}, {"bits", s.params.bits}, {"clip", s.params.clip},
          {"threshold", s.params.threshold}, {"neighbors", s.params.neighbors}, {"segments", segments}, {"covers", s.segments},
          {"rounding_key", b64(s.rounding_key)}, {"upload_size", s.upload_size}};
  if (s.params.summands > 0) j["summands"] = s.params.summands;
  if (s.params.noise > 0) j["noise"] = s.params.noise;
  if (s.params.fitted_value > 0) j["fitted_value"] = s.params.fitted_value;
  if (s.params.sample_rate > 0) j["sample_rate"] = s.params.sample_rate;
  if (s.params.noise_contributors > 0) j["noise_contributors"] = s.params.noise_contributors;
  return j;
}

void read_secure_assign(reader& r, msg::secure_assign& s) {
  nested_object(r, "secure", [&](reader& sr) {
    s.params.round = sr.u64("protocol_round");
    s.params.bits = static_cast<int>(sr.u32("bits", 16, 64));
    s.params.clip = sr.finite("clip");
    if (!sr.failed() && !(s.params.clip > 0)) sr.fail("clip", "must be positive");
    s.params.threshold = sr.u32("threshold", 2, static_cast<std::uint32_t>(max_secagg_members));
    s.params.neighbors = sr.u32("neighbors", 0, static_cast<std::uint32_t>(max_secagg_members));
    if (!sr.failed() && s.params.neighbors == 1) sr.fail("neighbors", "must be 0 (everyone) or at least 2");
    each_object(sr, "segments", max_secagg_segments, [&](reader& gr) {
      crypto::secagg_segment g;
      g.length = gr.u64("length", std::uint64_t{1} << 32);
      if (!gr.failed() && g.length < 2) gr.fail("length", "under the minimum of 2");
      g.min_aggregate = gr.u32("min_aggregate", 2, static_cast<std::uint32_t>(max_secagg_members));
      s.params.segments.push_back(g);
    });
    s.segments = read_indices(sr, "covers", s.params.segments.size(), /*nonempty=*/true);
    // Differential privacy: the ring's scale, fixed before the roster, and each device's share of the noise.
    if (sr.has("summands")) s.params.summands = sr.u64("summands", std::uint64_t{1} << 48);
    if (sr.has("noise")) {
      s.params.noise = sr.finite("noise");
      if (!sr.failed() && !(s.params.noise > 0 && s.params.noise <= crypto::k_max_skellam_variance))
        sr.fail("noise", "a variance outside (0, 2^50] ring steps²");
    }
    if (sr.has("fitted_value")) {  // adaptive clipping: ± this in the last segment's weight value
      s.params.fitted_value = sr.finite("fitted_value");
      if (!sr.failed() && !(s.params.fitted_value > 0 && s.params.fitted_value <= s.params.clip))
        sr.fail("fitted_value", "outside (0, clip]");
    }
    if (sr.has("sample_rate")) {  // the devices sample themselves
      s.params.sample_rate = sr.finite("sample_rate");
      if (!sr.failed() && !(s.params.sample_rate > 0 && s.params.sample_rate <= 1)) sr.fail("sample_rate", "outside (0, 1]");
      if (!sr.failed() && !(s.params.noise > 0)) sr.fail("sample_rate", "without noise: sampling protects nothing the noise does not");
    }
    if (sr.has("noise_contributors")) {  // the survivors the noise shares are sized for
      s.params.noise_contributors = sr.u32("noise_contributors", 2, static_cast<std::uint32_t>(max_secagg_members));
      if (!sr.failed() && !(s.params.noise > 0)) sr.fail("noise_contributors", "without noise");
    }
    s.rounding_key = key32(sr, "rounding_key");
    s.upload_size = sr.u64("upload_size");
    if (sr.failed()) return;
    std::uint64_t values = 0;
    for (auto seg : s.segments) values += s.params.segments[seg].length;
    if (s.upload_size != values * crypto::secagg_value_bytes(s.params.bits))
      sr.fail("upload_size", "is not the covered segments' " + std::to_string(values) + " values");
  });
}

json secagg_to_object(const message& m) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, msg::secagg_keys>) {
          return {{"round", v.round}, {"keys", keys_object(v.keys)}};
        } else if constexpr (std::is_same_v<T, msg::secagg_roster>) {
          json members = json::array();
          for (const auto& member : v.roster) {
            if (without_keys(member.keys)) members.push_back({{"id", member.keys.id}, {"segments", member.segments}});
            else members.push_back({{"keys", keys_object(member.keys)}, {"segments", member.segments}});
          }
          return {{"round", v.round}, {"members", members}};
        } else if constexpr (std::is_same_v<T, msg::secagg_shares> || std::is_same_v<T, msg::secagg_inbox>) {
          return {{"round", v.round}, {"boxes", boxes_array(v.boxes)}};
        } else if constexpr (std::is_same_v<T, msg::secagg_check>) {
          json j = request_object(v.round, v.request);
          j["partners"] = array_of(v.request.partners, masked_with_object);
          return j;
        } else if constexpr (std::is_same_v<T, msg::secagg_masked_with>) {
          return {{"round", v.round}, {"pledge", masked_with_object(v.pledge)}};
        } else if constexpr (std::is_same_v<T, msg::secagg_check_reply>) {
          return {{"round", v.round}, {"signature", signature_object(v.signature)}};
        } else if constexpr (std::is_same_v<T, msg::secagg_unmask>) {
          json j = request_object(v.round, v.request);
          j["signatures"] = array_of(v.request.signatures, signature_object);
          return j;
        } else if constexpr (std::is_same_v<T, msg::secagg_unmask_reply>) {
          return {{"round", v.round}, {"id", v.reply.id}, {"seeds", shares_array(v.reply.seeds)}, {"keys", shares_array(v.reply.keys)}};
        } else {
          TESSERA_ASSERT(false);  // not a secure aggregation message
          return json::object();
        }
      },
      m);
}

message parse_secagg(frame_type t, reader& r) {
  const std::uint64_t round = r.u64("round");
  switch (t) {
    case frame_type::secagg_keys: {
      msg::secagg_keys k{.round = round, .keys = {}};
      nested_object(r, "keys", [&](reader& kr) { k.keys = read_keys(kr); });
      return k;
    }
    case frame_type::secagg_roster: {
      msg::secagg_roster ro{.round = round, .roster = {}};
      each_object(r, "members", max_secagg_members, [&](reader& mr) {
        crypto::secagg_member m;
        if (mr.has("keys")) nested_object(mr, "keys", [&](reader& kr) { m.keys = read_keys(kr); });
        else m.keys.id = mr.device("id");
        m.segments = read_indices(mr, "segments", max_secagg_segments, /*nonempty=*/true);
        ro.roster.push_back(std::move(m));
      });
      return ro;
    }
    case frame_type::secagg_shares: return msg::secagg_shares{.round = round, .boxes = read_boxes(r)};
    case frame_type::secagg_inbox: return msg::secagg_inbox{.round = round, .boxes = read_boxes(r)};
    case frame_type::secagg_check: {
      msg::secagg_check c{.round = round, .request = read_request(r)};
      c.request.partners = read_list(r, "partners", read_masked_with);
      return c;
    }
    case frame_type::secagg_masked_with: {
      msg::secagg_masked_with m{.round = round, .pledge = {}};
      nested_object(r, "pledge", [&](reader& pr) { m.pledge = read_masked_with(pr); });
      return m;
    }
    case frame_type::secagg_check_reply: {
      msg::secagg_check_reply c{.round = round, .signature = {}};
      nested_object(r, "signature", [&](reader& sr) { c.signature = read_signature(sr); });
      return c;
    }
    case frame_type::secagg_unmask: {
      msg::secagg_unmask u{.round = round, .request = read_request(r)};
      u.request.signatures = read_list(r, "signatures", read_signature);
      return u;
    }
    case frame_type::secagg_unmask_reply: {
      msg::secagg_unmask_reply u{.round = round, .reply = {}};
      u.reply.id = r.device("id");
      u.reply.seeds = read_shares(r, "seeds", max_secagg_members * 4);
      u.reply.keys = read_shares(r, "keys", max_secagg_members);
      return u;
    }
    default: TESSERA_ASSERT(false); return msg::ping{};
  }
}

}  // namespace tessera::net::detail
