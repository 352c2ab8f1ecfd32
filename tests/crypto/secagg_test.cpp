// Tests of tessera/crypto/secagg.hpp: the whole protocol among in-memory devices with real
// certificates — sums without dropouts, with devices dropping at each step, segments with too few
// survivors, and every refusal of a client.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "../support/text.hpp"
#include "test_pki.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/crypto/secagg_graph.hpp"

using namespace tessera;

namespace {

// Sixteen device certificates from the test CA, made once (most tests use the first six).
struct devices {
  std::vector<std::string> ids;
  std::vector<crypto::cert_files> files;
  std::string ca;
  static const devices& get() {
    static const devices d = [] {
      devices out;
      const auto& pki = test::test_pki::get();
      out.ca = testing::read_text(pki.ca.cert);
      for (int i = 0; i < 16; ++i) {
        const std::string id = "sa-" + std::to_string(i);
        crypto::cert_files f{pki.dir / (id + ".pem"), pki.dir / (id + ".key")};
        if (!std::filesystem::exists(f.cert)) REQUIRE(crypto::issue(pki.ca, {.device_id = id}, f, false).ok());
        out.ids.push_back(id);
        out.files.push_back(f);
      }
      return out;
    }();
    return d;
  }
};

// Two groups of three (segments 0 and 1, 40 values each) and the parameters everyone trains (segment 2,
// 6 values).
crypto::secagg_params params(std::uint64_t round = 7, std::size_t min_aggregate = 2) {
  return {.round = round,
          .bits = 32,
          .clip = 1.0,
          .threshold = 3,
          .segments = {{.length = 40, .min_aggregate = min_aggregate}, {.length = 40, .min_aggregate = min_aggregate},
                       {.length = 6, .min_aggregate = min_aggregate}}};
}
std::vector<std::uint32_t> segments_of(std::size_t d) { return {d < 3 ? 0u : 1u, 2u}; }

// Device d of the fleet, pledging the segments it covers (segments_of(d) unless given) and a model
// digest (every device of these tests is sent the same model: all zero).
crypto::secagg_client client(std::size_t d, const crypto::secagg_params& p, std::vector<std::uint32_t> segments = {}) {
  const auto& dv = devices::get();
  auto key = crypto::signing_key::load(dv.files[d].key).value();
  if (segments.empty()) segments = segments_of(d);
  auto c = crypto::secagg_client::create(dv.ids[d], testing::read_text(dv.files[d].cert), key, dv.ca, p, {.segments = std::move(segments), .model = {}});
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  return std::move(c).value();
}

crypto::signing_key signing_key_of(std::size_t d) { return crypto::signing_key::load(devices::get().files[d].key).value(); }

// Device d's masked input goes with its signed pledge of whom it masked with.
void add_masked(crypto::secagg_server& server, const crypto::secagg_client& client, std::size_t d, crypto::secagg_masked m) {
  REQUIRE(server.add_masked_with(client.masked_with(signing_key_of(d)).value()).ok());
  REQUIRE(server.add_masked(std::move(m)).ok());
}

// The consistency check: the server's request, signed by each of `signers` (positions in `clients`,
// which are the fleet's devices in order), returned with their signatures to be answered.
crypto::secagg_unmask_request signed_request(crypto::secagg_server& server, std::vector<crypto::secagg_client>& clients,
                                             const std::vector<std::size_t>& signers) {
  (void)server.check_request();
  for (const std::size_t d : signers) {
    auto sig = clients[d].check(server.check_request_for(devices::get().ids[d]), signing_key_of(d));
    REQUIRE_MESSAGE(sig.ok(), (sig.ok() ? "" : sig.error().message));
    REQUIRE(server.add_signature(std::move(sig).value()).ok());
  }
  return server.unmask_request();
}

// Each device's input: one vector per covered segment, values in (−0.5, 0.5).
std::vector<std::vector<float>> input_of(std::size_t d, const crypto::secagg_params& p) {
  core::rng r(100 + d);
  std::vector<std::vector<float>> in;
  for (auto seg : segments_of(d)) {
    in.emplace_back(p.segments[seg].length);
    for (auto& v : in.back()) v = static_cast<float>(r.uniform_double() - 0.5);
  }
  return in;
}

// The first n devices of the fleet, their keys advertised to `server`.
std::vector<crypto::secagg_client> keyed_fleet(const crypto::secagg_params& p, crypto::secagg_server& server, std::size_t n) {
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < n; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < n; ++d) REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  return clients;
}

// Six devices that advertised keys and shared them; the first `masking` of them sent masked inputs.
std::vector<crypto::secagg_client> masked_fleet(const crypto::secagg_params& p, crypto::secagg_server& server, std::size_t masking) {
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 6; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_boxes(devices::get().ids[d], clients[d].share_keys(server.roster().value()).value()).ok());
  for (std::size_t d = 0; d < masking; ++d)
    add_masked(server, clients[d], d, clients[d].mask(server.inbox(devices::get().ids[d]), input_of(d, p), crypto::random_key().value()).value());
  return clients;
}

// When a device leaves: never, before sharing keys, after sharing (before its masked input), or after
// its masked input (before unmasking).
enum class leaves { never, before_sharing, before_input, before_unmask };

struct outcome {
  crypto::secagg_unmask_request request;
  std::vector<crypto::secagg_unmask_reply> replies;
  std::vector<crypto::secagg_masked> masked;
  core::result<std::vector<crypto::secagg_segment_sum>> sums = std::vector<crypto::secagg_segment_sum>{};
};

