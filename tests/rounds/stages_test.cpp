// Tests of successive layer training in the engine (strategy slt, rounds/src/engine_stages.cpp): the
// stage schedule, what a stage sends, freezes and takes back, budgets that cut the stage's layer, and
// refusals by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"

using namespace tessera;

namespace {

const nlohmann::json k_model = {{"inputs", 64}, {"hidden", {256, 256}}, {"outputs", 10}};

core::result<rounds::run_config> read_slt(nlohmann::json extra) {
  nlohmann::json j = {{"model", k_model}, {"strategy", "slt"}, {"local_steps", 5}, {"batch", 16}, {"min_width", 8}, {"rounds", 4},
                      {"update_bound", "off"}};
  j.update(extra);
  core::config_reader r(j, "run.json");
  rounds::run_config c;
  TESSERA_TRY(rounds::read_run_fields(r, c, /*allow_central=*/true));
  TESSERA_TRY(r.finish());
  return c;
}

rounds::run_config slt_config(nlohmann::json extra = nlohmann::json::object()) {
  auto c = read_slt(std::move(extra));
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  return c.value();
}

std::string slt_refused(nlohmann::json extra) {
  auto c = read_slt(std::move(extra));
  REQUIRE_FALSE(c.ok());
  return c.error().message;
}

rounds::engine slt_engine(const rounds::run_config& c) {
  std::vector<float> params(core::param_count(c.model.full_arch()));
  core::initialize(c.model, params);
  return rounds::engine(c, std::move(params), 0);
}

rounds::device_offer budget_offer(const std::string& id, std::uint64_t budget) {
  return {.id = id, .budget_bytes = budget, .examples = 1000, .codecs = {core::codec_kind::f32}, .capacity = 0};
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// A device's round done right: download, add `delta` to every value it trained, send back its update.
void train_stage(rounds::engine& e, rounds::assignment& a, float delta) {
  std::vector<std::byte> down(a.blob_bytes);
  REQUIRE(e.encode_download(a, down).ok());
  REQUIRE(e.sent(a).ok());
  REQUIRE(e.downloaded(a).ok());
  std::vector<float> values(core::param_count(a.sub.arch));
  REQUIRE(core::decode(a.sub.arch, a.codec, down, values).ok());
  for (auto& v : values) v += delta;
  std::vector<std::byte> up(core::update_bytes(a.sub.arch, a.codec));
  REQUIRE(core::encode_update(a.sub.arch, a.codec, values, up).ok());
  REQUIRE(e.announce(a, {.round = static_cast<std::uint64_t>(e.current_round()), .examples = 80, .steps = 5, .loss = 0.5,
                         .size = up.size(), .codec = a.codec})
              .ok());
  REQUIRE(e.receive(a, up).ok());
}

// The full model's parameters of layer l (0-based): weights, bias, and gain and shift when normed.
std::vector<float> layer_values(const core::mlp_arch& full, std::span<const float> params, std::size_t l) {
  const auto slots = core::param_slots(full);
  const std::size_t end = l + 1 < slots.size() ? slots[l + 1].weight : params.size();
  return {params.begin() + static_cast<std::ptrdiff_t>(slots[l].weight), params.begin() + static_cast<std::ptrdiff_t>(end)};
}

}  // namespace

TEST_CASE("slt: the stages follow the schedule, evenly or as stage_rounds says; other schedules are refused by name") {
  const auto even = slt_config({{"rounds", 10}});
  for (std::int64_t r = 0; r < 10; ++r) CHECK(even.slt_stage(r) == (r < 5 ? 0u : 1u));
  const auto three = slt_config({{"rounds", 7}, {"model", {{"inputs", 64}, {"hidden", {32, 32, 32}}, {"outputs", 10}}}});
  const std::vector<std::size_t> expected = {0, 0, 0, 1, 1, 2, 2};  // the remainder goes to the first stages
  for (std::int64_t r = 0; r < 7; ++r) CHECK(three.slt_stage(r) == expected[static_cast<std::size_t>(r)]);
  const auto given = slt_config({{"rounds", 10}, {"slt", {{"stage_rounds", {2, 8}}, {"head_fraction", 0.5}}}});
  CHECK(given.slt.head_fraction == 0.5);
  for (std::int64_t r = 0; r < 10; ++r) CHECK(given.slt_stage(r) == (r < 2 ? 0u : 1u));

  CHECK(slt_refused({{"slt", {{"stage_rounds", {4}}}}}).find("1 entries for a model of 2 hidden layers") != std::string::npos);
  CHECK(slt_refused({{"slt", {{"stage_rounds", {2, 3}}}}}).find("add up to 5 rounds; the run has 4") != std::string::npos);
  CHECK(slt_refused({{"strategy", "ist"}, {"slt", {{"head_fraction", 0.5}}}}).find("only strategy slt trains in stages") != std::string::npos);
  CHECK(slt_refused({{"slt", {{"head_fraction", 0}}}}).find("head_fraction") != std::string::npos);
  CHECK(slt_refused({{"secure_aggregation", {{"enabled", true}}}}).find("strategy slt sends its frozen layers whole") != std::string::npos);
  CHECK(slt_refused({{"dp", {{"enabled", true}}}}).find("strategy slt sends its frozen layers whole") != std::string::npos);
  CHECK(slt_refused({{"whole_model_rounds", 1}}).find("only IST ends with whole-model rounds") != std::string::npos);
  CHECK(slt_refused({{"model", {{"inputs", 64}, {"hidden", nlohmann::json::array()}, {"outputs", 10}}}}).find("this model has none") !=
        std::string::npos);
}

TEST_CASE("slt: a stage trains its layer whole with a narrower head, freezes the layers below, and takes back only what trained") {
  const auto c = slt_config({{"slt", {{"head_fraction", 0.25}}}});
  auto e = slt_engine(c);
  const core::mlp_arch full = e.full();
  const std::vector<rounds::device_offer> fleet = {budget_offer("d1", 1ull << 30), budget_offer("d2", 1ull << 30), budget_offer("d3", 1ull << 30)};

  // Stage 1 (rounds 1 and 2): hidden layer 1 whole, the head 64 of hidden layer 2's 256 units.
  const std::vector<float> start(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet).ok());
  const auto notes = e.take_notes();
  CHECK(mentions(notes, "round 1 trains stage 1 of 2: hidden layer 1 (256 units) trains, the head above it at 64 of 256 units"));
  for (auto& a : e.assignments()) {
    CHECK(a.sub.arch.widths == std::vector<std::int64_t>{64, 256, 64, 10});
    CHECK(a.sub.arch.frozen == 0);
    CHECK(a.group == 0);
    CHECK(a.upload_bytes == a.blob_bytes);
    CHECK(a.task.arch.frozen == 0);
    train_stage(e, a, 0.25f);
  }
  REQUIRE(e.close_round(nullptr).ok());
  // The head's units beyond its 64 kept their values: nobody trained them.
  const auto slots = core::param_slots(full);
  const std::size_t cols = static_cast<std::size_t>(slots[1].cols);
  for (std::size_t unit : {0u, 63u, 64u, 255u}) {
    const std::size_t at = slots[1].weight + unit * cols;
    CAPTURE(unit);
    CHECK((e.params()[at] != start[at]) == (unit < 64));
  }
  REQUIRE(e.begin_round(fleet).ok());
  CHECK(e.take_notes().empty());  // a stage is said once
  for (auto& a : e.assignments()) train_stage(e, a, 0.25f);
  REQUIRE(e.close_round(nullptr).ok());

