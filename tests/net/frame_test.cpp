// The codec alone: layouts, round trips, and a named test for every way a message must be refused. The
// ways a frame must be refused are the table in frame_reader_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/config/base64.hpp"
#include "frame_bytes.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/messages.hpp"

namespace net = tessera::net;
using tessera::test::bytes_of;

namespace {

std::vector<std::byte> frame_with_json(net::frame_type t, const std::string& json) {
  return net::encode_frame(t, bytes_of(json));
}

std::error_code decode_error(std::span<const std::byte> bytes) {
  auto f = net::decode_frame(bytes, net::default_max_payload);
  if (!f) return f.error().code;
  if (f.value().header.type == net::frame_type::chunk) return {};
  auto m = net::parse_message(f.value().header.type, f.value().payload);
  return m ? std::error_code{} : m.error().code;
}

std::string decode_message_text(std::span<const std::byte> bytes) {
  auto f = net::decode_frame(bytes, net::default_max_payload);
  if (!f) return f.error().message;
  auto m = net::parse_message(f.value().header.type, f.value().payload);
  return m ? std::string() : m.error().message;
}

net::message round_trip(const net::message& m) {
  const auto frame = net::encode_message(m);
  auto f = net::decode_frame(frame, net::default_max_payload);
  REQUIRE(f);
  CHECK(f.value().frame_bytes == frame.size());
  CHECK(f.value().header.type == net::type_of(m));
  auto back = net::parse_message(f.value().header.type, f.value().payload);
  REQUIRE(back);
  return back.value();
}

net::digest some_digest() {
  net::digest d{};
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return d;
}

}  // namespace

TEST_CASE("frame header layout is the documented little-endian one") {
  std::array<std::byte, net::header_bytes> h{};
  net::encode_header({net::frame_type::assign, 0, 0x01020304}, h);
  const unsigned char expect[12] = {'T', 'S', 'R', 'A', 2, 3, 0, 0, 0x04, 0x03, 0x02, 0x01};  // version 2
  CHECK(std::memcmp(h.data(), expect, 12) == 0);
  std::array<std::byte, net::chunk_header_bytes> c{};
  net::encode_chunk_header({0x1122334455667788ull, 0x0102ull}, c);
  CHECK(std::to_integer<int>(c[0]) == 0x88);
  CHECK(std::to_integer<int>(c[7]) == 0x11);
  CHECK(std::to_integer<int>(c[8]) == 0x02);
  CHECK(std::to_integer<int>(c[9]) == 0x01);
}