outcome run(const crypto::secagg_params& p, const std::vector<leaves>& when) {
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 6; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  const auto roster = server.roster().value();
  for (std::size_t d = 0; d < 6; ++d) {
    if (when[d] == leaves::before_sharing) continue;
    auto boxes = clients[d].share_keys(roster);
    REQUIRE_MESSAGE(boxes.ok(), (boxes.ok() ? "" : boxes.error().message));
    REQUIRE(server.add_boxes(devices::get().ids[d], std::move(boxes).value()).ok());
  }
  outcome o;
  for (std::size_t d = 0; d < 6; ++d) {
    if (when[d] == leaves::before_sharing || when[d] == leaves::before_input) continue;
    auto m = clients[d].mask(server.inbox(devices::get().ids[d]), input_of(d, p), crypto::random_key().value());
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
    o.masked.push_back(m.value());
    add_masked(server, clients[d], d, std::move(m).value());
  }
  std::vector<std::size_t> staying;
  for (std::size_t d = 0; d < 6; ++d)
    if (when[d] == leaves::never) staying.push_back(d);
  o.request = signed_request(server, clients, staying);
  for (std::size_t d = 0; d < 6; ++d) {
    if (when[d] != leaves::never) continue;
    auto r = clients[d].unmask(o.request);
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    o.replies.push_back(r.value());
    REQUIRE(server.add_reply(std::move(r).value()).ok());
  }
  o.sums = server.finish();
  return o;
}

// The plain sum of the inputs of the devices that sent a masked input, for one segment.
std::vector<double> plain_sum(const crypto::secagg_params& p, std::uint32_t seg, const std::vector<leaves>& when) {
  std::vector<double> sum(p.segments[seg].length, 0.0);
  for (std::size_t d = 0; d < 6; ++d) {
    if (when[d] == leaves::before_sharing || when[d] == leaves::before_input) continue;
    const auto segs = segments_of(d);
    const auto in = input_of(d, p);
    for (std::size_t i = 0; i < segs.size(); ++i)
      if (segs[i] == seg)
        for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += in[i][k];
  }
  return sum;
}

void check_sums(const crypto::secagg_params& p, const outcome& o, const std::vector<leaves>& when, std::vector<bool> released) {
  REQUIRE_MESSAGE(o.sums.ok(), (o.sums.ok() ? "" : o.sums.error().message));
  const double step = crypto::fixed_point::create(p.clip, p.bits, 6).value().step();
  for (std::uint32_t seg = 0; seg < 3; ++seg) {
    CAPTURE(seg);
    const auto& s = o.sums.value()[seg];
    CHECK(s.released == released[seg]);
    if (!s.released) continue;
    const auto expected = plain_sum(p, seg, when);
    // Stochastic rounding: each contributor within one step.
    for (std::size_t k = 0; k < expected.size(); ++k) CHECK(std::abs(s.sum[k] - expected[k]) < static_cast<double>(s.contributors) * step);
  }
}

}  // namespace

TEST_CASE("secagg: without dropouts every segment's sum is the inputs' sum, and masked inputs look uniform") {
  const auto p = params();
  const std::vector<leaves> when(6, leaves::never);
  const outcome o = run(p, when);
  check_sums(p, o, when, {true, true, true});
  CHECK(o.sums.value()[2].contributors == 6);
  CHECK(o.sums.value()[0].contributors == 3);
  // The server holds each device's masked vector only: its 32-bit values spread over the whole ring
  // (chi-square over 16 bins of the top 4 bits, 15 degrees of freedom).
  std::array<double, 16> bins{};
  std::size_t n = 0;
  for (const auto& m : o.masked)
    for (auto v : m.y) {
      ++bins[v >> 28];
      ++n;
    }
  const double expected = static_cast<double>(n) / 16.0;
  double chi = 0;
  for (double b : bins) chi += (b - expected) * (b - expected) / expected;
  CHECK(chi < 45.0);  // p < 1e-4 for 15 degrees of freedom
  // No reply carries a key share: nobody dropped.
  for (const auto& r : o.replies) CHECK(r.keys.empty());
}

TEST_CASE("secagg: devices dropping after sharing keys and after their masked input; the survivors' sums come out") {
  const auto p = params();
  // sa-1 leaves after sharing (its masks with the others are removed through its recovered key); sa-4
  // after its masked input (counted, but gives no shares); sa-5 before sharing (never masked with).
  const std::vector<leaves> when{leaves::never, leaves::before_input, leaves::never, leaves::never, leaves::before_unmask, leaves::before_sharing};
  const outcome o = run(p, when);
  CHECK(o.request.dropped == std::vector<std::string>{"sa-1"});
  CHECK(o.request.survivors == std::vector<std::string>{"sa-0", "sa-2", "sa-3", "sa-4"});
  check_sums(p, o, when, {true, true, true});
  CHECK(o.sums.value()[1].contributors == 2);  // sa-3 and sa-4
  // The dropped device's key was asked for; its seeds never were.
  for (const auto& r : o.replies)
    for (const auto& s : r.seeds) CHECK(s.owner != "sa-1");
}

TEST_CASE("secagg: a segment with too few survivors is not released, and its survivor's seed is never revealed") {
  const auto p = params(7, /*min_aggregate=*/2);
  // Group A keeps one survivor (sa-0): its segment stays masked; the others are released.
  const std::vector<leaves> when{leaves::never, leaves::before_input, leaves::before_input, leaves::never, leaves::never, leaves::never};
  const outcome o = run(p, when);
  CHECK(o.request.released == std::vector<std::uint32_t>{1, 2});
  check_sums(p, o, when, {false, true, true});
  // Nothing about sa-0's input on segment 0: no reply carries a share of its seed for that segment,
  // so the dropped devices' keys (recovered) leave its own self mask in place.
  for (const auto& r : o.replies)
    for (const auto& s : r.seeds) CHECK_FALSE((s.owner == "sa-0" && s.segment == 0));
  // Two survivors, below the threshold of 3: nothing is released at all.
  crypto::secagg_server server(p);
  auto clients = masked_fleet(p, server, 2);
  const auto few = clients[0].check(server.check_request(), signing_key_of(0));
  REQUIRE_FALSE(few.ok());
  CHECK(few.error().message == "2 survivors, below the threshold 3");
  CHECK_FALSE(server.finish().ok());
}