  // Stage 2 (rounds 3 and 4): hidden layer 1 frozen, hidden layer 2 whole; the update is layers 2 and 3 alone.
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet).ok());
  CHECK(mentions(e.take_notes(), "round 3 trains stage 2 of 2: hidden layer 2 (256 units) trains, the layers below it frozen"));
  for (auto& a : e.assignments()) {
    CHECK(a.sub.arch.widths == std::vector<std::int64_t>{64, 256, 256, 10});
    CHECK(a.sub.arch.frozen == 1);
    CHECK(a.task.arch.frozen == 1);
    CHECK(a.upload_bytes == core::update_bytes(a.sub.arch, a.codec));
    CHECK(a.upload_bytes == a.blob_bytes - 4 * (slots[1].weight - slots[0].weight));
  }
  // The whole subnet sent back is refused by its size, naming both.
  auto& first = e.assignments()[0];
  {
    std::vector<std::byte> down(first.blob_bytes);
    REQUIRE(e.encode_download(first, down).ok());
    REQUIRE(e.sent(first).ok());
    REQUIRE(e.downloaded(first).ok());
    const auto bad = e.announce(first, {.round = 3, .examples = 80, .steps = 5, .loss = 0.5, .size = first.blob_bytes, .codec = first.codec});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("update of " + std::to_string(first.blob_bytes) +
                                   " bytes, the assigned update (the layers after the frozen ones) is " +
                                   std::to_string(first.upload_bytes)) != std::string::npos);
  }
  for (std::size_t i = 1; i < e.assignments().size(); ++i) train_stage(e, e.assignments()[i], 0.5f);
  REQUIRE(e.close_round(nullptr).ok());
  CHECK(layer_values(full, e.params(), 0) == layer_values(full, before, 0));  // frozen: to the bit
  CHECK(layer_values(full, e.params(), 1) != layer_values(full, before, 1));
  CHECK(layer_values(full, e.params(), 2) != layer_values(full, before, 2));
}