TEST_CASE("every control message round-trips through its frame") {
  net::msg::hello h{.device_id = "pi-07", .version = 1, .memory_budget_bytes = 64u << 20, .examples = 6000,
                    .codecs = {net::codec::f32, net::codec::q8}, .resume = {{7, 1024}}, .layer_kinds = {"conv2d", "a-later-kind"},
                    .features = {net::k_feature_frozen_layers, "a-later-feature"}};
  auto h2 = std::get<net::msg::hello>(round_trip(h));
  CHECK(h2.layer_kinds == h.layer_kinds);  // names this side does not know are kept: the hub compares them
  CHECK(h2.features == h.features);
  CHECK(h2.device_id == "pi-07");
  CHECK(h2.memory_budget_bytes == (64u << 20));
  CHECK(h2.codecs == h.codecs);
  REQUIRE(h2.resume.size() == 1);
  CHECK(h2.resume[0].offset == 1024);

  auto w = std::get<net::msg::welcome>(round_trip(net::msg::welcome{250, 1u << 20, 65536}));
  CHECK(w.heartbeat_ms == 250);

  net::msg::assign a{.round = 3, .widths = {64, 32}, .hyper_json = R"({"lr":0.05,"steps":20})", .transfer = 9,
                     .size = 4096, .blob_codec = net::codec::f32, .sha256 = some_digest()};
  auto a2 = std::get<net::msg::assign>(round_trip(a));
  CHECK(a2.widths == a.widths);
  CHECK(a2.sha256 == a.sha256);
  CHECK(a2.hyper_json.find("\"lr\":0.05") != std::string::npos);

  auto k = std::get<net::msg::ack>(round_trip(net::msg::ack{9, 2048}));
  CHECK(k.offset == 2048);
  net::msg::update u{.round = 3, .examples = 600, .steps = 20, .loss = 0.25, .transfer = 10, .size = 8,
                     .blob_codec = net::codec::f32, .sha256 = some_digest()};
  auto u2 = std::get<net::msg::update>(round_trip(u));
  REQUIRE(u2.loss.has_value());
  CHECK(*u2.loss == doctest::Approx(0.25));
  // A secure round's UPDATE has no loss at all: absent on the wire, absent when read; a loss that is
  // not finite is null on the wire and NaN when read (the hub rejects it by name).
  u.loss.reset();
  CHECK(net::encode_message(u).size() < net::encode_message(u2).size());
  CHECK_FALSE(std::get<net::msg::update>(round_trip(u)).loss.has_value());
  u.loss = std::numeric_limits<double>::infinity();
  const auto inf = std::get<net::msg::update>(round_trip(u)).loss;
  REQUIRE(inf.has_value());
  CHECK(std::isnan(*inf));
  auto r = std::get<net::msg::result>(
      round_trip(net::msg::result{.accepted = false, .code = "rounds.size_mismatch", .reason = "digest"}));
  CHECK(r.code == "rounds.size_mismatch");
  CHECK(r.reason == "digest");
  // A RESULT without a code (from a hub before codes) still parses.
  const std::string old = R"({"accepted":false,"reason":"late"})";
  auto parsed = net::parse_message(net::frame_type::result, std::as_bytes(std::span(old.data(), old.size())));
  REQUIRE(parsed.ok());
  CHECK(std::get<net::msg::result>(parsed.value()).code.empty());
  CHECK(std::get<net::msg::ping>(round_trip(net::msg::ping{5})).seq == 5);
  CHECK(std::get<net::msg::pong>(round_trip(net::msg::pong{6})).seq == 6);
  CHECK(std::get<net::msg::refuse>(round_trip(net::msg::refuse{"no"})).reason == "no");
  const auto coded = std::get<net::msg::refuse>(round_trip(net::msg::refuse{.reason = "labels", .code = "edge.labels_mismatch"}));
  CHECK(coded.code == "edge.labels_mismatch");
  CHECK_FALSE(coded.lasting);
  CHECK(std::get<net::msg::refuse>(round_trip(net::msg::refuse{.reason = "revoked", .code = "revoked", .lasting = true})).lasting);

  // The statistics: float64 arrays travel exactly (base64 of their bytes).
  net::msg::stats q{.pass = 2, .task = tessera::core::task_kind::regression, .inputs = 3, .outputs = 1,
                    .mean = {0.1, -1e300, 12345.678}, .target_mean = 2.5};
  const auto q2 = std::get<net::msg::stats>(round_trip(q));
  CHECK(q2.pass == 2);
  CHECK(q2.task == tessera::core::task_kind::regression);
  CHECK(q2.mean == q.mean);
  CHECK(q2.target_mean == 2.5);
  net::msg::stats_reply p{.pass = 1, .examples = 40, .features = 2, .sum = {1.0 / 3, 2e9}, .min = {0, -1}, .max = {1, 1e9},
                          .label_counts = {10, 30}, .target_sum = 0};
  const auto p2 = std::get<net::msg::stats_reply>(round_trip(p));
  CHECK(p2.sum == p.sum);
  CHECK(p2.max == p.max);
  CHECK(p2.label_counts == p.label_counts);
  net::msg::stats_reply s{.pass = 2, .examples = 40, .features = 2, .sq_dev = {4.5, 0.0}, .target_sq_dev = 1.25};
  const auto s2 = std::get<net::msg::stats_reply>(round_trip(s));
  CHECK(s2.sq_dev == s.sq_dev);
  CHECK(s2.target_sq_dev == 1.25);

  // Evaluation on the devices: the ASSIGN's flag (absent means train) and the score that answers it.
  net::msg::assign ev{.round = 4, .widths = {8}, .hyper_json = R"({"steps":1})", .transfer = 9, .size = 8,
                      .blob_codec = tessera::core::codec_kind::f32, .sha256 = {}, .evaluate = true};
  CHECK(std::get<net::msg::assign>(round_trip(ev)).evaluate);
  ev.evaluate = false;
  CHECK_FALSE(std::get<net::msg::assign>(round_trip(ev)).evaluate);
  CHECK(net::encode_message(ev).size() == net::encode_message(net::msg::assign{.round = 4, .widths = {8}, .hyper_json = R"({"steps":1})",
                                                                                .transfer = 9, .size = 8,
                                                                                .blob_codec = tessera::core::codec_kind::f32,
                                                                                .sha256 = {}})
                                                  .size());
  const auto e2 = std::get<net::msg::evaluation>(
      round_trip(net::msg::evaluation{.round = 4, .transfer = 9, .examples = 120, .loss_sum = 61.25, .correct = 97}));
  CHECK(e2.round == 4);
  CHECK(e2.transfer == 9);
  CHECK(e2.examples == 120);
  CHECK(e2.loss_sum == 61.25);
  CHECK(e2.correct == 97);
  net::msg::hello hv{.device_id = "pi", .version = 1, .memory_budget_bytes = 1, .examples = 2, .validation_examples = 7};
  CHECK(std::get<net::msg::hello>(round_trip(hv)).validation_examples == 7);
}

