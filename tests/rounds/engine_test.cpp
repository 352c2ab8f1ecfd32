// Tests of tessera/rounds/engine.hpp: planning from budgets, the checks on an update, assembly with
// stragglers and rejections, the order of the sums, evaluation and early stopping.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "../core/test_files.hpp"
#include "tessera/core/base/seeds.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"
#include "tessera/rounds/natural_order.hpp"
#include "tessera/rounds/recorder.hpp"

using namespace tessera;

namespace {

// The tests' devices add a constant to every value, far beyond what training moves: the update bounds
// are off here and tested on their own below ("engine bounds: ...").
rounds::run_config config(nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", {{"inputs", 64}, {"hidden", {256, 256}}, {"outputs", 10}}},
                      {"local_steps", 5}, {"batch", 16}, {"min_width", 8}, {"rounds", 3}, {"update_bound", "off"}};
  j.update(extra);
  core::config_reader r(j, "run.json");
  rounds::run_config c;
  REQUIRE(rounds::read_run_fields(r, c, /*allow_central=*/true).ok());
  auto done = r.finish();
  REQUIRE_MESSAGE(done.ok(), (done.ok() ? "" : done.error().message));
  return c;
}

// The error a run configuration (the tests' model plus `extra`) is refused with.
std::string refused(nlohmann::json extra) {
  nlohmann::json j = {{"model", {{"inputs", 64}, {"hidden", {256, 256}}, {"outputs", 10}}}};
  j.update(extra);
  core::config_reader r(j, "run.json");
  rounds::run_config rc;
  (void)rounds::read_run_fields(r, rc, /*allow_central=*/true);
  auto done = r.finish();
  REQUIRE_FALSE(done.ok());
  return done.error().message;
}

rounds::engine engine_for(const rounds::run_config& c) {
  std::vector<float> params(core::param_count(c.model.full_arch()));
  core::initialize(c.model, params);
  return rounds::engine(c, std::move(params), 0);
}

rounds::device_offer offer(const std::string& id, std::uint64_t budget,
                           std::vector<core::codec_kind> codecs = {core::codec_kind::f32}) {
  return {.id = id, .budget_bytes = budget, .examples = 1000, .codecs = std::move(codecs), .capacity = 0};
}

// What a well-behaved device would announce for its assignment.
rounds::update_claim claim_for(const rounds::engine& e, const rounds::assignment& a, std::uint64_t examples = 0) {
  return {.round = static_cast<std::uint64_t>(e.current_round()),
          .examples = examples != 0 ? examples : static_cast<std::uint64_t>(a.task.steps * a.task.batch),
          .steps = static_cast<std::uint64_t>(a.task.steps),
          .loss = 0.5,
          .size = a.blob_bytes,
          .codec = a.codec};
}

std::vector<std::byte> encoded(const rounds::assignment& a, std::span<const float> values) {
  std::vector<std::byte> blob(a.blob_bytes);
  REQUIRE(core::encode(a.sub.arch, a.codec, values, blob).ok());
  return blob;
}

// The device's download, sent and received whole: its subnet's values.
std::vector<float> download(rounds::engine& e, rounds::assignment& a) {
  std::vector<std::byte> down(a.blob_bytes);
  REQUIRE(e.encode_download(a, down).ok());
  REQUIRE(e.sent(a).ok());
  REQUIRE(e.downloaded(a).ok());
  std::vector<float> values(core::param_count(a.sub.arch));
  REQUIRE(core::decode(a.sub.arch, a.codec, down, values).ok());
  return values;
}

// The values `sub` holds of the full model's `values`.
std::vector<float> gathered(const core::mlp_arch& full, const core::subnet& sub, std::span<const float> values) {
  std::vector<float> out(core::param_count(sub.arch));
  core::gather(full, sub, values, out);
  return out;
}

// The device's side, done right: download, train (here: add `delta` to every value), upload.
std::vector<float> train_and_report(rounds::engine& e, rounds::assignment& a, float delta, std::uint64_t examples) {
  std::vector<float> values = download(e, a);
  for (auto& v : values) v += delta;
  REQUIRE(e.announce(a, claim_for(e, a, examples)).ok());
  REQUIRE(e.receive(a, encoded(a, values)).ok());
  return values;
}

// Ends the open round the quickest way that still counts: the first device trains, the rest refuse.
void close_counted(rounds::engine& e) {
  const auto as = e.assignments();
  (void)train_and_report(e, as[0], 0.5f, 80);
  for (std::size_t i = 1; i < as.size(); ++i) e.refuse(as[i], "no");
  REQUIRE(e.close_round(nullptr).ok());
  REQUIRE_FALSE(e.last_faults().untrained);
}

}  // namespace

TEST_CASE("engine: each device's subnet fits the budget it reported, and bigger budgets get bigger subnets") {
  const auto c = config();
  auto e = engine_for(c);
  const std::size_t full = core::bytes_needed(c.model.full_arch(), c.batch, true, core::codec_kind::f32);
  // Budgets that bind: a quarter, a third and a half of what the whole model needs.
  auto excluded = e.begin_round({offer("c", full / 2), offer("a", full / 4), offer("b", full / 3)});
  REQUIRE(excluded.ok());
  CHECK(excluded.value().empty());
  auto as = e.assignments();
  REQUIRE(as.size() == 3);
  CHECK(as[0].device == "a");  // device order is by id
  CHECK(as[1].device == "b");
  CHECK(as[2].device == "c");
  const std::uint64_t budgets[] = {full / 4, full / 3, full / 2};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(core::bytes_needed(as[i].sub.arch, c.batch, true, as[i].codec) <= budgets[i]);
    CHECK(as[i].task.steps == 5);
    CHECK(as[i].blob_bytes == core::encoded_bytes(as[i].sub.arch, as[i].codec));
    CHECK(as[i].state == rounds::assignment_state::assigned);
  }
  CHECK(as[0].sub.arch.widths[1] < as[1].sub.arch.widths[1]);
  CHECK(as[1].sub.arch.widths[1] <= as[2].sub.arch.widths[1]);
}

TEST_CASE("engine: with micro-batches budgets are planned for a micro-batch's rows, and the task carries it") {
  const auto c = config({{"micro_batch", 4}});
  CHECK(c.memory_rows() == 4);
  auto e = engine_for(c);
  const std::size_t full = core::bytes_needed(c.model.full_arch(), c.batch, true, core::codec_kind::f32);
  auto parts = e.begin_round({offer("a", full / 4)});
  REQUIRE(parts.ok());
  auto plain = engine_for(config());
  REQUIRE(plain.begin_round({offer("a", full / 4)}).ok());
  REQUIRE(e.assignments().size() == 1);
  REQUIRE(plain.assignments().size() == 1);
  const auto& a = e.assignments()[0];
  CHECK(a.task.micro_batch == 4);
  CHECK(a.task.batch == 16);
  CHECK(core::bytes_needed(a.sub.arch, 4, true, a.codec) <= full / 4);
  CHECK(core::bytes_needed(a.sub.arch, 16, true, a.codec) > full / 4);  // the whole batch would not fit it
  CHECK(a.sub.arch.widths[1] > plain.assignments()[0].sub.arch.widths[1]);  // the same budget, a wider subnet
  CHECK(plain.assignments()[0].task.micro_batch == 0);
  // A part is at most the batch; one as large as the batch is the batch.
  CHECK(refused({{"batch", 16}, {"micro_batch", 17}}).find("micro_batch") != std::string::npos);
  CHECK(config({{"micro_batch", 16}}).micro_batch == 0);
}

TEST_CASE("engine: devices are ordered by id with numbers compared as numbers") {
  auto e = engine_for(config());
  REQUIRE(e.begin_round({offer("device-10", 64u << 20), offer("device-2", 64u << 20), offer("device-1", 64u << 20),
                         offer("device-02", 64u << 20), offer("alpha", 64u << 20)})
              .ok());
  std::vector<std::string> order;
  for (const auto& a : e.assignments()) order.push_back(a.device);
  CHECK(order == std::vector<std::string>{"alpha", "device-1", "device-02", "device-2", "device-10"});
}

TEST_CASE("engine: a device too small for min_width, or for the whole model under FedAvg, is left out with the reason") {
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
  auto nobody = none.begin_round({offer("tiny", 4096)});
  REQUIRE_FALSE(nobody.ok());
  CHECK(nobody.error().code == rounds::errc::no_devices);
}

TEST_CASE("engine: a capacity fixed by the driver replaces the budget, and groups never exceed the devices") {
  auto e = engine_for(config({{"groups", 8}}));
  rounds::device_offer half = offer("a", 0), quarter = offer("b", 0);
  half.capacity = 0.5;
  quarter.capacity = 0.25;
  auto ok = e.begin_round({half, quarter});
  REQUIRE(ok.ok());
  CHECK(ok.value().empty());
  REQUIRE(e.assignments().size() == 2);
  CHECK(e.assignments()[0].sub.arch.widths[1] == 128);
  CHECK(e.assignments()[1].sub.arch.widths[1] == 64);
  CHECK(e.assignments()[0].group != e.assignments()[1].group);
}

TEST_CASE("engine: the run's codec is used where the device speaks it, f32 elsewhere") {
  auto e = engine_for(config({{"codec", "q8"}}));
  REQUIRE(e.begin_round({offer("a", 64u << 20, {core::codec_kind::f32, core::codec_kind::q8}), offer("b", 64u << 20)}).ok());
  CHECK(e.assignments()[0].codec == core::codec_kind::q8);
  CHECK(e.assignments()[1].codec == core::codec_kind::f32);
}

