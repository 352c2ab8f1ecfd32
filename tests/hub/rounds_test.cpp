#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "tessera/core/codec.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/rng.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/hub/hub_config.hpp"
#include "tessera/hub/rounds.hpp"

using namespace tessera;

namespace {

hub::hub_config config(nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", {{"inputs", 64}, {"hidden", {256, 256}}, {"outputs", 10}}},
                      {"local_steps", 5}, {"batch", 16}, {"min_width", 8}, {"rounds", 3}};
  j.update(extra);
  auto c = hub::parse_hub_config(j, "hub.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  return c.value();
}

hub::round_engine engine_for(const hub::hub_config& c) {
  std::vector<float> params(core::param_count(c.model.full_arch()));
  core::initialize(c.model, params);
  return hub::round_engine(c, std::move(params), 0);
}

hub::device_offer offer(const std::string& id, std::uint64_t budget, std::vector<net::codec> codecs = {net::codec::f32}) {
  return {.id = id, .budget_bytes = budget, .examples = 1000, .codecs = std::move(codecs)};
}

// What a well-behaved device would announce for its assignment.
net::msg::update update_for(const hub::round_engine& e, const hub::assignment& a) {
  return {.round = static_cast<std::uint64_t>(e.current_round()),
          .examples = static_cast<std::uint64_t>(a.task.steps * a.task.batch),
          .steps = static_cast<std::uint64_t>(a.task.steps),
          .loss = 0.5,
          .transfer = 1,
          .size = a.upload_bytes,
          .blob_codec = hub::to_net(a.codec),
          .sha256 = {}};
}

std::vector<std::byte> encoded(const hub::assignment& a, std::span<const float> values) {
  std::vector<std::byte> blob(core::encoded_bytes(a.sub.arch, a.codec));
  REQUIRE(core::encode(a.sub.arch, a.codec, values, blob).ok());
  return blob;
}

}  // namespace

TEST_CASE("rounds: each device's subnet fits the budget it reported, and bigger budgets get bigger subnets") {
  const auto c = config();
  auto e = engine_for(c);
  const std::size_t full = core::bytes_needed(c.model.full_arch(), c.batch, true, core::codec_kind::f32);
  // Budgets that bind: a quarter, a third and a half of what the whole model needs.
  auto excluded = e.begin_round({offer("c", full / 2), offer("a", full / 4), offer("b", full / 3)});
  REQUIRE(excluded.ok());
  CHECK(excluded.value().empty());
  auto& as = e.assignments();
  REQUIRE(as.size() == 3);
  CHECK(as[0].device == "a");  // device order is by id
  CHECK(as[1].device == "b");
  CHECK(as[2].device == "c");
  const std::uint64_t budgets[] = {full / 4, full / 3, full / 2};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(core::bytes_needed(as[i].sub.arch, c.batch, true, as[i].codec) <= budgets[i]);
    CHECK(as[i].task.steps == 5);
    CHECK(as[i].download.size() == core::encoded_bytes(as[i].sub.arch, as[i].codec));
    CHECK(as[i].download_sha == crypto::sha256_of(as[i].download));
  }
  CHECK(as[0].sub.arch.widths[1] < as[1].sub.arch.widths[1]);
  CHECK(as[1].sub.arch.widths[1] <= as[2].sub.arch.widths[1]);
}

TEST_CASE("rounds: a device too small for min_width, or for the whole model under FedAvg, is left out with the reason") {
  auto e = engine_for(config());
  auto excluded = e.begin_round({offer("big", 64u << 20), offer("tiny", 4096)});
  REQUIRE(excluded.ok());
  REQUIRE(excluded.value().size() == 1);
  CHECK(excluded.value()[0].id == "tiny");
  CHECK(excluded.value()[0].reason.find("min_width 8") != std::string::npos);
  CHECK(excluded.value()[0].reason.find("MiB") != std::string::npos);
  CHECK(e.assignments().size() == 1);

  const auto fc = config({{"strategy", "fedavg"}});
  auto f = engine_for(fc);
  const std::size_t full = core::bytes_needed(fc.model.full_arch(), fc.batch, true, core::codec_kind::f32);
  auto fx = f.begin_round({offer("a", full), offer("b", full - 1)});
  REQUIRE(fx.ok());
  REQUIRE(fx.value().size() == 1);
  CHECK(fx.value()[0].reason.find("FedAvg trains the whole model") != std::string::npos);

  auto none = engine_for(config());
  CHECK_FALSE(none.begin_round({offer("tiny", 4096)}).ok());
}