TEST_CASE("secagg refusal: an unmasking request that asks for both the seed and the key of one device") {
  const auto p = params();
  crypto::secagg_server server(p);
  auto clients = masked_fleet(p, server, 6);
  auto rogue = server.check_request();
  rogue.dropped.push_back("sa-3");  // a survivor, also named as dropped: its seed and its key would unmask it
  const auto r = clients[0].check(rogue, signing_key_of(0));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "the unmasking asks for both the seed and the key of sa-3: refused");
  // Releasing a segment below its minimum is refused too (the client counts for itself).
  // A request that counts the asked device among the dropped.
  auto small = server.check_request();
  small.survivors = {"sa-0", "sa-3", "sa-4"};
  small.dropped = {"sa-1"};
  CHECK(clients[1].check(small, signing_key_of(1)).error().message == "the unmasking counts this device among the dropped");
}

TEST_CASE("secagg refusal: keys whose signature does not verify") {
  const auto p = params();
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 3; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < 3; ++d) {
    auto keys = clients[d].keys();
    if (d == 2) keys.s_pk[0] ^= std::byte{1};  // the hub substitutes a mask key of its own
    REQUIRE(server.add_keys(keys, segments_of(d)).ok());
  }
  const auto boxes = clients[0].share_keys(server.roster().value());
  REQUIRE_FALSE(boxes.ok());
  CHECK(boxes.error().message ==
        "device sa-2 did not sign these keys, segments and model for round 7 (keys from another round or with other parameters, or a "
        "roster that shows it covering other segments than it does)");
  // Another device's certificate under sa-2's keys.
  crypto::secagg_server other(p);
  for (std::size_t d = 0; d < 3; ++d) {
    auto keys = clients[d].keys();
    if (d == 2) keys.certificate_pem = clients[1].keys().certificate_pem;
    REQUIRE(other.add_keys(keys, segments_of(d)).ok());
  }
  CHECK(clients[0].share_keys(other.roster().value()).error().message == "the roster's certificate for sa-2 is sa-1's");
}

TEST_CASE("secagg refusal: keys replayed from an earlier round") {
  // sa-2's signed keys of round 7 offered again in round 8: the signature covers the round.
  const auto p7 = params(7), p8 = params(8);
  auto old = client(2, p7);
  crypto::secagg_server server(p8);
  auto a = client(0, p8), b = client(1, p8);
  REQUIRE(server.add_keys(a.keys(), segments_of(0)).ok());
  REQUIRE(server.add_keys(b.keys(), segments_of(1)).ok());
  REQUIRE(server.add_keys(old.keys(), segments_of(2)).ok());
  const auto boxes = a.share_keys(server.roster().value());
  REQUIRE_FALSE(boxes.ok());
  CHECK(boxes.error().message.starts_with("device sa-2 did not sign these keys, segments and model for round 8"));
}

TEST_CASE("rogue hub: different rosters to different devices, showing a device covering other segments than it signed") {
  // Each device signs the segments it covers. A hub that shows sa-0 a roster in which sa-3 (group 1)
  // covers group 0 too — so that group 0's sum would seem to have one more contributor, or its masks
  // to come from a device of the hub's choosing — while the others see the true roster: sa-0 refuses.
  const auto p = params();
  crypto::secagg_server server(p);
  auto clients = keyed_fleet(p, server, 6);
  const auto roster = server.roster().value();
  auto shown = roster;
  shown[3].segments = {0, 1, 2};
  const auto refused = clients[0].share_keys(shown);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "device sa-3 shares segment 0 (a group's) with this device but covers other segments: a group's devices cover the same ones; refused");
  // A device shown other parameters (here a smaller segment table's minimum) than the others signed.
  auto other_params = p;
  other_params.segments[0].min_aggregate = 3;
  auto shown_other = client(0, other_params);
  auto mixed = roster;
  mixed[0].keys = shown_other.keys();
  CHECK(shown_other.share_keys(mixed).error().message.starts_with("device sa-1 did not sign these keys, segments and model for round 7"));
  // And a roster giving sa-0 itself other segments than its assignment (and so its pledge).
  auto moved = roster;
  moved[0].segments = {1, 2};
  CHECK(clients[0].share_keys(moved).error().message == "the roster gives this device (sa-0) other segments than it signed");
  CHECK(clients[1].share_keys(roster).ok());  // the true roster is taken
}

TEST_CASE("rogue hub: one device of a group sent a model of its own making") {
  // sa-1 was sent another model than sa-0 and sa-2 (its group, segment 0): each signed the digest of
  // what it got, so sa-0 sees the difference in the roster and shares nothing.
  const auto p = params();
  const auto& dv = devices::get();
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 3; ++d) {
    crypto::sha256_digest model{};
    if (d == 1) model[5] = 9;
    auto key = crypto::signing_key::load(dv.files[d].key).value();
    clients.push_back(crypto::secagg_client::create(dv.ids[d], testing::read_text(dv.files[d].cert), key, dv.ca, p,
                                                    {.segments = segments_of(d), .model = model})
                          .value());
    REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  }
  for (const std::size_t d : {0, 1, 2}) {
    const auto r = clients[d].share_keys(server.roster().value());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(", of this device's group, was sent another model than this device") != std::string::npos);
  }
  // Devices of different groups are sent different subnets: no refusal there.
  crypto::secagg_server mixed(p);
  std::vector<crypto::secagg_client> across;
  for (const std::size_t d : {0, 1, 3, 4}) {
    crypto::sha256_digest model{};
    model[0] = d < 3 ? 1 : 2;
    auto key = crypto::signing_key::load(dv.files[d].key).value();
    across.push_back(crypto::secagg_client::create(dv.ids[d], testing::read_text(dv.files[d].cert), key, dv.ca, p,
                                                   {.segments = segments_of(d), .model = model})
                         .value());
    REQUIRE(mixed.add_keys(across.back().keys(), segments_of(d)).ok());
  }
  for (auto& c : across) CHECK(c.share_keys(mixed.roster().value()).ok());
}