TEST_CASE("engine: a claim for another round, or a second one, changes nothing; a claim that does not fit rejects") {
  auto e = engine_for(config());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
  rounds::assignment& a = e.assignments()[0];
  auto u = claim_for(e, a);
  u.round = 0;
  auto stale = e.announce(a, u);
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.error().code == rounds::errc::wrong_round);
  CHECK(stale.error().message.find("round 0") != std::string::npos);
  CHECK(a.state == rounds::assignment_state::assigned);

  REQUIRE(e.announce(a, claim_for(e, a)).ok());
  CHECK(a.state == rounds::assignment_state::uploading);
  auto again = e.announce(a, claim_for(e, a));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == rounds::errc::already_reported);
  CHECK(a.state == rounds::assignment_state::uploading);

  struct bad_claim {
    const char* name;
    void (*spoil)(rounds::update_claim&);
    rounds::errc code;
    const char* words;
  };
  const bad_claim cases[] = {
      {"size", [](rounds::update_claim& c) { c.size += 4; }, rounds::errc::size_mismatch, "bytes"},
      {"codec", [](rounds::update_claim& c) { c.codec = core::codec_kind::f16; }, rounds::errc::codec_mismatch, "codec f16"},
      {"steps", [](rounds::update_claim& c) { c.steps = 4; }, rounds::errc::steps_mismatch, "steps"},
      {"no examples", [](rounds::update_claim& c) { c.examples = 0; }, rounds::errc::examples_out_of_range, "examples"},
      {"too many examples", [](rounds::update_claim& c) { c.examples = 1'000'000; }, rounds::errc::examples_out_of_range, "examples"},
      {"NaN loss", [](rounds::update_claim& c) { c.loss = std::numeric_limits<double>::quiet_NaN(); }, rounds::errc::loss_not_finite, "loss"},
      {"no loss", [](rounds::update_claim& c) { c.loss.reset(); }, rounds::errc::bad_values, "no loss"},
  };
  for (const auto& bc : cases) {
    INFO(bc.name);
    auto f = engine_for(config());
    REQUIRE(f.begin_round({offer("a", 64u << 20)}).ok());
    rounds::assignment& fa = f.assignments()[0];
    auto c = claim_for(f, fa);
    bc.spoil(c);
    auto r = f.announce(fa, c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == bc.code);
    CHECK_MESSAGE(r.error().message.find(bc.words) != std::string::npos, r.error().message);
    CHECK(fa.state == rounds::assignment_state::rejected);
    CHECK(fa.reason.code == bc.code);
    CHECK(f.all_reported());
  }
}

TEST_CASE("engine: its error codes have stable names, the first and the last") {
  CHECK(core::error_name(rounds::errc::no_devices) == "rounds.no_devices");
  CHECK(core::error_name(rounds::errc::illegal_transition) == "rounds.illegal_transition");
  CHECK(core::error_name(rounds::errc::privacy_budget) == "rounds.privacy_budget");
}

TEST_CASE("engine: events that do not fit the state are refused and change nothing") {
  auto e = engine_for(config());
  REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
  rounds::assignment& a = e.assignments()[0];
  auto early = e.downloaded(a);  // never sent
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code == rounds::errc::illegal_transition);
  CHECK(a.state == rounds::assignment_state::assigned);
  std::vector<std::byte> blob(a.blob_bytes);
  auto unannounced = e.receive(a, blob);
  REQUIRE_FALSE(unannounced.ok());
  CHECK(unannounced.error().code == rounds::errc::illegal_transition);
  e.refuse(a, "over budget");
  CHECK(a.state == rounds::assignment_state::refused);
  CHECK(a.reason.message == "over budget");
  CHECK_FALSE(e.sent(a).ok());  // refused is final
  e.reject(a, core::make_error(core::errc::invalid_argument, "late"));
  CHECK(a.state == rounds::assignment_state::refused);
}

TEST_CASE("engine: a blob with a NaN is rejected and changes nothing; a straggler's neurons keep their values") {
  const auto c = config();
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20), offer("c", 64u << 20)}).ok());
  auto as = e.assignments();
  // a: trains (every value +1); b: sends a NaN; c: downloads and never reports.
  const std::vector<float> va = train_and_report(e, as[0], 1.0f, 80);
  REQUIRE(e.sent(as[1]).ok());
  REQUIRE(e.announce(as[1], claim_for(e, as[1])).ok());  // an update may follow a download whose last ACK was lost
  std::vector<float> vb(core::param_count(as[1].sub.arch), 0.25f);
  auto blob_b = encoded(as[1], vb);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(blob_b.data() + 8, &nan, sizeof nan);
  auto refused = e.receive(as[1], blob_b);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == rounds::errc::bad_values);
  CHECK(refused.error().message.find("finite") != std::string::npos);
  CHECK(as[1].state == rounds::assignment_state::rejected);
  REQUIRE(e.sent(as[2]).ok());
  CHECK_FALSE(e.all_reported());
  std::vector<float> c_before(core::param_count(as[2].sub.arch));
  core::gather(e.full(), as[2].sub, before, c_before);
  const core::subnet sub_a = as[0].sub, sub_c = as[2].sub;

  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(m.value().round == 1);
  CHECK(e.last_faults().stragglers == 1);
  CHECK(e.last_faults().rejected == 1);
  CHECK(e.last_faults().refused == 0);
  CHECK(e.assignments()[2].state == rounds::assignment_state::straggler);
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

TEST_CASE("engine: a round no update reached does not count; the same round runs again") {
  const auto c = config({{"server_optimizer", {{"kind", "momentum"}, {"lr", 1.0}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
  auto as = e.assignments();
  e.refuse(as[0], "its policy says no");
  REQUIRE(e.sent(as[1]).ok());  // b downloads and never reports
  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(e.last_faults().untrained);
  CHECK(e.last_faults().why_untrained == "a refused: its policy says no; b straggler");
  CHECK(e.completed() == 0);
  CHECK(e.current_round() == 1);
  CHECK_FALSE(e.in_round());
  CHECK(std::equal(before.begin(), before.end(), e.params().begin(), e.params().end()));  // no server step either

  // The round runs again, and counts once an update reaches the model.
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
  as = e.assignments();
  (void)train_and_report(e, as[0], 1.0f, 80);
  REQUIRE(e.sent(as[1]).ok());
  m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK_FALSE(e.last_faults().untrained);
  CHECK(m.value().round == 1);
  CHECK(e.completed() == 1);
}

TEST_CASE("engine: a run every device refuses ends after k_refused_rounds_limit rounds, naming them; stragglers do not end it") {
  const auto c = config({{"rounds", 50}});
  auto e = engine_for(c);
  const auto refuse_all = [&e] {
    REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
    auto as = e.assignments();
    e.refuse(as[0], "rounds in the clear are refused");
    e.reject(as[1], core::make_error(core::errc::invalid_argument, "a NaN"));
    return e.close_round(nullptr);
  };
  // Stragglers (a fleet that dropped off) break the streak: many rounds of them never end the run.
  for (std::size_t i = 0; i + 1 < rounds::k_refused_rounds_limit; ++i) REQUIRE(refuse_all().ok());
  for (int i = 0; i < 10; ++i) {
    REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
    REQUIRE(e.sent(e.assignments()[0]).ok());
    REQUIRE(e.close_round(nullptr).ok());
    CHECK(e.last_faults().untrained);
  }
  for (std::size_t i = 0; i + 1 < rounds::k_refused_rounds_limit; ++i) REQUIRE(refuse_all().ok());
  // A fleet of three of which two were asked (max_devices): the third might train, so no end.
  e.set_population(3);
  for (int i = 0; i < 5; ++i) REQUIRE(refuse_all().ok());
  e.set_population(2);
  for (std::size_t i = 0; i + 1 < rounds::k_refused_rounds_limit; ++i) REQUIRE(refuse_all().ok());
  const auto last = refuse_all();
  REQUIRE_FALSE(last.ok());
  CHECK(last.error().code == rounds::errc::nobody_trains);
  CHECK(last.error().message.find("every device refused round 1") != std::string::npos);
  CHECK(last.error().message.find("a refused: rounds in the clear are refused; b rejected: a NaN") != std::string::npos);
  CHECK(e.completed() == 0);
  CHECK_FALSE(e.in_round());  // the failed round is closed: the run can be inspected, or stopped
}

TEST_CASE("engine: the model does not depend on the order in which uploads arrive") {
  const auto c = config({{"strategy", "fedavg"}});
  const std::uint64_t examples[] = {30, 50, 70, 10};
  const float deltas[] = {0.1f, -0.3f, 0.7f, 0.05f};
  auto run = [&](std::vector<std::size_t> arrival) {
    auto e = engine_for(c);
    REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20), offer("c", 64u << 20), offer("d", 64u << 20)}).ok());
    for (std::size_t i : arrival) train_and_report(e, e.assignments()[i], deltas[i], examples[i]);
    REQUIRE(e.close_round(nullptr).ok());
    return std::vector<float>(e.params().begin(), e.params().end());
  };
  const auto in_order = run({0, 1, 2, 3});
  CHECK(run({3, 2, 1, 0}) == in_order);  // bitwise: the sums are taken in device order either way
  CHECK(run({2, 0, 3, 1}) == in_order);
}

TEST_CASE("engine: the plan of round r is drawn from the run's seed and r") {
  auto e = engine_for(config({{"seed", 11}}));
  REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
  const std::uint64_t first = e.plan_seed();
  CHECK(first == core::plan_seed(11, 0));
  close_counted(e);
  REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
  CHECK(e.plan_seed() != first);
  CHECK(e.plan_seed() == core::plan_seed(11, 1));
}

TEST_CASE("engine: repartition_every keeps one cut for a span of rounds; the next span cuts anew") {
  auto e = engine_for(config({{"seed", 11}, {"rounds", 5}, {"repartition_every", 2}}));
  std::vector<std::uint64_t> seeds;
  std::vector<std::vector<std::int32_t>> first_neurons;
  for (int r = 0; r < 5; ++r) {
    REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
    seeds.push_back(e.plan_seed());
    first_neurons.push_back(e.assignments()[0].sub.neurons[0]);
    close_counted(e);
  }
  CHECK(seeds[0] == core::plan_seed(11, 0));
  CHECK(seeds[1] == seeds[0]);
  CHECK(first_neurons[1] == first_neurons[0]);  // the same neurons to the same device
  CHECK(seeds[2] == core::plan_seed(11, 1));
  CHECK(seeds[3] == seeds[2]);
  CHECK(first_neurons[2] != first_neurons[0]);
  CHECK(seeds[4] == core::plan_seed(11, 2));
}