TEST_CASE("malformed: an evaluation that counts more correct answers than examples, or a negative loss, is refused") {
  CHECK(decode_message_text(frame_with_json(net::frame_type::evaluation,
                                            R"({"round":1,"transfer":2,"examples":10,"loss_sum":1.5,"correct":11})"))
            .find("'correct': over the maximum of 10") != std::string::npos);
  CHECK(decode_message_text(frame_with_json(net::frame_type::evaluation,
                                            R"({"round":1,"transfer":2,"examples":10,"loss_sum":-1,"correct":1})"))
            .find("'loss_sum': negative") != std::string::npos);
  CHECK(decode_message_text(frame_with_json(net::frame_type::evaluation, R"({"round":1,"transfer":2,"examples":10,"correct":1})"))
            .find("'loss_sum'") != std::string::npos);
}

TEST_CASE("malformed: statistics whose arrays do not match their declared length are refused before decoding") {
  // "features": 3, but the sums hold two values: the text's length is checked first.
  const std::string two = tessera::core::encode_doubles(std::vector<double>{1, 2});
  const std::string json = R"({"pass":1,"examples":4,"features":3,"sum":")" + two + R"(","min":")" + two + R"(","max":")" + two +
                           R"(","label_counts":[4],"target_sum":0})";
  CHECK(decode_message_text(frame_with_json(net::frame_type::stats_reply, json)) ==
        "STATS_REPLY: field 'sum': 24 base64 characters, expected 32 for 24 bytes");
  const std::string huge = R"({"pass":1,"examples":4,"features":99999999999,"sum":"","min":"","max":"","label_counts":[],"target_sum":0})";
  CHECK(decode_message_text(frame_with_json(net::frame_type::stats_reply, huge)).find("'features': over the maximum") != std::string::npos);
  const std::string pass3 = R"({"pass":3,"task":"classification","inputs":3,"outputs":2})";
  CHECK(decode_message_text(frame_with_json(net::frame_type::stats, pass3)).find("'pass': over the maximum of 2") != std::string::npos);
}

TEST_CASE("chunk frames decode their binary sub-header and data") {
  std::vector<std::byte> payload(net::chunk_header_bytes + 5, std::byte{0xab});
  net::encode_chunk_header({42, 1000}, std::span<std::byte, net::chunk_header_bytes>(payload.data(), 16));
  const auto frame = net::encode_frame(net::frame_type::chunk, payload);
  auto f = net::decode_frame(frame, net::default_max_payload);
  REQUIRE(f);
  CHECK(f.value().chunk.transfer == 42);
  CHECK(f.value().chunk.offset == 1000);
  CHECK(f.value().payload.size() == 5);
}

TEST_CASE("malformed: invalid JSON") {
  CHECK(decode_error(frame_with_json(net::frame_type::ping, "{\"seq\": 1")) == net::errc::bad_json);
  CHECK(decode_error(frame_with_json(net::frame_type::ping, "")) == net::errc::bad_json);
  CHECK(decode_error(frame_with_json(net::frame_type::ping, "[1]")) == net::errc::bad_json);
  CHECK(decode_error(frame_with_json(net::frame_type::ping, "{\"seq\": \"\xff\"}")) == net::errc::bad_json);
  // Deep nesting is refused before the recursive parser runs.
  CHECK(decode_error(frame_with_json(net::frame_type::ping, std::string(100000, '['))) == net::errc::bad_json);
}