TEST_CASE("secagg: the server refuses inputs of the wrong length, outside the ring, or twice") {
  const auto p = params();
  crypto::secagg_server server(p);
  auto clients = keyed_fleet(p, server, 3);
  CHECK_FALSE(server.add_keys(clients[0].keys(), segments_of(0)).ok());
  for (std::size_t d = 0; d < 3; ++d) REQUIRE(server.add_boxes(devices::get().ids[d], clients[d].share_keys(server.roster().value()).value()).ok());
  CHECK_FALSE(server.add_boxes("sa-0", {}).ok());
  auto m = clients[0].mask(server.inbox("sa-0"), input_of(0, p), crypto::random_key().value()).value();
  auto longer = m;
  longer.y.push_back(0);
  CHECK(server.add_masked(longer).error().message == "device sa-0 sent 47 masked values, expected 46");
  auto outside = m;
  outside.y[3] = std::uint64_t{1} << 40;
  CHECK(server.add_masked(outside).error().message == "device sa-0 sent a value outside the ring");
  REQUIRE(server.add_masked(m).ok());
  CHECK_FALSE(server.add_masked(m).ok());
  CHECK_FALSE(crypto::secagg_server(crypto::secagg_params{.round = 1, .bits = 32, .clip = 1, .threshold = 1, .segments = {{}}})
                  .add_keys(clients[0].keys(), {0})
                  .ok());
}

// ---- neighbour graphs (Bell et al. 2020) ----

namespace {

// Sixteen devices covering one segment (as in FedAvg), each masking with 4 neighbours: a secret needs 3
// of its 5 holders (the device and its neighbours).
crypto::secagg_params sparse_params(std::size_t min_aggregate = 2) {
  return {.round = 21, .bits = 32, .clip = 1.0, .threshold = 3, .segments = {{.length = 30, .min_aggregate = min_aggregate}}, .neighbors = 4};
}
constexpr std::size_t sparse_devices = 16;

std::vector<float> sparse_input(std::size_t d) {
  core::rng r(500 + d);
  std::vector<float> in(30);
  for (auto& v : in) v = static_cast<float>(r.uniform_double() - 0.5);
  return in;
}

struct sparse_fleet {
  explicit sparse_fleet(std::size_t min_aggregate = 2) : p(sparse_params(min_aggregate)), server(p) {}
  crypto::secagg_params p;
  crypto::secagg_server server;
  std::vector<crypto::secagg_client> clients;
  std::vector<std::size_t> boxes_sent;
  std::vector<std::size_t> keys_received;  // roster members whose keys a device's roster carried
};

// Every device advertises keys and shares them; those not in `silent` send their masked input.
void share_and_mask(sparse_fleet& f, const std::set<std::size_t>& silent) {
  const auto p = f.p;
  const auto& ids = devices::get().ids;
  for (std::size_t d = 0; d < sparse_devices; ++d) f.clients.push_back(client(d, p, {0}));
  for (std::size_t d = 0; d < sparse_devices; ++d) REQUIRE(f.server.add_keys(f.clients[d].keys(), {0}).ok());
  for (std::size_t d = 0; d < sparse_devices; ++d) {
    const auto roster = f.server.roster_for(ids[d]);
    REQUIRE(roster.ok());
    f.keys_received.push_back(static_cast<std::size_t>(
        std::count_if(roster.value().begin(), roster.value().end(), [](const auto& m) { return !m.keys.certificate_pem.empty(); })));
    auto boxes = f.clients[d].share_keys(roster.value());
    REQUIRE_MESSAGE(boxes.ok(), (boxes.ok() ? "" : boxes.error().message));
    f.boxes_sent.push_back(boxes.value().size());
    REQUIRE(f.server.add_boxes(ids[d], std::move(boxes).value()).ok());
  }
  for (std::size_t d = 0; d < sparse_devices; ++d) {
    if (silent.contains(d)) continue;
    auto m = f.clients[d].mask(f.server.inbox(ids[d]), {sparse_input(d)}, crypto::random_key().value());
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
    add_masked(f.server, f.clients[d], d, std::move(m).value());
  }
}

}  // namespace

TEST_CASE("secagg with neighbour graphs: each device shares with its neighbours only, and the survivors' sum comes out") {
  sparse_fleet f;
  const std::set<std::size_t> dropped{3, 9};  // leave after sharing keys, before their masked input
  share_and_mask(f, dropped);
  for (std::size_t d = 0; d < sparse_devices; ++d) {
    CAPTURE(d);
    CHECK(f.boxes_sent[d] == 4);     // not 15
    CHECK(f.keys_received[d] == 5);  // its own and its neighbours'
  }
  std::vector<std::size_t> staying;
  for (std::size_t d = 0; d < sparse_devices; ++d)
    if (!dropped.contains(d)) staying.push_back(d);
  const auto request = signed_request(f.server, f.clients, staying);
  CHECK(request.released == std::vector<std::uint32_t>{0});
  CHECK(request.dropped == std::vector<std::string>{"sa-3", "sa-9"});
  CHECK(request.signatures.size() == 14);
  const auto graph = crypto::secagg_graph::build(sparse_params(), f.server.roster().value());
  for (std::size_t d = 0; d < sparse_devices; ++d) {
    if (dropped.contains(d)) continue;
    auto reply = f.clients[d].unmask(request);
    REQUIRE_MESSAGE(reply.ok(), (reply.ok() ? "" : reply.error().message));
    // A device holds shares of its neighbours' secrets only.
    const auto mine = graph.neighbours(d);
    for (const auto& s : reply.value().seeds) {
      const std::size_t owner = std::stoul(s.owner.substr(3));
      CHECK((owner == d || std::binary_search(mine.begin(), mine.end(), owner)));
    }
    for (const auto& s : reply.value().keys) CHECK(dropped.contains(std::stoul(s.owner.substr(3))));
    REQUIRE(f.server.add_reply(std::move(reply).value()).ok());
  }
  const auto sums = f.server.finish();
  REQUIRE_MESSAGE(sums.ok(), (sums.ok() ? "" : sums.error().message));
  const auto& s = sums.value()[0];
  REQUIRE(s.released);
  CHECK(s.contributors == 14);
  const double step = crypto::fixed_point::create(1.0, 32, sparse_devices).value().step();
  for (std::size_t k = 0; k < 30; ++k) {
    double expected = 0;
    for (std::size_t d = 0; d < sparse_devices; ++d)
      if (!dropped.contains(d)) expected += sparse_input(d)[k];
    CHECK(std::abs(s.sum[k] - expected) < 14 * step);
  }
}