TEST_CASE("engine: whole_model_rounds end the run with the whole model on the devices whose budget holds it") {
  const auto c = config({{"rounds", 3}, {"whole_model_rounds", 1}});
  const std::size_t full = core::bytes_needed(c.model.full_arch(), c.batch, true, core::codec_kind::f32);
  auto e = engine_for(c);
  const auto fleet = [&] { return std::vector{offer("big", 64u << 20), offer("big2", 64u << 20), offer("small", full / 3)}; };
  for (int r = 0; r < 2; ++r) {  // IST rounds: every device, in groups
    auto excluded = e.begin_round(fleet());
    REQUIRE(excluded.ok());
    CHECK(excluded.value().empty());
    CHECK(e.assignments().size() == 3);
    CHECK(e.assignments()[0].sub.arch.widths[1] < 256);
    close_counted(e);
  }
  auto excluded = e.begin_round(fleet());  // the last round: the whole model, on the two that hold it
  REQUIRE(excluded.ok());
  REQUIRE(excluded.value().size() == 1);
  CHECK(excluded.value()[0].id == "small");
  CHECK(testing::contains(excluded.value()[0].reason, "whole_model_rounds"));
  REQUIRE(e.assignments().size() == 2);
  std::vector<float> before(e.params().begin(), e.params().end());
  for (auto& a : e.assignments()) {
    CHECK(a.sub.arch.widths == c.model.full_arch().widths);
    train_and_report(e, a, 1.0f, 80);
  }
  REQUIRE(e.close_round(nullptr).ok());
  for (std::size_t i = 0; i < before.size(); i += 97) CHECK(e.params()[i] == doctest::Approx(before[i] + 1.0f));

  // Nobody holds the whole model: the round stays an IST round.
  auto e2 = engine_for(config({{"rounds", 2}, {"whole_model_rounds", 2}}));
  auto ex2 = e2.begin_round({offer("a", full / 3), offer("b", full / 3)});
  REQUIRE(ex2.ok());
  CHECK(ex2.value().empty());
  CHECK(e2.assignments().size() == 2);
  CHECK(e2.assignments()[0].group != e2.assignments()[1].group);
  // ... and the driver is told, once a run, so that an operator does not take it for a whole-model round.
  const auto notes = e2.take_notes();
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "round 1 is one of the last 2 (whole_model_rounds), but no device of this round holds the whole model, which needs " +
                        core::mib_text(e2.whole_model_bytes()) + ": such rounds train subnets until one does");
  close_counted(e2);
  REQUIRE(e2.begin_round({offer("a", full / 3), offer("b", full / 3)}).ok());  // the second such round: nothing new to say
  CHECK(e2.assignments()[0].group != e2.assignments()[1].group);
  CHECK(e2.take_notes().empty());
  // The first engine's rounds held it or were not among the last: nothing to say.
  CHECK(e.take_notes().empty());
}

TEST_CASE("engine: a round no device can take part in says why for the first few devices") {
  auto e = engine_for(config({{"strategy", "fedavg"}}));
  auto empty = offer("e", 64u << 20);
  empty.examples = 0;
  const auto r = e.begin_round({offer("a", 1000), offer("b", 1000), offer("c", 1000), offer("d", 1000), empty});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == rounds::errc::no_devices);
  CAPTURE(r.error().message);
  CHECK(r.error().message.starts_with("no device can take part in this round (a: FedAvg trains the whole model, which needs "));
  CHECK(testing::contains(r.error().message, "; the budget is 1000 bytes; b: "));
  CHECK(r.error().message.ends_with("; and 2 more)"));  // d's budget, and e holds no examples
}

TEST_CASE("plan notes: an IST run whose every round trains the whole model says so at start") {
  // The shipped examples end with 20 whole-model rounds: a 5-round run of them is FedAvg throughout.
  const auto covered = rounds::plan_notes(config({{"rounds", 5}, {"whole_model_rounds", 20}}));
  REQUIRE(covered.size() == 1);
  CHECK(covered[0] == "every round of this run trains the whole model (whole_model_rounds 20 covers its 5 rounds): it is FedAvg on the "
                      "devices that hold the model, not IST; lower whole_model_rounds below rounds to train subnets");
  CHECK(rounds::plan_notes(config({{"rounds", 50}, {"whole_model_rounds", 20}})).empty());
  CHECK(rounds::plan_notes(config({{"rounds", 5}})).empty());
  const auto one = rounds::plan_notes(config({{"groups", 1}}));
  REQUIRE(one.size() == 1);
  CHECK(testing::contains(one[0], "IST with groups 1 gives its one group the whole model"));
  CHECK(rounds::plan_notes(config({{"strategy", "fedavg"}, {"groups", 1}})).empty());
}

TEST_CASE("engine: cut rolling moves each device's windows by one neuron per span; refused where nothing is cut") {
  auto e = engine_for(config({{"seed", 11}, {"rounds", 5}, {"repartition_every", 2}, {"cut", "rolling"}}));
  std::vector<std::vector<std::int32_t>> first_neurons;
  for (int r = 0; r < 5; ++r) {
    REQUIRE(e.begin_round({offer("d0", 64u << 20), offer("d1", 64u << 20)}).ok());
    first_neurons.push_back(e.assignments()[0].sub.neurons[0]);
    close_counted(e);
  }
  // Spans of two rounds: cuts 0, 0, 1, 1, 2. Device d0's window of layer 1 starts at the cut's index.
  const auto shifted = [](std::vector<std::int32_t> w, std::int32_t by, std::int32_t n) {
    for (auto& v : w) v = (v + by) % n;
    std::sort(w.begin(), w.end());
    return w;
  };
  const auto n = static_cast<std::int32_t>(e.full_arch().widths[1]);
  CHECK(first_neurons[0].front() == 0);
  CHECK(first_neurons[1] == first_neurons[0]);
  CHECK(first_neurons[2] == shifted(first_neurons[0], 1, n));
  CHECK(first_neurons[3] == first_neurons[2]);
  CHECK(first_neurons[4] == shifted(first_neurons[0], 2, n));
  CHECK(config({{"cut", "rolling"}}).cut == core::cut_kind::rolling);
  CHECK(config().cut == core::cut_kind::random);
  CHECK(testing::contains(refused({{"strategy", "fedavg"}, {"cut", "rolling"}}), "only IST and SLT cut the model"));
  CHECK(testing::contains(refused({{"cut", "sideways"}}), "cut"));
}

TEST_CASE("engine: repartition_every and whole_model_rounds are IST's, for plain rounds, and refused elsewhere by name unless neutral") {
  CHECK(testing::contains(refused({{"strategy", "fedavg"}, {"whole_model_rounds", 5}}), "whole_model_rounds"));
  CHECK(testing::contains(refused({{"strategy", "central"}, {"repartition_every", 2}}), "repartition_every"));
  CHECK(testing::contains(refused({{"repartition_every", 0}}), "repartition_every"));
  CHECK(testing::contains(refused({{"whole_model_rounds", 2}, {"secure_aggregation", {{"replication", 2}}}}), "whole_model_rounds"));
  CHECK(testing::contains(refused({{"whole_model_rounds", 2}, {"dp", {{"noise_multiplier", 1.0}}}}), "whole_model_rounds"));
  // Their neutral values change nothing and pass, so an IST file (examples/) runs as FedAvg, or with
  // secure aggregation, by overriding them; the refusals say which value that is.
  CHECK(config({{"strategy", "fedavg"}, {"repartition_every", 1}, {"whole_model_rounds", 0}}).strategy == rounds::strategy_kind::fedavg);
  CHECK(config({{"whole_model_rounds", 0}, {"secure_aggregation", {{"replication", 2}}}}).secure_aggregation.enabled);
  CHECK(testing::contains(refused({{"strategy", "fedavg"}, {"repartition_every", 20}}), "set it to 1 or leave it out"));
  CHECK(testing::contains(refused({{"whole_model_rounds", 2}, {"dp", {{"noise_multiplier", 1.0}}}}), "set it to 0"));
  // Under DP a kept cut would have no effect (each device's group comes from its own key): refused too.
  CHECK(testing::contains(refused({{"repartition_every", 20}, {"dp", {{"noise_multiplier", 1.0}}}}), "set it to 1"));
  CHECK(config({{"repartition_every", 1}, {"dp", {{"noise_multiplier", 1.0}}}}).dp.enabled);
  // Secure aggregation keeps the cut: its groups are cut as in plain rounds, then replicated.
  CHECK(config({{"repartition_every", 20}, {"secure_aggregation", {{"replication", 2}}}}).repartition_every == 20);
  CHECK(config().repartition_every == 1);
  CHECK(config().whole_model_rounds == 0);
}

TEST_CASE("engine: early stopping counts evaluations without a new best, for accuracy and for regression's loss") {
  // A validation set the model cannot improve on (its device sends it back unchanged): the first evaluation sets the best,
  // the next `patience` ones do not beat it, and the run stops.
  for (const char* task : {"classification", "regression"}) {
    INFO(task);
    const bool regression = std::string(task) == "regression";
    auto c = config({{"rounds", 10}, {"patience", 2},
                     {"model", {{"inputs", 4}, {"hidden", {16}}, {"outputs", regression ? 1 : 2}, {"task", task}}}});
    auto e = engine_for(c);
    std::vector<float> x(8 * 4, 0.5f), y(8, 1.0f);
    core::memory_table validation(4, std::move(x), std::move(y), "validation");
    for (int round = 1; round <= 3; ++round) {
      REQUIRE_FALSE(e.finished());
      REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
      (void)train_and_report(e, e.assignments()[0], 0.0f, 8);  // sent back unchanged: the model stays
      auto m = e.close_round(&validation);
      REQUIRE(m.ok());
      CHECK(m.value().test_loss.has_value());
      CHECK(m.value().test_accuracy.has_value() == !regression);
    }
    CHECK(e.stopping().have_best);
    CHECK(e.stopping().evals_since_best == 2);
    CHECK(e.finished());
    CHECK(e.completed() == 3);
    if (regression) CHECK(e.stopping().best_score < 0);  // −loss
  }
}