TEST_CASE("malformed: JSON with a missing field names the field") {
  const auto f = frame_with_json(net::frame_type::hello, R"({"version":1,"memory_budget_bytes":1,"examples":1,"codecs":[],"resume":[]})");
  CHECK(decode_error(f) == net::errc::bad_field);
  CHECK(decode_message_text(f).find("'device_id'") != std::string::npos);
  CHECK(decode_error(frame_with_json(net::frame_type::ack, R"({"transfer":1})")) == net::errc::bad_field);
}

TEST_CASE("malformed: JSON with a wrong-typed or out-of-range field names the field") {
  auto text = [](net::frame_type t, const char* j) { return decode_message_text(frame_with_json(t, j)); };
  CHECK(text(net::frame_type::ack, R"({"transfer":"1","offset":0})").find("'transfer'") != std::string::npos);
  CHECK(text(net::frame_type::ack, R"({"transfer":-1,"offset":0})").find("'transfer'") != std::string::npos);
  CHECK(text(net::frame_type::ack, R"({"transfer":1,"offset":1.5})").find("'offset'") != std::string::npos);
  CHECK(text(net::frame_type::welcome, R"({"heartbeat_ms":0,"max_frame_payload":65536,"max_chunk_bytes":1})")
            .find("'heartbeat_ms'") != std::string::npos);
  CHECK(text(net::frame_type::assign,
             R"({"round":1,"widths":[4],"hyper":[],"transfer":1,"size":4,"codec":"f32","sha256":"00"})")
            .find("'hyper'") != std::string::npos);
  CHECK(text(net::frame_type::assign,
             R"({"round":1,"widths":[4],"hyper":{},"transfer":1,"size":4,"codec":"f64","sha256":"00"})")
            .find("'codec'") != std::string::npos);
  CHECK(text(net::frame_type::assign,
             R"({"round":1,"widths":[4],"hyper":{},"transfer":1,"size":4,"codec":"f32","sha256":"zz"})")
            .find("'sha256'") != std::string::npos);
  CHECK(text(net::frame_type::assign,
             R"({"round":1,"widths":[0],"hyper":{},"transfer":1,"size":4,"codec":"f32","sha256":"zz"})")
            .find("'widths'") != std::string::npos);
  CHECK(text(net::frame_type::hello,
             R"({"device_id":"a b","version":1,"memory_budget_bytes":1,"examples":1,"codecs":[],"resume":[]})")
            .find("'device_id'") != std::string::npos);
  CHECK(text(net::frame_type::result, R"({"accepted":1,"reason":""})").find("'accepted'") != std::string::npos);
  CHECK(decode_error(frame_with_json(net::frame_type::ack, R"({"transfer":true,"offset":0})")) == net::errc::bad_field);
}