TEST_CASE("secagg refusal: releasing a segment whose survivors the neighbour graph does not connect") {
  // Four devices drop so that the ring falls in two parts: the hub, holding every masked input, would
  // learn each part's sum. It does not release the segment, and a device asked to is refused.
  const auto p = sparse_params();
  std::set<std::size_t> cut;
  {
    crypto::secagg_server probe(p);
    std::vector<crypto::secagg_client> keyed;
    for (std::size_t d = 0; d < sparse_devices; ++d) keyed.push_back(client(d, p, {0}));
    for (std::size_t d = 0; d < sparse_devices; ++d) REQUIRE(probe.add_keys(keyed[d].keys(), {0}).ok());
    const auto g = crypto::secagg_graph::build(p, probe.roster().value());
    for (std::size_t a = 0; a < sparse_devices && cut.empty(); ++a)
      for (std::size_t b = a + 1; b < sparse_devices && cut.empty(); ++b)
        for (std::size_t x = 0; x < sparse_devices && cut.empty(); ++x)
          for (std::size_t y = x + 1; y < sparse_devices && cut.empty(); ++y) {
            if (std::set<std::size_t>{a, b, x, y}.size() != 4 || !g.masks(0, a, b) || !g.masks(0, x, y)) continue;
            std::vector<bool> alive(sparse_devices, true);
            alive[a] = alive[b] = alive[x] = alive[y] = false;
            if (!g.connected(0, alive)) cut = {a, b, x, y};
          }
  }
  REQUIRE(cut.size() == 4);
  sparse_fleet f;
  share_and_mask(f, cut);
  auto request = f.server.check_request();
  CHECK(request.released.empty());
  request.released = {0};
  const std::size_t asked = cut.contains(0) ? (cut.contains(1) ? 2 : 1) : 0;
  const auto r = f.clients[asked].check(request, signing_key_of(asked));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "the unmasking releases segment 0, whose survivors its masks do not connect: refused");
}

TEST_CASE("secagg with neighbour graphs: a seed too few neighbours returned keeps the segment withheld") {
  sparse_fleet f;
  share_and_mask(f, {});
  std::vector<std::size_t> everyone(sparse_devices);
  std::iota(everyone.begin(), everyone.end(), std::size_t{0});
  const auto request = signed_request(f.server, f.clients, everyone);
  REQUIRE(request.released == std::vector<std::uint32_t>{0});
  // sa-0's four neighbours do not answer the unmasking: only sa-0 holds a share of its seed.
  const auto graph = crypto::secagg_graph::build(sparse_params(), f.server.roster().value());
  const auto silent = graph.neighbours(0);
  for (std::size_t d = 0; d < sparse_devices; ++d)
    if (!std::binary_search(silent.begin(), silent.end(), d)) REQUIRE(f.server.add_reply(f.clients[d].unmask(request).value()).ok());
  const auto sums = f.server.finish();
  REQUIRE(sums.ok());
  CHECK_FALSE(sums.value()[0].released);
  CHECK(sums.value()[0].withheld == "too few replies hold sa-0's seed");
  // One neighbour too few: refused at the start.
  auto one = sparse_params();
  one.neighbors = 1;
  CHECK_FALSE(crypto::secagg_server(one).add_keys(f.clients[0].keys(), {0}).ok());
}

// Differential privacy under secure aggregation: each device adds Skellam noise of variance full / t
// in ring steps, so that any t contributors carry the full variance.
TEST_CASE("secagg with noise: shares from t survivors sum to at least the full variance") {
  const double sigma_c = 0.25;  // σ·C, the noise deviation every released sum must carry
  const std::size_t t = 3, values = 100000;
  crypto::secagg_params p{.round = 1, .bits = 48, .clip = 1.0, .threshold = 2, .segments = {{.length = values + 1, .min_aggregate = t}}};
  p.summands = 1 << 26;  // a scale fixed before any roster: 2^47 / 2^26 steps per clip
  const double step = crypto::fixed_point::create(p.clip, p.bits, p.summands).value().step();
  const double full = (sigma_c / step) * (sigma_c / step);
  p.noise = full / static_cast<double>(t);
  const std::vector<std::uint32_t> segs{0};
  const auto variance_of = [&](std::size_t devices) {
    crypto::secagg_plain_sum sum(p, devices);
    const std::vector<float> zero(values, 0.0f);
    for (std::size_t d = 0; d < devices; ++d) {
      const auto in = crypto::secagg_change_input(zero, zero, p, segs).value();
      const auto noise_key = crypto::random_key().value();
      const auto e = crypto::secagg_encode(p, devices, segs, in, crypto::random_key().value(), &noise_key);
      REQUIRE(e.ok());
      REQUIRE(sum.add(segs, e.value()).ok());
    }
    const auto out = sum.finish().value();
    REQUIRE(out[0].released);
    double m = 0, v = 0;
    for (std::size_t i = 0; i < values; ++i) m += out[0].sum[i];
    m /= values;
    for (std::size_t i = 0; i < values; ++i) v += (out[0].sum[i] - m) * (out[0].sum[i] - m);
    return v / static_cast<double>(values - 1);
  };
  const double at_t = variance_of(t);
  CAPTURE(at_t / (sigma_c * sigma_c));
  CHECK(at_t >= 0.98 * sigma_c * sigma_c);
  CHECK(at_t <= 1.02 * sigma_c * sigma_c);
  const double at_5 = variance_of(5);  // more survivors: more noise, never less
  CHECK(at_5 / (sigma_c * sigma_c) == doctest::Approx(5.0 / 3.0).epsilon(0.03));
  // Without a noise key the input is refused, not sent without noise.
  const std::vector<float> zero(values, 0.0f);
  CHECK_FALSE(crypto::secagg_encode(p, t, segs, crypto::secagg_change_input(zero, zero, p, segs).value(), crypto::random_key().value()).ok());
}