TEST_CASE("engine: devices evaluate the model when their budget holds it for inference; the others are named once") {
  auto c = config({{"rounds", 4}, {"eval_every", 2}});
  auto e = engine_for(c);
  const std::size_t need = core::inference_bytes(c.model.full_arch(), c.batch, core::codec_kind::f32);
  auto with = [](rounds::device_offer o, std::uint64_t validation) {
    o.validation_examples = validation;
    return o;
  };
  std::vector<rounds::excluded_device> excluded;
  const auto evaluators = e.plan_evaluation({with(offer("device-10", 64u << 20), 50), with(offer("device-2", need), 30),
                                             with(offer("device-3", need - 1), 30), with(offer("device-4", 64u << 20), 0)},
                                            excluded)
                              .value();
  REQUIRE(evaluators.size() == 2);
  CHECK(evaluators[0].id == "device-2");  // natural order, and a budget of exactly the need is enough
  CHECK(evaluators[1].id == "device-10");
  CHECK(evaluators[0].blob_bytes == core::encoded_bytes(c.model.full_arch(), core::codec_kind::f32));
  REQUIRE(excluded.size() == 1);  // no validation examples: left out without a word
  CHECK(excluded[0].id == "device-3");
  CHECK(excluded[0].reason.find("scoring the whole model needs") != std::string::npos);
  // Due after every eval_every-th round and after the last.
  std::vector<bool> due;
  while (!e.finished()) {
    REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
    (void)train_and_report(e, e.assignments()[0], 0.0f, 8);  // sent back unchanged: the model stays
    REQUIRE(e.close_round(nullptr).ok());
    due.push_back(e.evaluation_due());
  }
  CHECK(due == std::vector<bool>{false, true, false, true});
}

TEST_CASE("federated scores: example-weighted, summed in natural order of the ids, with the devices' spread") {
  rounds::federated_scores s;
  s.add({.id = "device-10", .examples = 100, .loss_sum = 50.0, .correct = 90});
  s.add({.id = "device-2", .examples = 50, .loss_sum = 40.0, .correct = 25});
  s.add({.id = "device-3", .examples = 0, .loss_sum = 0.0, .correct = 0});  // nothing to count: left out
  s.add({.id = "device-1", .examples = 50, .loss_sum = 10.0, .correct = 40});
  rounds::round_metrics m;
  s.fill(m, /*classification=*/true);
  REQUIRE(m.fed.devices.has_value());
  CHECK(*m.fed.devices == 3);
  CHECK(*m.fed.examples == 200);
  CHECK(*m.fed.accuracy == doctest::Approx(155.0 / 200.0));
  CHECK(*m.fed.loss == doctest::Approx(100.0 / 200.0));
  CHECK(*m.fed.accuracy_min == doctest::Approx(0.5));
  CHECK(*m.fed.accuracy_median == doctest::Approx(0.8));
  CHECK(*m.fed.accuracy_max == doctest::Approx(0.9));
  const auto j = m.to_json();
  CHECK(j.at("fed_devices") == 3);
  CHECK(j.at("fed_accuracy").get<double>() == doctest::Approx(0.775));
  CHECK(m.to_line().find("fed 77.50% on 3 devices (50.0-90.0%)") != std::string::npos);
  // The order of arrival does not change a bit of the sums.
  rounds::federated_scores t;
  t.add({.id = "device-1", .examples = 50, .loss_sum = 10.0, .correct = 40});
  t.add({.id = "device-2", .examples = 50, .loss_sum = 40.0, .correct = 25});
  t.add({.id = "device-10", .examples = 100, .loss_sum = 50.0, .correct = 90});
  rounds::round_metrics n;
  t.fill(n, true);
  CHECK(*n.fed.loss == *m.fed.loss);
  // Regression: a loss, no accuracies; no scores at all: no figures.
  rounds::round_metrics r;
  t.fill(r, false);
  CHECK(r.fed.loss.has_value());
  CHECK_FALSE(r.fed.accuracy.has_value());
  CHECK(r.to_line().find("fed loss") != std::string::npos);
  rounds::round_metrics none;
  rounds::federated_scores().fill(none, true);
  CHECK_FALSE(none.fed.devices.has_value());
  CHECK_FALSE(none.to_json().contains("fed_accuracy"));
}

TEST_CASE("engine: patience can watch the devices' evaluation, with or without a validation set at the hub") {
  std::vector<float> x(8 * 64, 0.5f), y(8, 1.0f);
  core::memory_table validation(64, std::move(x), std::move(y), "validation");
  // Rising hub accuracy never stops a run that watches the devices' flat score, and the other way round.
  for (const char* on : {"federated", "validation", "auto"}) {
    INFO(on);
    auto e = engine_for(config({{"rounds", 10}, {"patience", 2}, {"patience_on", on}}));
    for (int round = 1; round <= 3; ++round) {
      REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
      (void)train_and_report(e, e.assignments()[0], 0.0f, 8);  // sent back unchanged: the model stays
      auto m = e.close_round(std::string(on) == "federated" ? nullptr : &validation);
      REQUIRE(m.ok());
      rounds::federated_scores s;
      s.add({.id = "a", .examples = 10, .loss_sum = 5.0, .correct = 5});
      e.note_federated(s, m.value());
      CHECK(m.value().fed.accuracy.has_value());
    }
    // Three evaluations of a model nobody changes: no new best after the first, whichever figure counts.
    CHECK(e.stopping().evals_since_best == 2);
    CHECK(e.finished());
  }
  // auto without a validation set at the hub: the devices' figure counts.
  auto e = engine_for(config({{"rounds", 10}, {"patience", 1}}));
  double accuracy = 0.1;
  for (int round = 1; round <= 4; ++round) {
    REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
    (void)train_and_report(e, e.assignments()[0], 0.0f, 8);  // sent back unchanged: the model stays
    auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    rounds::federated_scores s;
    accuracy += 0.2;  // better every time: never stops
    s.add({.id = "a", .examples = 10, .loss_sum = 5.0, .correct = static_cast<std::int64_t>(accuracy * 10)});
    e.note_federated(s, m.value());
  }
  CHECK_FALSE(e.finished());
  CHECK(e.stopping().have_best);
  CHECK(e.stopping().best_score == doctest::Approx(0.9));
}

// ---- secure aggregation ----

namespace {

// A device's secure upload in the clear (as tessera-sim adds it): every trained value is the received
// one plus `delta`.
void secure_report(rounds::engine& e, rounds::assignment& a, float delta) {
  std::vector<std::byte> down(a.blob_bytes);
  REQUIRE(e.encode_download(a, down).ok());
  REQUIRE(e.sent(a).ok());
  REQUIRE(e.downloaded(a).ok());
  std::vector<float> received(core::param_count(a.sub.arch)), trained;
  REQUIRE(core::decode(a.sub.arch, a.codec, down, received).ok());
  trained = received;
  for (auto& v : trained) v += delta;
  const auto examples = static_cast<std::uint64_t>(a.task.steps * a.task.batch);
  auto input = crypto::secagg_weighted_input(received, trained, rounds::engine::secure_weight(a, examples), e.secagg_params(), a.segments);
  REQUIRE(input.ok());
  auto enc = crypto::secagg_encode(e.secagg_params(), e.assignments().size(), a.segments, input.value(), a.rounding_key);
  REQUIRE(enc.ok());
  auto claim = claim_for(e, a, examples);
  claim.size = a.upload_bytes;
  claim.clipped = enc.value().clipped;
  REQUIRE(e.announce(a, claim).ok());
  REQUIRE(e.receive_encoded(a, enc.value()).ok());
}

std::vector<rounds::device_offer> fleet(std::size_t n) {
  std::vector<rounds::device_offer> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(offer("d" + std::to_string(i), 64u << 20));
  return out;
}

// A closed round: its assignments (the engine's, valid until it begins the next) and its metrics.
struct closed_round {
  std::span<const rounds::assignment> assignments;
  rounds::round_metrics metrics;
};

// The secure round of the tests below, on an engine with replication 3: six devices in two groups of
// three; group 0's change every value by +0.01, +0.02 and +0.03 (mean 0.02), group 1's by +0.5, but
// its third leaves before it reports, so only two of group 1 do.
closed_round secure_round_with_group1_short(rounds::engine& e) {
  REQUIRE(e.begin_round(fleet(6)).ok());
  std::size_t in_group1 = 0;
  float d0 = 0.01f;
  for (auto& a : e.assignments()) {
    if (a.group == 1 && ++in_group1 == 3) {
      e.refuse(a, "no longer on the network");
      continue;
    }
    secure_report(e, a, a.group == 0 ? d0 : 0.5f);
    if (a.group == 0) d0 += 0.01f;
  }
  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  return {e.assignments(), std::move(m).value()};
}

}  // namespace

TEST_CASE("engine: a secure round whose sums are all withheld does not count either") {
  // Group 0 and group 1 each get one masked upload of three: below every sum's minimum, nothing is
  // released, and the model did not change.
  auto e = engine_for(config({{"secure_aggregation", {{"replication", 3}}}}));
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(6)).ok());
  std::set<std::size_t> reported;
  for (auto& a : e.assignments()) {
    if (reported.insert(a.group).second) secure_report(e, a, 0.5f);
    else e.refuse(a, "no longer on the network");
  }
  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(e.last_faults().untrained);
  CAPTURE(e.last_faults().why_untrained);
  CHECK(testing::contains(e.last_faults().why_untrained, "group 0: 1 contributor, below the threshold 3"));
  CHECK(e.completed() == 0);
  CHECK_FALSE(e.in_round());
  CHECK(std::equal(before.begin(), before.end(), e.params().begin(), e.params().end()));
}

TEST_CASE("engine: under secure aggregation a device without the run's codec sits out, with the reason") {
  // A group's devices compare the digests of the models they were sent: one codec for all of them.
  auto e = engine_for(config({{"strategy", "fedavg"}, {"codec", "q8"}, {"secure_aggregation", {{"replication", 3}}}}));
  const std::vector<core::codec_kind> both{core::codec_kind::f32, core::codec_kind::q8};
  const auto excluded = e.begin_round({offer("a", 64u << 20, both), offer("b", 64u << 20, both), offer("c", 64u << 20, both),
                                       offer("d", 64u << 20)});
  REQUIRE(excluded.ok());
  REQUIRE(excluded.value().size() == 1);
  CHECK(excluded.value()[0].id == "d");
  CHECK(excluded.value()[0].reason == "under secure aggregation every device is sent the model as q8, which it does not take (its 'codecs')");
  REQUIRE(e.assignments().size() == 3);
  for (const auto& a : e.assignments()) CHECK(a.codec == core::codec_kind::q8);
}