TEST_CASE("secure aggregation messages round-trip, ASSIGN's secure part and UPDATE's clipped count included") {
  tessera::crypto::secagg_keys keys{.id = "pi-1", .certificate_pem = "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n",
                                    .c_pk = {}, .s_pk = {}, .signature = {}};
  for (std::size_t i = 0; i < 32; ++i) {
    keys.c_pk[i] = static_cast<std::byte>(i);
    keys.s_pk[i] = static_cast<std::byte>(255 - i);
    keys.model[i] = static_cast<std::uint8_t>(i * 7);
  }
  keys.signature = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};  // not a multiple of 3
  const auto k = std::get<net::msg::secagg_keys>(round_trip(net::msg::secagg_keys{.round = 3, .keys = keys}));
  CHECK(k.round == 3);
  CHECK(k.keys.id == "pi-1");
  CHECK(k.keys.certificate_pem == keys.certificate_pem);
  CHECK(k.keys.c_pk == keys.c_pk);
  CHECK(k.keys.s_pk == keys.s_pk);
  CHECK(k.keys.signature == keys.signature);
  CHECK(k.keys.model == keys.model);

  const auto ro = std::get<net::msg::secagg_roster>(
      round_trip(net::msg::secagg_roster{.round = 3, .roster = {{.keys = keys, .segments = {0, 2}}, {.keys = keys, .segments = {1, 2}},
                                                                 {.keys = {.id = "far", .certificate_pem = {}, .c_pk = {}, .s_pk = {}, .signature = {}},
                                                                  .segments = {2}}}}));
  REQUIRE(ro.roster.size() == 3);
  CHECK(ro.roster[1].segments == std::vector<std::uint32_t>{1, 2});
  CHECK(ro.roster[1].keys.s_pk == keys.s_pk);
  // A member that is not the device's neighbour goes by its id alone.
  CHECK(ro.roster[2].keys.id == "far");
  CHECK(ro.roster[2].keys.certificate_pem.empty());
  CHECK(ro.roster[2].segments == std::vector<std::uint32_t>{2});

  const std::vector<tessera::crypto::secagg_box> boxes{{.from = "a", .to = "b", .box = {std::byte{9}, std::byte{8}}}};
  CHECK(std::get<net::msg::secagg_shares>(round_trip(net::msg::secagg_shares{.round = 3, .boxes = boxes})).boxes[0].box == boxes[0].box);
  CHECK(std::get<net::msg::secagg_inbox>(round_trip(net::msg::secagg_inbox{.round = 3, .boxes = boxes})).boxes[0].to == "b");

  const tessera::crypto::secagg_signature sig{.id = "b", .signature = {std::byte{1}, std::byte{2}}};
  const auto un = std::get<net::msg::secagg_unmask>(round_trip(net::msg::secagg_unmask{
      .round = 3, .request = {.survivors = {"a", "b"}, .dropped = {"c"}, .released = {0, 2}, .signatures = {sig, sig}, .partners = {}}}));
  CHECK(un.request.survivors == std::vector<std::string>{"a", "b"});
  CHECK(un.request.dropped == std::vector<std::string>{"c"});
  CHECK(un.request.released == std::vector<std::uint32_t>{0, 2});
  REQUIRE(un.request.signatures.size() == 2);
  CHECK(un.request.signatures[1].id == "b");
  CHECK(un.request.signatures[1].signature == sig.signature);
  // The consistency check: the set alone, and one signature back.
  const tessera::crypto::secagg_masked_with pledge{.id = "a", .without = {"b", "c"}, .signature = {std::byte{3}}};
  const auto mw = std::get<net::msg::secagg_masked_with>(round_trip(net::msg::secagg_masked_with{.round = 3, .pledge = pledge}));
  CHECK(mw.pledge.without == pledge.without);
  CHECK(mw.pledge.signature == pledge.signature);
  const auto ch = std::get<net::msg::secagg_check>(round_trip(net::msg::secagg_check{
      .round = 3, .request = {.survivors = {"a", "b"}, .dropped = {"c"}, .released = {2}, .signatures = {}, .partners = {pledge}}}));
  CHECK(ch.request.survivors == std::vector<std::string>{"a", "b"});
  CHECK(ch.request.released == std::vector<std::uint32_t>{2});
  CHECK(ch.request.signatures.empty());
  REQUIRE(ch.request.partners.size() == 1);
  CHECK(ch.request.partners[0].without == pledge.without);
  const auto cr = std::get<net::msg::secagg_check_reply>(round_trip(net::msg::secagg_check_reply{.round = 3, .signature = sig}));
  CHECK(cr.signature.id == "b");
  CHECK(cr.signature.signature == sig.signature);

  tessera::crypto::secagg_share share{.owner = "a", .segment = 2, .share = {.x = 3, .y = {1, 2, 3, 4, tessera::crypto::gf61_prime - 1}}};
  const auto rep = std::get<net::msg::secagg_unmask_reply>(
      round_trip(net::msg::secagg_unmask_reply{.round = 3, .reply = {.id = "b", .seeds = {share}, .keys = {}}}));
  REQUIRE(rep.reply.seeds.size() == 1);
  CHECK(rep.reply.seeds[0].share.y == share.share.y);
  CHECK(rep.reply.seeds[0].segment == 2);

  net::msg::secure_assign sa;
  sa.params.round = 0xfeedfacecafebeefULL;
  sa.params.bits = 32;
  sa.params.clip = 0.5;
  sa.params.threshold = 4;
  sa.params.neighbors = 12;
  sa.params.segments.push_back({.length = 100, .min_aggregate = 3});
  sa.params.segments.push_back({.length = 11, .min_aggregate = 3});
  sa.segments = {0, 1};
  sa.upload_size = 111 * 4;
  sa.rounding_key[5] = std::byte{42};
  net::msg::assign a{.round = 2, .widths = {8}, .hyper_json = "{}", .transfer = 1, .size = 4, .blob_codec = tessera::core::codec_kind::f32,
                     .sha256 = some_digest(), .evaluate = false, .secure = sa};
  const auto back = std::get<net::msg::assign>(round_trip(a));
  REQUIRE(back.secure.has_value());
  CHECK(back.secure->params.round == 0xfeedfacecafebeefULL);
  CHECK(back.secure->params.segments.size() == 2);
  CHECK(back.secure->params.segments[0].length == 100);
  CHECK(back.secure->params.neighbors == 12);
  CHECK(back.secure->rounding_key == sa.rounding_key);
  CHECK(back.secure->upload_size == 444);
  CHECK(back.secure->params.sample_rate == 0);
  // Devices that sample themselves: the rate travels with the noise, and is refused without it or
  // outside (0, 1].
  a.secure->params.noise = 100;
  a.secure->params.sample_rate = 0.25;
  CHECK(std::get<net::msg::assign>(round_trip(a)).secure->params.sample_rate == 0.25);
  for (const double bad : {1.5, 1.0 + 1e-9}) {
    a.secure->params.sample_rate = bad;
    CHECK(decode_message_text(net::encode_message(a)).find("sample_rate") != std::string::npos);
  }
  // The contributors the noise is sized for: with the noise, at least 2.
  a.secure->params.sample_rate = 0;
  a.secure->params.noise_contributors = 7;
  CHECK(std::get<net::msg::assign>(round_trip(a)).secure->params.noise_contributors == 7);
  a.secure->params.noise_contributors = 1;
  CHECK(decode_message_text(net::encode_message(a)).find("noise_contributors") != std::string::npos);
  a.secure->params.noise_contributors = 7;
  a.secure->params.noise = 0;
  CHECK(decode_message_text(net::encode_message(a)) == "ASSIGN: secure: field 'noise_contributors': without noise");
  a.secure->params.noise_contributors = 0;
  a.secure->params.sample_rate = 0.25;
  CHECK(decode_message_text(net::encode_message(a)).find("sampling protects nothing") != std::string::npos);
  net::msg::update u{.round = 2, .examples = 1, .steps = 1, .loss = 0.5, .transfer = 1, .size = 4,
                     .blob_codec = tessera::core::codec_kind::f32, .sha256 = {}, .clipped = 17};
  CHECK(std::get<net::msg::update>(round_trip(u)).clipped == 17);
}