TEST_CASE("rounds: the hub's codec is used where the device speaks it, f32 elsewhere") {
  auto e = engine_for(config({{"codec", "q8"}}));
  REQUIRE(e.begin_round({offer("a", 64u << 20, {net::codec::f32, net::codec::q8}), offer("b", 64u << 20)}).ok());
  CHECK(e.assignments()[0].codec == core::codec_kind::q8);
  CHECK(e.assignments()[1].codec == core::codec_kind::f32);
}

TEST_CASE("rounds: an update must match its assignment in round, size, codec, steps, examples and loss") {
  auto e = engine_for(config());
  REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
  const hub::assignment& a = e.assignments()[0];
  CHECK(e.check_update(a, update_for(e, a)).ok());
  auto expect_refused = [&](net::msg::update u, const char* words) {
    auto r = e.check_update(a, u);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error().message.find(words) != std::string::npos, r.error().message);
  };
  auto u = update_for(e, a);
  u.round = 0;
  expect_refused(u, "round 0");
  u = update_for(e, a);
  u.size += 4;
  expect_refused(u, "bytes");
  u = update_for(e, a);
  u.blob_codec = net::codec::f16;
  expect_refused(u, "codec f16");
  u = update_for(e, a);
  u.steps = 4;
  expect_refused(u, "steps");
  u = update_for(e, a);
  u.examples = 0;
  expect_refused(u, "examples");
  u.examples = 1'000'000;
  expect_refused(u, "examples");
  u = update_for(e, a);
  u.loss = std::numeric_limits<double>::quiet_NaN();
  expect_refused(u, "loss");
}

TEST_CASE("rounds: a blob with a NaN is refused and changes nothing; a straggler's neurons keep their values") {
  const auto c = config();
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20), offer("c", 64u << 20)}).ok());
  auto& as = e.assignments();
  // a: trains (every value +1); b: sends a NaN; c: never reports.
  std::vector<float> va(core::param_count(as[0].sub.arch));
  core::gather(e.full(), as[0].sub, e.params(), va);
  for (auto& v : va) v += 1.0f;
  as[0].examples = 80;
  REQUIRE(e.accept_blob(as[0], encoded(as[0], va)).ok());
  std::vector<float> vb(core::param_count(as[1].sub.arch), 0.25f);
  auto blob_b = encoded(as[1], vb);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(blob_b.data() + 8, &nan, sizeof nan);
  auto refused = e.accept_blob(as[1], blob_b);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("finite") != std::string::npos);
  CHECK(as[1].state == hub::assignment_state::assigned);
  as[1].state = hub::assignment_state::rejected;  // what the service does with the refusal
  CHECK_FALSE(e.all_reported());
  std::vector<float> c_before(core::param_count(as[2].sub.arch));
  core::gather(e.full(), as[2].sub, before, c_before);
  const core::subnet sub_a = as[0].sub, sub_c = as[2].sub;

  auto m = e.close_round(nullptr, 1.0);
  REQUIRE(m.ok());
  CHECK(m.value().round == 1);
  CHECK(m.value().stragglers == 1);
  CHECK(m.value().rejected == 1);
  CHECK(m.value().refused == 0);
  CHECK(m.value().examples == 80);
  CHECK(e.completed() == 1);
  CHECK_FALSE(e.in_round());
  for (float v : e.params()) REQUIRE(std::isfinite(v));
  std::vector<float> a_after(core::param_count(sub_a.arch)), c_after(core::param_count(sub_c.arch));
  core::gather(e.full(), sub_a, e.params(), a_after);
  core::gather(e.full(), sub_c, e.params(), c_after);
  CHECK(a_after == va);  // the only report of its blocks, and of the shared output bias
  const std::size_t shared = static_cast<std::size_t>(c.model.outputs);  // the output bias, last in the layout
  for (std::size_t i = 0; i + shared < c_after.size(); ++i) REQUIRE(c_after[i] == c_before[i]);
}

TEST_CASE("rounds: the plan of round r is the simulator's plan of round r") {
  auto e = engine_for(config({{"seed", 11}}));
  REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
  const std::uint64_t first = e.plan_seed();
  e.assignments()[0].state = hub::assignment_state::refused;
  e.assignments()[1].state = hub::assignment_state::refused;
  REQUIRE(e.close_round(nullptr, 0).ok());
  REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
  CHECK(e.plan_seed() != first);
  CHECK(e.plan_seed() == core::mix_seed(11, hub::k_stream_plan + 1));
}