TEST_CASE("engine: secure aggregation replicates every IST group and cuts the upload into segments") {
  auto e = engine_for(config({{"secure_aggregation", {{"replication", 3}}}}));
  REQUIRE(e.begin_round(fleet(7)).ok());
  const auto as = e.assignments();
  REQUIRE(as.size() == 7);
  const auto& p = e.secagg_params();
  REQUIRE(p.segments.size() == 3);  // two groups (7 / 3) and the output bias
  CHECK(p.segments[2].length == 11);
  CHECK(p.threshold == 4);          // a majority of the seven
  std::map<std::size_t, int> members;
  for (const auto& a : as) {
    ++members[a.group];
    REQUIRE(a.segments == std::vector<std::uint32_t>{static_cast<std::uint32_t>(a.group), 2u});
    CHECK(p.segments[a.group].length == core::param_count(a.sub.arch) - 10 + 1);
    CHECK(a.upload_bytes == (p.segments[a.group].length + 11) * 4);
    CHECK(p.segments[a.group].min_aggregate == 3);
  }
  CHECK(members.size() == 2);
  for (const auto& [g, n] : members) CHECK(n >= 3);
  CHECK(as[0].rounding_key != as[1].rounding_key);

  // FedAvg: one segment, the whole model.
  auto f = engine_for(config({{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}}}}));
  REQUIRE(f.begin_round(fleet(3)).ok());
  REQUIRE(f.secagg_params().segments.size() == 1);
  CHECK(f.secagg_params().segments[0].length == core::param_count(f.full()) + 1);
  CHECK(f.secagg_params().neighbors == 64);

  // Beyond neighbors + 1 devices a secret needs a majority of its holders: a device's ring neighbours,
  // its group's other devices (IST: 3 groups of 3 here) and itself.
  auto g = engine_for(config({{"secure_aggregation", {{"replication", 3}, {"neighbors", 4}}}}));
  REQUIRE(g.begin_round(fleet(9)).ok());
  CHECK(g.secagg_params().neighbors == 4);
  CHECK(g.secagg_params().threshold == 4);  // of up to 4 + 2 + 1 = 7 holders
  auto h = engine_for(config({{"secure_aggregation", {{"replication", 3}, {"neighbors", 5}}}}));
  REQUIRE(h.begin_round(fleet(9)).ok());
  CHECK(h.secagg_params().threshold == 5);  // 5 rounds up to 6 ring neighbours: up to 6 + 2 + 1 = 9 holders
  auto ring_only = engine_for(config({{"strategy", "fedavg"}, {"secure_aggregation", {{"replication", 3}, {"neighbors", 4}}}}));
  REQUIRE(ring_only.begin_round(fleet(9)).ok());
  CHECK(ring_only.secagg_params().threshold == 3);  // FedAvg: one segment, its ring only: 5 holders
  auto all = engine_for(config({{"secure_aggregation", {{"replication", 3}, {"neighbors", 8}}}}));
  REQUIRE(all.begin_round(fleet(9)).ok());
  CHECK(all.secagg_params().threshold == 5);  // 9 devices, every one every other's neighbour
}

TEST_CASE("engine: secure aggregation refuses a fleet too small to replicate, naming the numbers") {
  auto e = engine_for(config({{"secure_aggregation", {{"replication", 3}}}}));
  auto r = e.begin_round(fleet(2));
  REQUIRE(!r.ok());
  CHECK(r.error().code == rounds::errc::fleet_too_small);
  CHECK(r.error().message.find("3") != std::string::npos);
  CHECK(r.error().message.find("2 devices can take part") != std::string::npos);
  // A threshold above the replication could never release a group: a configuration error.
  CHECK(testing::contains(refused({{"secure_aggregation", {{"replication", 2}, {"threshold", 3}}}}), "secure_aggregation.threshold"));
  // One neighbour cannot connect anyone.
  CHECK(testing::contains(refused({{"secure_aggregation", {{"neighbors", 1}}}}), "secure_aggregation.neighbors"));
}

TEST_CASE("engine: a secure round applies the mean change of every released group; a group below the threshold keeps its values") {
  auto c = config({{"secure_aggregation", {{"replication", 3}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  const auto [as, m] = secure_round_with_group1_short(e);
  CHECK(m.secagg.dropped == 1u);
  CHECK(m.secagg.withheld == 1u);
  CHECK(e.last_secure().clipped == 0u);
  CHECK(e.last_secure().withheld.find("group 1: 2 contributors, below the threshold 3") != std::string::npos);

  const auto& full = e.full();
  const auto after = e.params();
  // Group 0's subnet moved by the mean, 0.02 (within the quantization: far below 1e-6); group 1's kept
  // its values, except the output bias, which all five reporting devices share.
  const std::size_t bias = core::param_slots(full).back().bias;
  for (const auto& a : as) {
    const std::vector<float> was = gathered(full, a.sub, before), now = gathered(full, a.sub, after);
    for (std::size_t i = 0; i + 10 < was.size(); ++i) {
      if (a.group == 0) REQUIRE(std::abs(now[i] - was[i] - 0.02f) < 1e-6f);
      else REQUIRE(now[i] == was[i]);
    }
  }
  // The output bias: the mean over the five of 0.01, 0.02, 0.03, 0.5, 0.5 = 0.212.
  for (std::size_t i = 0; i < 10; ++i) CHECK(std::abs(after[bias + i] - before[bias + i] - 0.212f) < 1e-6f);
}

TEST_CASE("engine: a secure update of the wrong size is rejected") {
  auto e = engine_for(config({{"secure_aggregation", {{"replication", 2}}}}));
  REQUIRE(e.begin_round(fleet(2)).ok());
  auto& a = e.assignments()[0];
  REQUIRE(e.sent(a).ok());
  REQUIRE(e.downloaded(a).ok());
  auto r = e.announce(a, claim_for(e, a));  // the subnet's size, not the masked input's
  REQUIRE(!r.ok());
  CHECK(r.error().code == rounds::errc::size_mismatch);
  CHECK(r.error().message.find("masked input") != std::string::npos);
  CHECK(a.state == rounds::assignment_state::rejected);
}

TEST_CASE("engine: a change beyond the clip is clipped, counted where the devices are the engine's own, and applied at the clip") {
  auto e = engine_for(config({{"secure_aggregation", {{"replication", 2}, {"clip", 0.1}}}}));
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet(2)).ok());
  auto as = e.assignments();
  for (auto& a : as) secure_report(e, a, 0.25f);
  const std::uint64_t values = core::param_count(as[0].sub.arch);  // every value but the two weights
  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  // The simulator's devices are its own: it may count their clipped values. A hub is never told them,
  // and the round's figures do not carry them.
  CHECK(e.last_secure().clipped == 2 * values);
  CHECK(m.value().secagg.withheld == 0u);
  CHECK_FALSE(m.value().to_json().contains("secagg_clipped"));
  CHECK(m.value().to_line().find("clipped") == std::string::npos);
  const auto after = e.params();
  for (std::size_t i = 0; i < after.size(); ++i)
    if (after[i] != before[i]) REQUIRE(std::abs(after[i] - before[i] - 0.1f) < 1e-6f);
}

TEST_CASE("engine bounds: a change past max_update_norm or max_update_abs is rejected with its figures, or clipped and counted") {
  // Two FedAvg devices: one honest (a small change), one sending 1e30 everywhere and 3e38 in the output
  // bias — finite, the right size and digest, and useless.
  const auto run = [](const std::string& mode) {
    auto e = engine_for(config({{"strategy", "fedavg"}, {"update_bound", mode}}));
    const std::vector<float> before(e.params().begin(), e.params().end());
    REQUIRE(e.begin_round({offer("honest", 64u << 20), offer("rogue", 64u << 20)}).ok());
    train_and_report(e, e.assignments()[0], 0.001f, 80);
    auto& a = e.assignments()[1];
    std::vector<float> values = download(e, a);
    std::fill(values.begin(), values.end(), 1e30f);
    const std::size_t bias = core::param_slots(a.sub.arch).back().bias;
    for (std::size_t i = bias; i < values.size(); ++i) values[i] = 3e38f;
    REQUIRE(e.announce(a, claim_for(e, a, 80)).ok());
    const auto got = e.receive(a, encoded(a, values));
    const auto m = e.close_round(nullptr);
    REQUIRE(m.ok());
    return std::tuple(got, m.value(), before, std::vector<float>(e.params().begin(), e.params().end()));
  };
  SUBCASE("reject: the rogue's update is out, the model is the honest device's") {
    const auto [got, m, before, after] = run("reject");
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().code == rounds::errc::update_out_of_bounds);
    CHECK(got.error().message.find("L2 norm") != std::string::npos);
    CHECK(got.error().message.find("max_update_norm") != std::string::npos);
    CHECK(m.rejected.value_or(0) == 0);  // the engine counts; the hub's faults carry it
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(std::abs(after[i] - before[i] - 0.001f) < 1e-6f);
    CHECK(*m.update_norm_max == doctest::Approx(0.001 * std::sqrt(static_cast<double>(before.size()))).epsilon(1e-3));
    CHECK(*m.updates_bounded == 0);
  }
  SUBCASE("clip: the rogue's change is scaled to the norm and clamped to the largest value, and counted") {
    const auto [got, m, before, after] = run("clip");
    REQUIRE(got.ok());
    CHECK(*m.updates_bounded == 1);
    double sq = 0, largest = 0;
    for (std::size_t i = 0; i < before.size(); ++i) {
      const double d = static_cast<double>(after[i]) - before[i];
      sq += d * d;
      largest = std::max(largest, std::abs(d));
    }
    // The mean of the honest change and the clipped one: finite, within half the bound and a bit.
    CHECK(std::isfinite(sq));
    CHECK(*m.update_norm_max > 0);
    CHECK(std::sqrt(sq) <= 0.5 * *m.update_norm_max + 0.001 * std::sqrt(static_cast<double>(before.size())) + 1e-3);
    // The default bound at lr 0.05, momentum 0.9: k = 4, times max(1, the largest sent value).
    double sent_largest = 0;
    for (const float v : before) sent_largest = std::max(sent_largest, static_cast<double>(std::abs(v)));
    CHECK(largest <= 0.5 * 4.0 * std::max(1.0, sent_largest) + 0.001 + 1e-4);
    CHECK(largest >= 0.5 * 4.0 * std::max(1.0, sent_largest) - 1e-3);  // the clamp, not less
  }
}

TEST_CASE("engine bounds: explicit bounds apply as given; an honest change within them is untouched") {
  auto e = engine_for(config({{"strategy", "fedavg"}, {"update_bound", "reject"}, {"max_update_norm", 0.5}, {"max_update_abs", 0.01}}));
  REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
  auto& a = e.assignments()[0];
  std::vector<float> values = download(e, a);
  values[7] += 0.02f;  // one value past max_update_abs, the norm well within
  REQUIRE(e.announce(a, claim_for(e, a)).ok());
  const auto got = e.receive(a, encoded(a, values));
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message.find("largest value 0.02") != std::string::npos);
  CHECK(got.error().message.find("(max_update_abs 0.01)") != std::string::npos);
  REQUIRE(e.close_round(nullptr).ok());
  REQUIRE(e.begin_round({offer("a", 64u << 20)}).ok());
  train_and_report(e, e.assignments()[0], 0.001f, 0);
  const auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  CHECK(*m.value().updates_bounded == 0);
}

