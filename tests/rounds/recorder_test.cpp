// Tests of tessera/rounds/recorder.hpp: what a closed round leaves behind, in which order.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/test_files.hpp"
#include "tessera/core/io/safetensors.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/rounds/recorder.hpp"

using namespace tessera;

namespace {

rounds::run_config small_config(const std::string& metrics, const std::string& output) {
  nlohmann::json j = {{"model", {{"inputs", 6}, {"hidden", {16}}, {"outputs", 3}}}, {"rounds", 2}, {"min_width", 4},
                      {"metrics", metrics}, {"output", output}};
  core::config_reader r(j, "run.json");
  rounds::run_config c;
  REQUIRE(rounds::read_run_fields(r, c, true).ok());
  REQUIRE(r.finish().ok());
  return c;
}

// One round in which the only device sends its subnet back unchanged: enough for the engine to close a
// round that counts (a round no update reached does not).
rounds::round_metrics close_one_round(rounds::engine& e) {
  REQUIRE(e.begin_round({{.id = "d", .budget_bytes = 1u << 30, .examples = 10, .codecs = {}, .capacity = 0}}).ok());
  rounds::assignment& a = e.assignments()[0];
  REQUIRE(e.sent(a).ok());
  std::vector<float> values(core::param_count(a.sub.arch));
  core::gather(e.full(), a.sub, e.params(), values);
  std::vector<std::byte> blob(a.blob_bytes);
  REQUIRE(core::encode(a.sub.arch, a.codec, values, blob).ok());
  REQUIRE(e.announce(a, {.round = static_cast<std::uint64_t>(e.current_round()), .examples = 10,
                         .steps = static_cast<std::uint64_t>(a.task.steps), .loss = 0.5, .size = a.blob_bytes, .codec = a.codec})
              .ok());
  REQUIRE(e.receive(a, blob).ok());
  auto m = e.close_round(nullptr);
  REQUIRE(m.ok());
  return m.value();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

TEST_CASE("recorder: checkpoint, then seconds, metrics line and progress; the model at the end") {
  testing::temp_dir d("recorder");
  const auto c = small_config(d.file("m.jsonl"), d.file("model.safetensors"));
  std::vector<float> params(core::param_count(c.model.full_arch()));
  core::initialize(c.model, params);
  rounds::engine e(c, params, 0);
  auto rec = rounds::recorder::open(c, {.checkpoint = d.file("run.ckpt"), .seal_key = std::nullopt}, {});
  REQUIRE(rec.ok());
  std::vector<std::int64_t> reported;
  rec.value().on_round([&](const rounds::round_metrics& m) {
    reported.push_back(m.round);
    CHECK(m.seconds > 0);
    CHECK(std::filesystem::exists(d.file("run.ckpt")));  // durable before it is reported
  });
  for (int r = 0; r < 2; ++r) {
    auto m = close_one_round(e);
    const std::vector<rounds::device_record> registry = {{.id = "d", .budget_bytes = 1, .examples = 10, .rounds_done = 0,
                                                          .rounds_missed = r + 1, .last_seen = 5}};
    REQUIRE(rec.value().record(e, m, rounds::recorder::clock::now() - std::chrono::milliseconds(5), registry).ok());
  }
  CHECK(reported == std::vector<std::int64_t>{1, 2});
  const auto lines = lines_of(d.file("m.jsonl"));
  REQUIRE(lines.size() == 2);
  CHECK(nlohmann::json::parse(lines[1])["round"] == 2);
  auto back = rounds::load_checkpoint(d.file("run.ckpt"), c.model, nullptr);
  REQUIRE(back.ok());
  REQUIRE(back.value().has_value());
  CHECK(back.value()->round == 2);
  CHECK(back.value()->registry.at(0).rounds_missed == 2);

  REQUIRE(rec.value().finish(e).ok());
  auto model = core::read_safetensors(d.file("model.safetensors"));
  REQUIRE(model.ok());
  CHECK(model.value().metadata.at("tessera.rounds") == "2");
}

TEST_CASE("recorder: a metrics file that cannot be opened fails at once, naming it") {
  testing::temp_dir d("recorder-bad");
  const auto c = small_config(d.file("no/such/folder/m.jsonl"), "");
  auto rec = rounds::recorder::open(c, {}, {});
  REQUIRE_FALSE(rec.ok());
  CHECK(rec.error().message.find("no/such/folder/m.jsonl") != std::string::npos);
}