TEST_CASE("secagg with noise: masks still cancel, the sums carry the noise, the weight value is 0") {
  auto p = params();
  p.summands = 64;
  const double step = crypto::fixed_point::create(p.clip, p.bits, p.summands).value().step();
  p.noise = (0.01 / step) * (0.01 / step) / 2;  // a deviation of 0.01 from two devices
  // The private input: the change itself, and 0 where the weight would be.
  const std::vector<float> received(86, 0.5f), trained(86, 0.75f);
  const auto in = crypto::secagg_change_input(std::span(received).first(44), std::span(trained).first(44), p, segments_of(0)).value();
  CHECK(in[0].size() == 40);
  CHECK(in[0][0] == 0.25f);
  CHECK(in[0][39] == 0.0f);
  CHECK(in[1][5] == 0.0f);
  // A device that drew itself out of the sample puts in nothing but zeros (its count value too): what
  // it adds to the sums is its noise.
  auto counting = p;
  counting.fitted_value = p.clip / 2;
  const auto out = crypto::secagg_change_input(std::span(received).first(44), std::span(trained).first(44), counting, segments_of(0),
                                               /*fitted=*/true, /*drawn=*/false);
  REQUIRE(out.ok());
  for (const auto& seg : out.value())
    for (const float v : seg) CHECK(v == 0.0f);
  CHECK(crypto::secagg_change_input(std::span(received).first(44), std::span(trained).first(44), counting, segments_of(0)).value().back().back() ==
        static_cast<float>(counting.fitted_value));
  const std::vector<leaves> when{leaves::never, leaves::never, leaves::before_input, leaves::never, leaves::never, leaves::never};
  const outcome o = run(p, when);
  REQUIRE_MESSAGE(o.sums.ok(), (o.sums.ok() ? "" : o.sums.error().message));
  for (std::uint32_t seg = 0; seg < 3; ++seg) {
    const auto& s = o.sums.value()[seg];
    REQUIRE(s.released);
    const auto expected = plain_sum(p, seg, when);
    const double deviation = std::sqrt(static_cast<double>(s.contributors) * p.noise) * step;
    double worst = 0;
    for (std::size_t k = 0; k < expected.size(); ++k) worst = std::max(worst, std::abs(s.sum[k] - expected[k]));
    CHECK(worst < 6 * deviation + static_cast<double>(s.contributors) * step);
    CHECK(worst > 0.1 * deviation);  // the noise is there
  }
}

TEST_CASE("rogue hub: a sum released from fewer survivors than the devices' noise is sized for") {
  // Noise shares sized for 4 contributors: the groups' segments (3 devices each) cannot carry σ and are
  // withheld; the shared segment (6) is released. A hub that asks to release a group's sum anyway is
  // refused by name, and the plain sum (the simulator's) withholds the same segments.
  auto p = params();
  p.summands = 64;
  p.noise = 4.0;
  p.noise_contributors = 4;
  const std::vector<leaves> when(6, leaves::never);
  const outcome o = run(p, when);
  CHECK(o.request.released == std::vector<std::uint32_t>{2});
  REQUIRE(o.sums.ok());
  CHECK_FALSE(o.sums.value()[0].released);
  CHECK(o.sums.value()[0].withheld == "3 contributors, below the 4 the devices' noise is sized for");
  crypto::secagg_server server(p);
  auto clients = masked_fleet(p, server, 6);
  auto rogue = server.check_request();
  rogue.released = {0, 2};
  const auto r = clients[0].check(rogue, signing_key_of(0));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "the unmasking releases segment 0 with 3 survivors, below its minimum of 4 (the devices its noise is sized for)");
  crypto::secagg_plain_sum plain(p, 6);
  for (std::size_t d = 0; d < 6; ++d) {
    const crypto::key256 noise_key = crypto::random_key().value();
    REQUIRE(plain.add(segments_of(d), crypto::secagg_encode(p, 6, segments_of(d), input_of(d, p), crypto::random_key().value(), &noise_key).value()).ok());
  }
  const auto sums = plain.finish().value();
  CHECK_FALSE(sums[0].released);
  CHECK_FALSE(sums[1].released);
  CHECK(sums[2].released);
  // Noise sized for contributors in a round without noise, or for one, is not a round's parameter.
  auto bare = params();
  bare.noise_contributors = 4;
  const auto refused = crypto::secagg_server(bare).add_keys(client(0, p).keys(), segments_of(0));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "noise sized for 4 contributor(s) in a round without noise");
  const auto& dv = devices::get();
  const auto device = crypto::secagg_client::create(dv.ids[0], testing::read_text(dv.files[0].cert), signing_key_of(0), dv.ca, bare,
                                                    {.segments = segments_of(0), .model = {}});
  REQUIRE_FALSE(device.ok());
  CHECK(device.error().message == "noise sized for 4 contributor(s) in a round without noise");
}

TEST_CASE("secagg with noise: a roster beyond the ring's summands is refused by server and client") {
  auto p = params();
  p.summands = 4;
  crypto::secagg_server server(p);
  for (std::size_t d = 0; d < 4; ++d) REQUIRE(server.add_keys(client(d, p).keys(), segments_of(d)).ok());
  const auto more = server.add_keys(client(4, p).keys(), segments_of(4));
  REQUIRE_FALSE(more.ok());
  CHECK(more.error().message.find("the 4 the ring is sized for") != std::string::npos);
}