TEST_CASE("engine robust aggregate: with groups of three, a rogue within the bound moves the median not at all beyond the honest reports") {
  // Six devices, two IST groups of three. In group 0 one device changes every value by 0.049 (within
  // max_update_abs 0.05), the two others by 0.001 and 0.002; group 1's three by 0.001, 0.002, 0.003.
  const auto run = [](const std::string& aggregate) {
    auto e = engine_for(config({{"strategy", "ist"}, {"groups", 2}, {"aggregate", aggregate}, {"update_bound", "reject"},
                                {"max_update_abs", 0.05}, {"max_update_norm", 1000}}));
    const std::vector<float> before(e.params().begin(), e.params().end());
    std::vector<rounds::device_offer> offers;
    for (int d = 0; d < 6; ++d) offers.push_back(offer("d" + std::to_string(d), 64u << 20));
    REQUIRE(e.begin_round(offers).ok());
    std::array<float, 2> next{0.001f, 0.001f};
    std::optional<core::subnet> rogue_group;
    for (auto& a : e.assignments()) {
      if (a.device == "d0") {
        rogue_group = a.sub;
        train_and_report(e, a, 0.049f, 80);
        continue;
      }
      train_and_report(e, a, next[a.group], 80);
      next[a.group] += 0.001f;
    }
    REQUIRE(e.close_round(nullptr).ok());
    REQUIRE(rogue_group.has_value());
    // The change of every value the rogue's group holds but the output bias (the whole fleet's).
    const core::mlp_arch full = e.config().model.full_arch();
    const std::vector<float> was = gathered(full, *rogue_group, before), now = gathered(full, *rogue_group, e.params());
    const std::size_t bias = core::param_slots(rogue_group->arch).back().bias;
    double low = 1e9, high = -1e9;
    for (std::size_t i = 0; i < bias; ++i) {
      const double d = static_cast<double>(now[i]) - was[i];
      low = std::min(low, d);
      high = std::max(high, d);
    }
    const double out_bias = static_cast<double>(now.back()) - was.back();
    return std::tuple(low, high, out_bias);
  };
  const auto [mean_low, mean_high, mean_bias] = run("mean");
  const auto [median_low, median_high, median_bias] = run("median");
  MESSAGE("group 0 moved by " << mean_low << "…" << mean_high << " with the mean, " << median_low << "…" << median_high
                              << " with the median; the output bias by " << mean_bias << " and " << median_bias);
  // The mean: the rogue's 0.049 counts a third, as the bound allows it to.
  CHECK(mean_low == doctest::Approx((0.049 + 0.001 + 0.002) / 3).epsilon(1e-3));
  CHECK(mean_high <= 0.05 / 3 + 0.002 / 3 + 1e-4);
  // The median: the middle honest report, whatever the rogue sent within the bound.
  CHECK(median_low >= 0.001 - 1e-5);
  CHECK(median_high <= 0.002 + 1e-5);
  CHECK(median_bias == doctest::Approx(0.002).epsilon(1e-2));  // of 0.049, 0.001, 0.002, 0.001, 0.002, 0.003
}

TEST_CASE("engine robust aggregate: refused with secure aggregation, with differential privacy, and for central training") {
  const auto refused_median = [](nlohmann::json extra) {
    if (!extra.contains("aggregate")) extra["aggregate"] = "median";  // the robust aggregate, unless the case names one
    return refused(std::move(extra));
  };
  CHECK(refused_median({{"secure_aggregation", {{"enabled", true}}}}).find("aggregate") != std::string::npos);
  CHECK(refused_median({{"dp", {{"enabled", true}, {"noise_multiplier", 1.0}}}}).find("differential privacy") != std::string::npos);
  CHECK(refused_median({{"strategy", "central"}}).find("central") != std::string::npos);
  CHECK(refused_median({{"aggregate", "trimmed_mean"}, {"trim_fraction", 0.5}}).find("trim_fraction") != std::string::npos);
}

namespace {

// Which of `subs` hold each parameter of the full model: bit k of the result is subs[k].
std::vector<unsigned> holders(const core::mlp_arch& full, const std::vector<core::subnet>& subs) {
  std::vector<float> mask(core::param_count(full));
  std::vector<unsigned> out(mask.size(), 0);
  for (std::size_t k = 0; k < subs.size(); ++k) {
    std::fill(mask.begin(), mask.end(), 0.0f);
    const std::vector<float> ones(core::param_count(subs[k].arch), 1.0f);
    core::scatter(full, subs[k], ones, mask);
    for (std::size_t i = 0; i < mask.size(); ++i)
      if (mask[i] != 0.0f) out[i] |= 1u << k;
  }
  return out;
}

}  // namespace

TEST_CASE("engine server optimizer: by default, and with kind none and lr 1, the model is the plain assembly to the bit") {
  const auto run = [](nlohmann::json extra) {
    extra["strategy"] = "ist";
    auto e = engine_for(config(extra));
    CHECK(e.server_optimizer().identity());
    REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20), offer("c", 64u << 20)}).ok());
    train_and_report(e, e.assignments()[0], 0.1f, 30);
    train_and_report(e, e.assignments()[1], -0.2f, 70);
    REQUIRE(e.sent(e.assignments()[2]).ok());  // a straggler
    REQUIRE(e.close_round(nullptr).ok());
    return std::vector<float>(e.params().begin(), e.params().end());
  };
  const auto plain = run(nlohmann::json::object());
  CHECK(run({{"server_optimizer", nlohmann::json::object()}}) == plain);
  CHECK(run({{"server_optimizer", {{"kind", "none"}, {"lr", 1.0}, {"beta1", 0.5}}}}) == plain);
}

TEST_CASE("engine server optimizer: FedAvg with momentum over two rounds, by hand") {
  // Two devices, 20 and 60 examples. Round 1 changes every value by +0.25 and +0.75: Δ = (20·0.25 +
  // 60·0.75) / 80 = 0.625, m = 0.625, x1 = x0 + 0.5·0.625 = x0 + 0.3125. Round 2 by −0.5 each:
  // Δ = −0.5, m = 0.5·0.625 − 0.5 = −0.1875, x2 = x1 − 0.09375 = x0 + 0.21875.
  const auto c = config({{"strategy", "fedavg"}, {"server_optimizer", {{"kind", "momentum"}, {"lr", 0.5}, {"beta1", 0.5}}}});
  auto e = engine_for(c);
  CHECK_FALSE(e.server_optimizer().identity());
  const std::vector<float> x0(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
  train_and_report(e, e.assignments()[0], 0.25f, 20);
  train_and_report(e, e.assignments()[1], 0.75f, 60);
  REQUIRE(e.close_round(nullptr).ok());
  for (std::size_t i = 0; i < x0.size(); ++i) REQUIRE(std::abs(static_cast<double>(e.params()[i]) - x0[i] - 0.3125) < 1e-6);
  for (const float m : e.server_optimizer().state().m) REQUIRE(std::abs(m - 0.625f) < 1e-6f);
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
  train_and_report(e, e.assignments()[0], -0.5f, 20);
  train_and_report(e, e.assignments()[1], -0.5f, 60);
  REQUIRE(e.close_round(nullptr).ok());
  for (std::size_t i = 0; i < x0.size(); ++i) REQUIRE(std::abs(static_cast<double>(e.params()[i]) - x0[i] - 0.21875) < 1e-6);
  for (const float m : e.server_optimizer().state().m) REQUIRE(std::abs(m + 0.1875f) < 1e-6f);
  CHECK(e.server_optimizer().state().steps == 2);
  CHECK(e.server_optimizer().state().v.empty());
}

TEST_CASE("engine server optimizer: IST with adam steps where devices trained; a straggler's blocks and the weights between groups stand still") {
  // Three groups, one device each: a changes its subnet by +0.25, b by +0.5, c never reports. Adam with
  // β1 0.5, β2 0.75, τ 0.5, η 0.1; v starts at τ² = 0.25:
  //   a's blocks  Δ = 0.25: m = 0.125,  v = 0.1875 + 0.25·0.0625   = 0.203125,   step 0.1·m/(√v + τ) = 0.0131482908
  //   b's blocks  Δ = 0.5:  m = 0.25,   v = 0.1875 + 0.25·0.25     = 0.25,       step 0.1·0.25/1       = 0.025
  //   output bias Δ = 0.375 (a and b, 80 examples each): m = 0.1875, v = 0.22265625, step 0.0192928099
  //   c's blocks and the weights joining two groups: no step, m = 0 and v = 0.25 still.
  const auto c = config({{"groups", 3},
                         {"server_optimizer", {{"kind", "adam"}, {"lr", 0.1}, {"beta1", 0.5}, {"beta2", 0.75}, {"epsilon", 0.5}}}});
  auto e = engine_for(c);
  const std::vector<float> x0(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20), offer("c", 64u << 20)}).ok());
  auto as = e.assignments();
  REQUIRE(as.size() == 3);
  const std::vector<unsigned> held = holders(e.full(), {as[0].sub, as[1].sub, as[2].sub});
  train_and_report(e, as[0], 0.25f, 80);
  train_and_report(e, as[1], 0.5f, 80);
  REQUIRE(e.sent(as[2]).ok());
  REQUIRE(e.close_round(nullptr).ok());
  CHECK(e.last_faults().stragglers == 1);

  // The figures above, by which devices hold a coordinate (bit k: device k of a, b, c).
  struct stepped {
    const char* name;
    double step, m, v;
  };
  const std::map<unsigned, stepped> expected = {{0b001, {"a", 0.013148290817867024, 0.125, 0.203125}},
                                                {0b010, {"b", 0.025, 0.25, 0.25}},
                                                {0b111, {"output bias", 0.019292809916967874, 0.1875, 0.22265625}}};
  const auto& st = e.server_optimizer().state();
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < x0.size(); ++i) {
    const double moved = static_cast<double>(e.params()[i]) - x0[i];
    CAPTURE(i);
    if (const auto it = expected.find(held[i]); it != expected.end()) {
      const stepped& want = it->second;
      ++seen[want.name];
      REQUIRE(std::abs(moved - want.step) < 1e-6);
      REQUIRE(st.m[i] == doctest::Approx(want.m).epsilon(1e-5));
      REQUIRE(st.v[i] == doctest::Approx(want.v).epsilon(1e-5));
    } else {  // c's blocks (0b100) and the weights between groups (0)
      ++seen[held[i] == 0 ? "between groups" : "straggler"];
      REQUIRE(held[i] != 0b011);
      REQUIRE(e.params()[i] == x0[i]);
      REQUIRE(st.m[i] == 0.0f);
      REQUIRE(st.v[i] == 0.25f);
    }
  }
  CHECK(seen["output bias"] == 10);
  CHECK(seen["a"] > 0);
  CHECK(seen["b"] > 0);
  CHECK(seen["straggler"] > 0);
  CHECK(seen["between groups"] > 0);
}