TEST_CASE("malformed: secure aggregation messages name what is wrong") {
  const auto text = [](net::frame_type t, const std::string& json) { return decode_message_text(frame_with_json(t, json)); };
  CHECK(text(net::frame_type::secagg_unmask, R"({"round":1,"survivors":["a b"],"dropped":[],"released":[]})") ==
        "SECAGG_UNMASK: field 'survivors': expected device ids");
  CHECK(text(net::frame_type::secagg_unmask, R"({"round":1,"survivors":["a"],"dropped":[],"released":[]})") ==
        "SECAGG_UNMASK: field 'signatures': missing");
  CHECK(text(net::frame_type::secagg_check_reply, R"({"round":1,"signature":{"id":"a","signature":"@@"}})")
            .find("SECAGG_CHECK_REPLY: signature: field 'signature'") == 0);
  CHECK(text(net::frame_type::secagg_unmask, R"({"round":1,"survivors":["a"],"dropped":[],"released":[2,1]})") ==
        "SECAGG_UNMASK: field 'released': not sorted and distinct");
  CHECK(text(net::frame_type::secagg_unmask_reply,
             R"({"round":1,"id":"a","seeds":[{"owner":"b","segment":0,"x":1,"y":[1,2,3,4,2305843009213693951]}],"keys":[]})") ==
        "SECAGG_UNMASK_REPLY: seeds[0]: field 'y': expected values below 2^61 - 1");
  CHECK(text(net::frame_type::secagg_keys, R"({"round":1,"keys":{"id":"a","certificate":"PEM","c_pk":"AAAA","s_pk":"AAAA","signature":""}})") ==
        "SECAGG_KEYS: keys: field 'c_pk': expected 32 bytes");
  const std::string key = tessera::core::base64_encode(std::vector<std::byte>(32, std::byte{7}));
  const std::string uncertified = R"({"id":"a","certificate":"","c_pk":")" + key + R"(","s_pk":")" + key + R"(","signature":"AQID"})";
  CHECK(text(net::frame_type::secagg_keys, R"({"round":1,"keys":)" + uncertified + "}") ==
        "SECAGG_KEYS: keys: field 'certificate': empty (keys come with the certificate that signed them)");
  CHECK(text(net::frame_type::secagg_roster, R"({"round":1,"members":[{"id":"b","segments":[0]},{"keys":)" + uncertified + R"(,"segments":[0]}]})") ==
        "SECAGG_ROSTER: members[1]: keys: field 'certificate': empty (keys come with the certificate that signed them)");
  CHECK(text(net::frame_type::secagg_inbox, R"({"round":1,"boxes":[{"from":"a","to":"b","box":"@@@@"}]})").find("SECAGG_INBOX: boxes[0]: field 'box'") == 0);
  const std::string assign = R"({"round":1,"widths":[4],"hyper":{},"transfer":1,"size":4,"codec":"f32","sha256":")" + std::string(64, '0') +
                             R"(","secure":{"protocol_round":5,"bits":32,"clip":1,"threshold":2,"neighbors":0,"segments":[{"length":10,"min_aggregate":2}],"covers":[0],"rounding_key":")" +
                             tessera::core::base64_encode(std::vector<std::byte>(32)) + R"(","upload_size":41}})";
  CHECK(text(net::frame_type::assign, assign) == "ASSIGN: secure: field 'upload_size': is not the covered segments' 10 values");
  std::string one_neighbour = assign;
  one_neighbour.replace(one_neighbour.find("\"neighbors\":0"), 13, "\"neighbors\":1");
  CHECK(text(net::frame_type::assign, one_neighbour) == "ASSIGN: secure: field 'neighbors': must be 0 (everyone) or at least 2");
}