TEST_CASE("rogue hub: an empty or short share inbox is refused before anything is masked; what the hub then holds unmasks no device") {
  // The attack: the hub hands sa-0 no boxes, so sa-0 would mask with its self mask alone; at unmasking
  // the honest neighbours give the hub that mask's seed (sa-0 is a survivor), and the hub subtracts it.
  const auto p = params();  // six devices, threshold 3
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 6; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  const auto roster = server.roster().value();
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_boxes(devices::get().ids[d], clients[d].share_keys(roster).value()).ok());
  const auto full_inbox = server.inbox("sa-0");
  REQUIRE(full_inbox.size() == 5);

  // sa-0 refuses: nothing masked leaves it, so the hub has nothing to strip the self mask from.
  const auto empty = clients[0].mask({}, input_of(0, p), crypto::random_key().value());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message.find("shares from 0 of this device's 5 neighbours arrived, below the 2 the threshold 3 needs") == 0);
  // One box: a self mask and one pairwise mask, which the hub removes by calling that neighbour dropped.
  const auto one = std::vector<crypto::secagg_box>{full_inbox.front()};
  const auto short_inbox = clients[0].mask(one, input_of(0, p), crypto::random_key().value());
  REQUIRE_FALSE(short_inbox.ok());
  CHECK(short_inbox.error().message.find("shares from 1 of") == 0);
  // Enough boxes, from the wrong devices: sa-3 and sa-4 are in the other group and mask only the shared
  // segment 2 with sa-0, so its group segment 0 would carry its self mask alone.
  std::vector<crypto::secagg_box> other_group;
  for (const auto& b : full_inbox)
    if (b.from == "sa-3" || b.from == "sa-4") other_group.push_back(b);
  REQUIRE(other_group.size() == 2);
  const auto wrong = clients[0].mask(other_group, input_of(0, p), crypto::random_key().value());
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message.find("segment 0: shares from 0 of the 2 devices that mask it with this device arrived") == 0);
  // The refusals changed nothing: with its whole inbox sa-0 masks, and the round's sums come out.
  std::vector<std::vector<std::uint64_t>> masked(6);
  for (std::size_t d = 0; d < 6; ++d) {
    auto m = clients[d].mask(d == 0 ? full_inbox : server.inbox(devices::get().ids[d]), input_of(d, p), crypto::random_key().value()).value();
    masked[d] = m.y;
    add_masked(server, clients[d], d, std::move(m));
  }
  const auto request = signed_request(server, clients, {0, 1, 2, 3, 4, 5});
  std::vector<crypto::secagg_unmask_reply> replies;
  for (std::size_t d = 0; d < 6; ++d) {
    replies.push_back(clients[d].unmask(request).value());
    REQUIRE(server.add_reply(replies.back()).ok());
  }
  const auto sums = server.finish();
  REQUIRE(sums.ok());

  // What the hub could unmask with what it holds now: every masked input, and from the unmasking every
  // survivor's self-mask seeds. Each input stripped of its self masks still carries its pairwise masks.
  // The attacker's arithmetic is right: the stripped inputs of a segment add up to its released sum.
  // sa-0's own stripped input is nowhere near its update: what the attack needed was an input with no
  // pairwise masks, which sa-0 refused to make above.
  std::vector<std::vector<std::uint64_t>> stripped = masked;
  for (std::size_t d = 0; d < 6; ++d) {
    std::size_t at = 0;
    for (const std::uint32_t seg : segments_of(d)) {
      std::vector<crypto::shamir_share> shares;
      for (const auto& r : replies)
        for (const auto& sh : r.seeds)
          if (sh.owner == devices::get().ids[d] && sh.segment == seg) shares.push_back(sh.share);
      const auto seed = crypto::shamir_recover(shares, p.threshold);
      REQUIRE(seed.ok());
      const std::string info = "tessera secagg self r" + std::to_string(p.round) + " s" + std::to_string(seg);
      const auto self = crypto::derive_key(seed.value(), info).value();
      crypto::apply_mask(std::span(stripped[d]).subspan(at, p.segments[seg].length), p.bits, self, crypto::mask_sign::subtract);
      at += p.segments[seg].length;
    }
  }
  const auto ring = crypto::fixed_point::create(p.clip, p.bits, 6).value();
  for (std::uint32_t seg = 0; seg < p.segments.size(); ++seg) {
    std::vector<std::uint64_t> total(p.segments[seg].length, 0);
    for (std::size_t d = 0; d < 6; ++d) {
      std::size_t at = 0;
      for (const std::uint32_t mine : segments_of(d)) {
        if (mine == seg) crypto::add_into(total, std::span(stripped[d]).subspan(at, total.size()), p.bits);
        at += p.segments[mine].length;
      }
    }
    std::vector<double> decoded(total.size());
    ring.decode_sum(total, decoded);
    CHECK(decoded == sums.value()[seg].sum);
  }
  std::vector<double> alone(p.segments[0].length);
  ring.decode_sum(std::span(stripped[0]).first(alone.size()), alone);
  const auto update = input_of(0, p)[0];
  // Decoded, the leftover masks are uniform over the ring's whole range (±6 clips for six summands):
  // an update would sit within one ring step of its values, in (−0.5, 0.5).
  double off = 0;
  std::size_t near = 0;
  for (std::size_t i = 0; i < alone.size(); ++i) {
    off += std::abs(alone[i] - static_cast<double>(update[i]));
    if (std::abs(alone[i] - static_cast<double>(update[i])) < 1e-6) ++near;
  }
  CHECK(off / static_cast<double>(alone.size()) > p.clip);
  CHECK(near == 0);
}

TEST_CASE("rogue hub: a release naming dropped the devices a survivor masked with") {
  // Sums of at least 3 (min_aggregate) on a ring where each device masks with its 4 nearest. Three of
  // sa-0's four neighbours "drop": the ring stays connected, but sa-0's input is tied to the sum by
  // one surviving neighbour's masks alone, so the hub would hold a sum of two that contains it. The
  // hub's release rule withholds the sum, and sa-0 refuses to sign or answer a request releasing it.
  sparse_fleet f(/*min_aggregate=*/3);
  crypto::secagg_server probe(f.p);
  std::vector<crypto::secagg_client> keyed;
  for (std::size_t d = 0; d < sparse_devices; ++d) keyed.push_back(client(d, f.p, {0}));
  for (std::size_t d = 0; d < sparse_devices; ++d) REQUIRE(probe.add_keys(keyed[d].keys(), {0}).ok());
  const auto graph = crypto::secagg_graph::build(f.p, probe.roster().value());
  const auto around = graph.neighbours(0);
  REQUIRE(around.size() == 4);
  const std::set<std::size_t> gone(around.begin(), around.begin() + 3);
  std::vector<bool> alive(sparse_devices, true);
  for (const std::size_t d : gone) alive[d] = false;
  REQUIRE(graph.connected(0, alive));  // connected: the graph's rule alone would release
  share_and_mask(f, gone);
  auto request = f.server.check_request();
  CHECK(request.released.empty());  // the hub's rule withholds it
  request.released = {0};
  const auto r = f.clients[0].check(request, signing_key_of(0));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.starts_with("the unmasking releases segment 0 with 1 of the devices this device masked it with among the survivors, "
                                      "below the 2 its sum needs"));
}