TEST_CASE("engine server optimizer: under secure aggregation a released group steps, a withheld one keeps its values and its moments") {
  // Six devices, replication 3: group 0's three change every value by +0.01, +0.02, +0.03 (mean 0.02),
  // of group 1 only two report (withheld). Adam with β1 0.5, β2 0.75, τ 0.02, η 0.04; v starts at
  // τ² = 0.0004:
  //   group 0      Δ = 0.02:  m = 0.01,  v = 0.0003 + 0.25·0.0004 = 0.0004, step 0.04·0.01 / 0.04 = 0.01
  //   output bias  Δ = 0.212 (five devices): m = 0.106, v = 0.0003 + 0.25·0.044944 = 0.011536,
  //                step 0.04·0.106 / (√0.011536 + 0.02) = 0.0332794968
  //   group 1      withheld: no step, m = 0 and v = 0.0004 still (a step on Δ = 0 would decay v).
  auto c = config({{"secure_aggregation", {{"replication", 3}}},
                   {"server_optimizer", {{"kind", "adam"}, {"lr", 0.04}, {"beta1", 0.5}, {"beta2", 0.75}, {"epsilon", 0.02}}}});
  auto e = engine_for(c);
  const std::vector<float> before(e.params().begin(), e.params().end());
  const auto [as, m] = secure_round_with_group1_short(e);
  CHECK(m.secagg.withheld == 1u);
  const auto& full = e.full();
  const auto after = e.params();
  const auto& st = e.server_optimizer().state();
  const float v0 = static_cast<float>(0.02 * 0.02);
  for (const auto& a : as) {
    const std::vector<float> was = gathered(full, a.sub, before), now = gathered(full, a.sub, after);
    const std::vector<float> m1 = gathered(full, a.sub, st.m), v1 = gathered(full, a.sub, st.v);
    for (std::size_t i = 0; i + 10 < was.size(); ++i) {
      if (a.group == 0) {
        REQUIRE(std::abs(now[i] - was[i] - 0.01f) < 1e-6f);
        REQUIRE(std::abs(m1[i] - 0.01f) < 1e-7f);
        REQUIRE(std::abs(v1[i] - 0.0004f) < 1e-8f);
      } else {
        REQUIRE(now[i] == was[i]);
        REQUIRE(m1[i] == 0.0f);
        REQUIRE(v1[i] == v0);
      }
    }
  }
  const std::size_t bias = core::param_slots(full).back().bias;
  for (std::size_t i = 0; i < 10; ++i) {
    CHECK(std::abs(static_cast<double>(after[bias + i]) - before[bias + i] - 0.033279496773055764) < 1e-6);
    CHECK(st.v[bias + i] == doctest::Approx(0.011536).epsilon(1e-5));
  }
}

TEST_CASE("engine server optimizer: a resumed run hands over the checkpoint's state, or refuses to begin a round") {
  const auto c = config({{"strategy", "fedavg"}, {"server_optimizer", {{"kind", "yogi"}, {"lr", 0.05}}}});
  // A run of two rounds, checkpointed by the recorder, resumed into a fresh engine: round 3 gives the
  // uninterrupted run's model and moments, to the bit.
  const auto one_round = [](rounds::engine& e, float delta) {
    REQUIRE(e.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)}).ok());
    train_and_report(e, e.assignments()[0], delta, 40);
    train_and_report(e, e.assignments()[1], -0.5f * delta, 60);
    REQUIRE(e.close_round(nullptr).ok());
  };
  testing::temp_dir d("server-opt-resume");
  auto whole = engine_for(c);
  one_round(whole, 0.01f);
  one_round(whole, 0.02f);
  auto rec = rounds::recorder::open(c, {.checkpoint = d.file("run.ckpt"), .seal_key = std::nullopt}, {});
  REQUIRE(rec.ok());
  REQUIRE(rec.value().save_state(whole, {}).ok());
  one_round(whole, -0.03f);

  auto loaded = rounds::load_checkpoint(d.file("run.ckpt"), c.model, nullptr);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.value().has_value());
  rounds::checkpoint& ck = *loaded.value();
  REQUIRE(ck.server_optimizer.has_value());
  CHECK(ck.server_optimizer->steps == 2);
  CHECK(testing::read_bytes(d.file("run.ckpt"))[6] == '\x03');

  rounds::engine resumed(c, ck.params, ck.round);
  // Without its state the run cannot go on: a kind with moments would restart them silently.
  const auto refused = resumed.begin_round({offer("a", 64u << 20), offer("b", 64u << 20)});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == rounds::errc::server_state);
  CHECK(core::error_name(rounds::errc::server_state) == "rounds.server_state");
  CHECK(testing::contains(refused.error().message, "resumed after round 2 with server_optimizer.kind yogi"));
  const auto missing = resumed.restore_server_optimizer(std::nullopt);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == rounds::errc::server_state);
  CHECK(testing::contains(missing.error().message, "holds no server optimizer state"));
  core::server_optimizer_state other = *ck.server_optimizer;
  other.kind = core::server_optimizer_kind::adam;
  const auto wrong = resumed.restore_server_optimizer(other);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == rounds::errc::server_state);
  CHECK(testing::contains(wrong.error().message, "of kind adam, the configuration's is yogi"));

  REQUIRE(resumed.restore_server_optimizer(std::move(ck.server_optimizer)).ok());
  one_round(resumed, -0.03f);
  CHECK(std::vector<float>(resumed.params().begin(), resumed.params().end()) ==
        std::vector<float>(whole.params().begin(), whole.params().end()));
  CHECK(resumed.server_optimizer().state() == whole.server_optimizer().state());
  CHECK(resumed.server_optimizer().state().steps == 3);

  // A fresh start, or a kind without moments, needs nothing restored.
  auto fresh = engine_for(c);
  CHECK(fresh.restore_server_optimizer(std::nullopt).ok());
  const auto stateless = config({{"strategy", "fedavg"}, {"server_optimizer", {{"kind", "none"}, {"lr", 0.5}}}});
  rounds::engine later(stateless, std::vector<float>(whole.params().begin(), whole.params().end()), 2);
  CHECK(later.begin_round({offer("a", 64u << 20)}).ok());
}

TEST_CASE("engine server optimizer: its fields, their defaults, and central training refusing it by name") {
  const auto c = config({{"server_optimizer", {{"kind", "adam"}}}});
  CHECK(c.server_optimizer.kind == core::server_optimizer_kind::adam);
  CHECK(c.server_optimizer.lr == 0.01);  // adam and yogi start lower: they step by about lr
  CHECK(c.server_optimizer.beta1 == 0.9);
  CHECK(c.server_optimizer.beta2 == 0.99);
  CHECK(c.server_optimizer.epsilon == 1e-3);
  CHECK(config({{"server_optimizer", {{"kind", "momentum"}}}}).server_optimizer.lr == 1.0);
  CHECK(config().server_optimizer.identity());

  CHECK(testing::contains(refused({{"strategy", "central"}, {"server_optimizer", {{"kind", "yogi"}}}}), "server_optimizer.kind"));
  CHECK(testing::contains(refused({{"strategy", "central"}, {"server_optimizer", {{"lr", 0.5}}}}), "server_optimizer.lr"));
  CHECK(testing::contains(refused({{"strategy", "central"}, {"server_optimizer", {{"lr", 0.5}}}}), "central training"));
  CHECK(testing::contains(refused({{"server_optimizer", {{"kind", "lamb"}}}}), "server_optimizer.kind"));
  CHECK(testing::contains(refused({{"server_optimizer", {{"beta1", 1.0}}}}), "server_optimizer.beta1"));
  CHECK(testing::contains(refused({{"server_optimizer", {{"epsilon", 0.0}}}}), "server_optimizer.epsilon"));
  CHECK(testing::contains(refused({{"server_optimizer", {{"momentum", 0.9}}}}), "momentum"));  // not a field of it
  // It composes with the rest: secure aggregation, differential privacy and a robust aggregate.
  CHECK(config({{"server_optimizer", {{"kind", "adam"}}}, {"secure_aggregation", {{"replication", 3}}}}).server_optimizer.kind ==
        core::server_optimizer_kind::adam);
  CHECK(config({{"server_optimizer", {{"kind", "yogi"}}}, {"dp", {{"noise_multiplier", 1.0}}}}).dp.enabled);
  CHECK(config({{"server_optimizer", {{"kind", "momentum"}}}, {"aggregate", "median"}}).aggregate.kind == core::aggregate_kind::median);

  // --help lists them from the same parser.
  core::field_table help;
  core::describe_config(help, [](core::config_reader& r) {
    rounds::run_config rc;
    return rounds::read_run_fields(r, rc, true);
  });
  std::set<std::string> paths;
  for (const auto& f : help.fields()) paths.insert(f.path);
  for (const char* p : {"server_optimizer", "server_optimizer.kind", "server_optimizer.lr", "server_optimizer.beta1",
                        "server_optimizer.beta2", "server_optimizer.epsilon"})
    CHECK(paths.count(p) == 1);
}