TEST_CASE("secure aggregation: a roster keeps every member's keys across the wire, or is refused; keys never shrink to an id") {
  tessera::crypto::secagg_keys keys{.id = "near", .certificate_pem = "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n",
                                    .c_pk = {}, .s_pk = {}, .signature = {std::byte{1}, std::byte{2}}};
  keys.c_pk.fill(std::byte{3});
  keys.s_pk.fill(std::byte{4});
  const tessera::crypto::secagg_keys none{.id = "far", .certificate_pem = {}, .c_pk = {}, .s_pk = {}, .signature = {}};
  const auto same = [](const tessera::crypto::secagg_keys& a, const tessera::crypto::secagg_keys& b) {
    return a.id == b.id && a.certificate_pem == b.certificate_pem && a.c_pk == b.c_pk && a.s_pk == b.s_pk && a.signature == b.signature;
  };
  const net::msg::secagg_roster sent{.round = 4, .roster = {{.keys = keys, .segments = {0}}, {.keys = none, .segments = {0, 1}}}};
  const auto back = std::get<net::msg::secagg_roster>(round_trip(sent));
  REQUIRE(back.roster.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO("member " << i);
    CHECK(same(back.roster[i].keys, sent.roster[i].keys));
    CHECK(back.roster[i].segments == sent.roster[i].segments);
  }

  // Keys without their certificate cannot be verified by anyone; the encoder still sends them whole
  // (it never drops keys to an id alone), and the parser refuses them, naming the field.
  for (auto spoil : {+[](tessera::crypto::secagg_keys& k) { k.certificate_pem.clear(); },
                     +[](tessera::crypto::secagg_keys& k) { k = {.id = k.id, .certificate_pem = {}, .c_pk = {}, .s_pk = {}, .signature = k.signature}; }}) {
    net::msg::secagg_roster bad = sent;
    spoil(bad.roster[0].keys);
    const std::string json = net::to_json(bad);
    CHECK(json.find(R"({"keys":{"c_pk")") != std::string::npos);
    CHECK(decode_message_text(net::encode_message(bad)) ==
          "SECAGG_ROSTER: members[0]: keys: field 'certificate': empty (keys come with the certificate that signed them)");
  }
}