TEST_CASE("rogue hub: a short inbox and its senders named dropped, to take the device's seed from its other neighbours") {
  // sa-0 gets the boxes of sa-1 and sa-2 only (threshold − 1: it masks), so it masks with them alone.
  // The hub names them dropped (their keys would remove their masks) and sa-0 a survivor, and asks
  // sa-3, sa-4 and sa-5 — enough for the threshold, and holders of sa-0's seed — to sign and unmask.
  // sa-0's signed pledge shows that none of the devices it masked with survive: they refuse.
  const auto p = params();
  const auto& ids = devices::get().ids;
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 6; ++d) clients.push_back(client(d, p));
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_keys(clients[d].keys(), segments_of(d)).ok());
  const auto roster = server.roster().value();
  for (std::size_t d = 0; d < 6; ++d) REQUIRE(server.add_boxes(ids[d], clients[d].share_keys(roster).value()).ok());
  std::vector<crypto::secagg_box> short_inbox;
  for (const auto& b : server.inbox("sa-0"))
    if (b.from == "sa-1" || b.from == "sa-2") short_inbox.push_back(b);
  add_masked(server, clients[0], 0, clients[0].mask(short_inbox, input_of(0, p), crypto::random_key().value()).value());
  for (std::size_t d = 3; d < 6; ++d)
    add_masked(server, clients[d], d, clients[d].mask(server.inbox(ids[d]), input_of(d, p), crypto::random_key().value()).value());
  // The server's own request: sa-1 and sa-2 did not upload (here they really did not), segment 2 only.
  auto asked = server.check_request_for("sa-3");
  REQUIRE(asked.survivors == std::vector<std::string>{"sa-0", "sa-3", "sa-4", "sa-5"});
  REQUIRE(asked.dropped == std::vector<std::string>{"sa-1", "sa-2"});
  asked.released = {2};  // the hub's rule withholds it; a rogue hub asks all the same
  for (std::size_t d = 3; d < 6; ++d) {
    CAPTURE(d);
    const auto r = clients[d].check(asked, signing_key_of(d));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.starts_with("device sa-0 masked segment 2 with 0 of the survivors, below the 1 its sum needs"));
  }
  // Without sa-0's pledge, or with sa-3 slipped into it, the request is refused too.
  auto without = asked;
  std::erase_if(without.partners, [](const crypto::secagg_masked_with& m) { return m.id == "sa-0"; });
  CHECK(clients[3].check(without, signing_key_of(3)).error().message ==
        "the survivor set names sa-0 without its signed pledge of whom it masked with: refused");
  auto forged = asked;
  for (auto& m : forged.partners)
    if (m.id == "sa-0") std::erase(m.without, "sa-3");  // "sa-0 masked with sa-3 too"
  CHECK(clients[3].check(forged, signing_key_of(3)).error().message == "device sa-0 did not sign the pledge of whom it masked with: refused");
  // The server's own release rule agrees: sa-0 is tied to no survivor's masks on segment 2, which is withheld.
  CHECK(server.check_request_for("sa-3").released == std::vector<std::uint32_t>{1});  // group 1 (sa-3..5) only
}

TEST_CASE("rogue hub: a roster holding a revoked device's keys is refused by a device holding the CA's list") {
  // dev-gone's certificate is genuine and its keys are signed, but the CA revoked it: a hub could use it
  // (or a stolen key) to fill a group with devices it controls.
  const auto& pki = test::test_pki::get();
  const auto& dv = devices::get();
  auto p = params();
  const std::string crl = testing::read_text(pki.ca.crl);
  auto gone_key = crypto::signing_key::load(pki.revoked.key).value();
  auto gone = crypto::secagg_client::create("dev-gone", testing::read_text(pki.revoked.cert), gone_key, dv.ca, p, {.segments = segments_of(3), .model = {}})
                  .value();
  std::vector<crypto::secagg_client> clients;
  for (std::size_t d = 0; d < 3; ++d) {
    auto key = crypto::signing_key::load(dv.files[d].key).value();
    clients.push_back(crypto::secagg_client::create(dv.ids[d], testing::read_text(dv.files[d].cert), key, dv.ca, p,
                                                    {.segments = segments_of(d), .model = {}}, d == 0 ? crl : "")
                          .value());
  }
  crypto::secagg_roster roster;
  for (std::size_t d = 0; d < 3; ++d) roster.push_back({.keys = clients[d].keys(), .segments = segments_of(d)});
  roster.push_back({.keys = gone.keys(), .segments = segments_of(3)});
  const auto refused = clients[0].share_keys(roster);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message == "the roster's certificate for dev-gone: device certificate revoked by the CA's revocation list");
  CHECK(clients[1].share_keys(roster).ok());  // a device without the list cannot tell
  // A list that is not the CA's PEM CRL is an error, not a silent pass.
  auto key = crypto::signing_key::load(dv.files[2].key).value();
  auto bad_list = crypto::secagg_client::create(dv.ids[2], testing::read_text(dv.files[2].cert), key, dv.ca, p,
                                                {.segments = segments_of(2), .model = {}}, "not a list")
                      .value();
  roster[2].keys = bad_list.keys();
  const auto r = bad_list.share_keys(roster);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("not a PEM CRL") != std::string::npos);
}