namespace {

std::vector<rounds::device_offer> fleet_of(std::size_t n) {
  std::vector<rounds::device_offer> offers;
  for (std::size_t i = 0; i < n; ++i) offers.push_back(offer("d" + std::to_string(i), 64u << 20));
  return offers;
}

// Each round's assigned ids over `rounds` counted rounds of `e` with `n` devices offered.
std::vector<std::set<std::string>> cohorts(rounds::engine& e, std::size_t n, int rounds) {
  std::vector<std::set<std::string>> out;
  for (int r = 0; r < rounds; ++r) {
    REQUIRE(e.begin_round(fleet_of(n)).ok());
    std::set<std::string> ids;
    for (const auto& a : e.assignments()) ids.insert(a.device);
    out.push_back(ids);
    close_counted(e);
  }
  return out;
}

}  // namespace

TEST_CASE("engine cohort: devices_per_round draws that many of the ready devices each round, at random, never by id") {
  const auto c = config({{"strategy", "fedavg"}, {"devices_per_round", 4}, {"rounds", 40}, {"seed", 5}});
  auto seeded = [&](const rounds::run_config& rc) {
    auto e = engine_for(rc);
    e.use_seeded_draws();
    return e;
  };
  auto e = seeded(c);
  REQUIRE(e.begin_round(fleet_of(16)).ok());
  CHECK(e.assignments().size() == 4);
  for (std::size_t i = 1; i < e.assignments().size(); ++i)  // kept in natural order of the ids
    CHECK(rounds::natural_less(e.assignments()[i - 1].device, e.assignments()[i].device));
  close_counted(e);
  // The metrics say what the cohort was drawn from.
  auto m = seeded(c);
  REQUIRE(m.begin_round(fleet_of(16)).ok());
  (void)train_and_report(m, m.assignments()[0], 0.5f, 80);
  for (std::size_t i = 1; i < m.assignments().size(); ++i) m.refuse(m.assignments()[i], "no");
  auto metrics = m.close_round(nullptr);
  REQUIRE(metrics.ok());
  CHECK(metrics.value().devices == 4);
  CHECK(metrics.value().ready == 16u);
  CHECK(metrics.value().to_json()["ready"] == 16);
  CHECK(metrics.value().to_line().find("drawn from 16 ready") != std::string::npos);

  // Forty rounds: every device takes part, none far more than its share (10), the cohorts change.
  auto first = seeded(c);
  const auto drawn = cohorts(first, 16, 40);
  std::map<std::string, int> times;
  for (const auto& ids : drawn) {
    CHECK(ids.size() == 4);
    for (const auto& id : ids) ++times[id];
  }
  CHECK(times.size() == 16);
  for (const auto& [id, n] : times) CHECK_MESSAGE(n <= 22, id << " drawn " << n << " times in 40 rounds");
  CHECK(std::set(drawn.begin(), drawn.end()).size() > 30);
  // Seeded (the simulator): the same seed draws the same cohorts, another seed others.
  auto again = seeded(c);
  CHECK(cohorts(again, 16, 40) == drawn);
  auto other = seeded(config({{"strategy", "fedavg"}, {"devices_per_round", 4}, {"rounds", 40}, {"seed", 6}}));
  CHECK(cohorts(other, 16, 40) != drawn);
  // The hub's draws come from the CSPRNG: two engines with one seed draw different cohorts.
  auto hub_a = engine_for(c);
  auto hub_b = engine_for(c);
  CHECK(cohorts(hub_a, 16, 5) != cohorts(hub_b, 16, 5));
}

TEST_CASE("engine cohort: the driver's cap draws at random as well; the smaller bound holds; fewer ready devices all take part") {
  auto size_of = [](nlohmann::json extra, std::size_t cap, std::size_t n) {
    auto e = engine_for(config(std::move(extra)));
    e.set_round_cap(cap);
    REQUIRE(e.begin_round(fleet_of(n)).ok());
    return e.assignments().size();
  };
  const nlohmann::json fedavg = {{"strategy", "fedavg"}};
  CHECK(size_of(fedavg, 3, 10) == 3);
  CHECK(size_of({{"strategy", "fedavg"}, {"devices_per_round", 5}}, 3, 10) == 3);
  CHECK(size_of({{"strategy", "fedavg"}, {"devices_per_round", 5}}, 8, 10) == 5);
  CHECK(size_of({{"strategy", "fedavg"}, {"devices_per_round", 5}}, 0, 4) == 4);
  CHECK(size_of({{"devices_per_round", 6}}, 0, 10) == 6);  // IST plans its groups on the cohort
  // The cap no longer takes the first devices by id: over 30 rounds of 3 of 10, all ten take part.
  auto e = engine_for(config({{"strategy", "fedavg"}, {"rounds", 30}}));
  e.set_round_cap(3);
  e.use_seeded_draws();
  std::set<std::string> seen;
  for (const auto& ids : cohorts(e, 10, 30)) seen.insert(ids.begin(), ids.end());
  CHECK(seen.size() == 10);
  CHECK(refused({{"devices_per_round", -1}}).find("devices_per_round") != std::string::npos);
}

TEST_CASE("engine cohort: each of 16 devices is drawn into cohorts of 4 with probability 1/4, pairs alike") {
  auto e = engine_for(config({{"devices_per_round", 4}}));
  e.use_seeded_draws();
  std::map<std::string, int> times;
  std::map<std::pair<std::string, std::string>, int> pairs;
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) {
    auto drawn = e.draw_cohort(fleet_of(16), "test draw " + std::to_string(i));
    REQUIRE(drawn.ok());
    REQUIRE(drawn.value().size() == 4);
    for (const auto& a : drawn.value()) {
      ++times[a.id];
      for (const auto& b : drawn.value())
        if (rounds::natural_less(a.id, b.id)) ++pairs[{a.id, b.id}];
    }
  }
  // Each device: binomial(4000, 1/4), mean 1000, sd 27.4; each pair: p = 1/20, mean 200, sd 13.8.
  REQUIRE(times.size() == 16);
  for (const auto& [id, n] : times) CHECK_MESSAGE(std::abs(n - 1000) < 140, id << ": " << n);
  REQUIRE(pairs.size() == 120);
  for (const auto& [p, n] : pairs) CHECK_MESSAGE(std::abs(n - 200) < 75, p.first << "+" << p.second << ": " << n);
}

TEST_CASE("engine: find names each assignment of the round by its device id, and nothing else") {
  auto e = engine_for(config({{"strategy", "fedavg"}, {"devices_per_round", 7}}));
  e.use_seeded_draws();
  CHECK(e.find("d3") == nullptr);  // no round open
  auto offers = fleet_of(20);
  offers.push_back(offer("d010", 64u << 20));  // numbers compare as numbers, ids as strings
  REQUIRE(e.begin_round(offers).ok());
  std::set<std::string> assigned;
  for (const auto& a : e.assignments()) {
    assigned.insert(a.device);
    const rounds::assignment* found = e.find(a.device);
    REQUIRE(found != nullptr);
    CHECK(found == &a);
  }
  for (const auto& o : offers)
    if (!assigned.count(o.id)) CHECK(e.find(o.id) == nullptr);
  CHECK(e.find("") == nullptr);
  CHECK(e.find("d99") == nullptr);
}

TEST_CASE("engine cohort: cohorts drawn at random that all refuse, k_refused_rounds_limit rounds in a row, end the run") {
  auto e = engine_for(config({{"strategy", "fedavg"}, {"rounds", 50}, {"devices_per_round", 2}}));
  std::size_t rounds_run = 0;
  core::result<rounds::round_metrics> last = rounds::round_metrics{};
  while (last.ok() && rounds_run < 2 * rounds::k_refused_rounds_limit) {
    REQUIRE(e.begin_round(fleet_of(6)).ok());
    for (auto& a : e.assignments()) e.refuse(a, "no rounds in the clear");
    last = e.close_round(nullptr);
    ++rounds_run;
  }
  REQUIRE_FALSE(last.ok());
  CHECK(last.error().code == rounds::errc::nobody_trains);
  CHECK(rounds_run == rounds::k_refused_rounds_limit);
}

TEST_CASE("engine cohort: the devices that score the model are a cohort of those that can, drawn at random") {
  auto e = engine_for(config({{"devices_per_round", 3}}));
  e.use_seeded_draws();
  std::vector<rounds::device_offer> offers;
  for (int i = 0; i < 12; ++i) {
    auto o = offer("v" + std::to_string(i), 64u << 20);
    o.validation_examples = i % 2 == 0 ? 40 : 0;  // six can score
    offers.push_back(o);
  }
  std::vector<rounds::excluded_device> excluded;
  const auto evaluators = e.plan_evaluation(offers, excluded);
  REQUIRE(evaluators.ok());
  REQUIRE(evaluators.value().size() == 3);  // drawn after the filter: never fewer because some cannot score
  for (const auto& v : evaluators.value()) CHECK(std::stoi(v.id.substr(1)) % 2 == 0);
}