TEST_CASE("slt: budgets that cannot hold the stage's layer cut it into groups within them; a device too small is left out by name") {
  const auto c = slt_config({{"slt", {{"head_fraction", 0.25}}}});
  auto e = slt_engine(c);
  const core::mlp_arch full = e.full();
  const bool momentum = true;
  const core::stage_shape first{.stage = 0, .head_fraction = 0.25};
  // A budget that holds about half of hidden layer 1 beside the head.
  const std::uint64_t half = core::bytes_needed(core::stage_arch(full, first, 0.5, 8), 16, momentum, core::codec_kind::f32);
  std::vector<rounds::device_offer> fleet;
  for (int i = 1; i <= 4; ++i) fleet.push_back(budget_offer("d" + std::to_string(i), half));
  fleet.push_back(budget_offer("tiny", 4096));
  auto excluded = e.begin_round(fleet);
  REQUIRE(excluded.ok());
  REQUIRE(excluded.value().size() == 1);
  CHECK(excluded.value()[0].id == "tiny");
  CHECK(excluded.value()[0].reason.find("stage 1 of 2 (successive layer training) needs") != std::string::npos);
  CHECK(excluded.value()[0].reason.find("the budget is 4096 bytes") != std::string::npos);
  std::set<std::int32_t> seen;
  std::size_t total = 0;
  for (const auto& a : e.assignments()) {
    CAPTURE(a.device);
    CHECK(core::bytes_needed(a.sub.arch, 16, momentum, a.codec) <= half);
    CHECK(a.sub.arch.widths[1] <= 128);
    CHECK(a.sub.arch.widths[2] == 64);
    if (a.index < 2) {  // two groups cover the layer; each group's first device adds its units
      seen.insert(a.sub.neurons[0].begin(), a.sub.neurons[0].end());
      total += a.sub.neurons[0].size();
    }
  }
  CHECK(seen.size() == total);  // the groups are disjoint
  CHECK(total >= 250);           // and cover (nearly all of) the layer
}

TEST_CASE("slt: the server optimizer's momentum does not move frozen layers after their stage") {
  // FedAvgM: layer 1 gathers momentum in stage 1; were its coordinates counted as reached in stage 2,
  // that momentum would keep moving it although nobody trains it.
  const auto c = slt_config({{"server_optimizer", {{"kind", "momentum"}, {"lr", 1.0}}}});
  auto e = slt_engine(c);
  const core::mlp_arch full = e.full();
  const std::vector<rounds::device_offer> fleet = {budget_offer("d1", 1ull << 30), budget_offer("d2", 1ull << 30)};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(e.begin_round(fleet).ok());
    for (auto& a : e.assignments()) train_stage(e, a, 0.25f);
    REQUIRE(e.close_round(nullptr).ok());
  }
  const std::vector<float> before(e.params().begin(), e.params().end());
  REQUIRE(e.begin_round(fleet).ok());
  for (auto& a : e.assignments()) {
    REQUIRE(a.sub.arch.frozen == 1);
    train_stage(e, a, 0.25f);
  }
  REQUIRE(e.close_round(nullptr).ok());
  CHECK(layer_values(full, e.params(), 0) == layer_values(full, before, 0));
  CHECK(layer_values(full, e.params(), 1) != layer_values(full, before, 1));
}

TEST_CASE("slt: frozen_codec q8 sends the frozen layers in q8 (f32 to a device without it), the hub rounds its own copy once as their stage begins, and a budget holds more") {
  const auto c = slt_config({{"slt", {{"frozen_codec", "q8"}}}});
  CHECK(c.slt.frozen_codec == core::codec_kind::q8);
  CHECK(slt_refused({{"slt", {{"frozen_codec", "q4"}}}}).find("frozen_codec") != std::string::npos);
  auto e = slt_engine(c);
  const core::mlp_arch full = e.full();
  std::vector<rounds::device_offer> fleet = {budget_offer("d1", 1ull << 30), budget_offer("d2", 1ull << 30), budget_offer("f32-only", 1ull << 30)};
  fleet[0].codecs = fleet[1].codecs = {core::codec_kind::f32, core::codec_kind::q8};
  for (int round = 1; round <= 2; ++round) {  // stage 1: nothing frozen, nothing rounded
    const std::vector<float> start(e.params().begin(), e.params().end());
    REQUIRE(e.begin_round(fleet).ok());
    CHECK(std::equal(start.begin(), start.end(), e.params().begin()));
    for (auto& a : e.assignments()) {
      CHECK_FALSE(core::compact_frozen(a.sub.arch));
      train_stage(e, a, 0.25f);
    }
    REQUIRE(e.close_round(nullptr).ok());
  }
  // Stage 2: layer 1 becomes what q8 decodes it to, before anything is sent; the other layers stay.
  const std::vector<float> before(e.params().begin(), e.params().end());
  core::mlp_arch held = full;
  held.frozen = 1;
  held.frozen_codec = core::codec_kind::q8;
  std::vector<float> rounded = before;
  REQUIRE(core::round_frozen(held, rounded).ok());
  REQUIRE(e.begin_round(fleet).ok());
  CHECK(layer_values(full, e.params(), 0) == layer_values(full, rounded, 0));
  CHECK(layer_values(full, e.params(), 0) != layer_values(full, before, 0));
  CHECK(layer_values(full, e.params(), 1) == layer_values(full, before, 1));
  const std::vector<float> stage_start(e.params().begin(), e.params().end());
  for (auto& a : e.assignments()) {
    CAPTURE(a.device);
    const core::codec_kind held_in = a.device == "f32-only" ? core::codec_kind::f32 : core::codec_kind::q8;
    CHECK(a.sub.arch.frozen == 1);
    CHECK(a.sub.arch.frozen_codec == held_in);
    CHECK(a.task.arch.frozen_codec == held_in);
    CHECK(a.blob_bytes == core::frozen_bytes(a.sub.arch) + core::update_bytes(a.sub.arch, a.codec) +
                              (held_in == core::codec_kind::f32 ? 4 * core::trained_offset(a.sub.arch) : 0));
    if (held_in == core::codec_kind::q8) CHECK(core::frozen_bytes(a.sub.arch) < 4 * core::trained_offset(a.sub.arch) / 3);
    // What the device decodes of layer 1 is the hub's model (already rounded: f32 carries it exactly).
    std::vector<std::byte> down(a.blob_bytes);
    REQUIRE(e.encode_download(a, down).ok());
    std::vector<float> values(core::param_count(a.sub.arch));
    REQUIRE(core::decode(a.sub.arch, a.codec, down, values).ok());
    CHECK(layer_values(a.sub.arch, values, 0) == layer_values(full, stage_start, 0));
    train_stage(e, a, 0.5f);
  }
  REQUIRE(e.close_round(nullptr).ok());
  // Round 4 is no stage's first: layer 1 is not rounded again.
  REQUIRE(e.begin_round(fleet).ok());
  CHECK(layer_values(full, e.params(), 0) == layer_values(full, stage_start, 0));

  // In q8 a stage's frozen layer takes about a quarter of its f32 bytes: a budget holds a wider share.
  const core::stage_shape plain{.stage = 1, .head_fraction = 0.25}, compact{.stage = 1, .head_fraction = 0.25, .frozen_codec = core::codec_kind::q8};
  const std::size_t budget = core::bytes_needed(core::stage_arch(full, plain, 0.5, 8), 16, true, core::codec_kind::f32);
  const double f32_share = core::capacity_for_stage(full, plain, 16, true, core::codec_kind::f32, budget, 8);
  const double q8_share = core::capacity_for_stage(full, compact, 16, true, core::codec_kind::f32, budget, 8);
  CHECK(f32_share == doctest::Approx(0.5).epsilon(0.02));
  CHECK(q8_share > f32_share);
}
