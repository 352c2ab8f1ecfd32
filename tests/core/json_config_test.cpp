// JSON configuration (json_config.cpp): parsing and loading with errors that name the source, KEY=VALUE
// overrides with dotted keys, and the field reader: defaults, bounds, types, nested objects, and the
// refusal of fields it does not know.
#include "tessera/core/config/json_config.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/math/memory.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
using json = nlohmann::json;
using namespace tessera::testing;

namespace {

enum class mode { ist, fedavg };
constexpr core::name_table<mode, 2> k_modes{{{{mode::ist, "ist"}, {mode::fedavg, "fedavg"}}}};
constexpr core::name_table<core::codec_kind, 2> k_two_codecs{{{{core::codec_kind::f32, "f32"}, {core::codec_kind::q8, "q8"}}}};

// The first error of reading `text` (from "cfg.json") with `read`, which calls the reader's accessors.
template <class Read>
core::error reader_error(const std::string& text, Read read) {
  const json j = json::parse(text);
  core::config_reader r(j, "cfg.json");
  read(r);
  return error_of(r.finish());
}

}  // namespace

// ---- parsing and loading --------------------------------------------------------------------------

TEST_CASE("parse_json: a syntax error names the source and the byte") {
  CHECK(core::parse_json(R"({"a": [1, 2]})", "cfg.json").value()["a"] == json{1, 2});
  const auto e = error_of(core::parse_json(R"({"a": })", "cfg.json"));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "cfg.json: invalid JSON at byte 7"));
}

TEST_CASE("load_json_file: reads a file, and refuses a missing, a larger or a broken one naming it") {
  temp_dir dir;
  const std::string path = dir.file("cfg.json");
  write_bytes(path, R"({"rounds": 5})");
  CHECK(core::load_json_file(path).value()["rounds"] == 5);
  CHECK(core::load_json_file(path, 13).ok());  // exactly the bound

  const auto big = error_of(core::load_json_file(path, 12));
  CHECK(big.code == core::errc::bad_format);
  CHECK(contains(big.message, path + ": larger than 12 bytes"));

  const auto missing = error_of(core::load_json_file(dir.file("none.json")));
  CHECK(missing.code == core::errc::io);
  CHECK(contains(missing.message, dir.file("none.json") + ": cannot open: No such file"));

  write_bytes(path, "{\"rounds\": 5,}");
  const auto broken = error_of(core::load_json_file(path));
  CHECK(broken.code == core::errc::bad_format);
  CHECK(contains(broken.message, path + ": invalid JSON at byte"));
}

// ---- overrides ------------------------------------------------------------------------------------

TEST_CASE("apply_overrides: dotted keys reach into objects, values are JSON or else strings") {
  json root = {{"rounds", 50}, {"model", {{"inputs", 784}, {"hidden", {512}}}}};
  REQUIRE(core::apply_overrides(root, {"rounds=100", "model.hidden=[2048,2048]", "listen=0.0.0.0:7443",
                                       "tls.ca=\"ca.pem\"", "data.test.limit=null", "note=a=b", "rounds=7"})
              .ok());
  CHECK(root["rounds"] == 7);  // the last override of a key wins
  CHECK(root["model"]["hidden"] == json{2048, 2048});
  CHECK(root["model"]["inputs"] == 784);  // its siblings stay
  CHECK(root["listen"] == "0.0.0.0:7443");  // not JSON: taken as a string
  CHECK(root["tls"]["ca"] == "ca.pem");     // a missing object is created
  CHECK(root["data"]["test"].contains("limit"));
  CHECK(root["data"]["test"]["limit"].is_null());
  CHECK(root["note"] == "a=b");  // split at the first '='
}

TEST_CASE("apply_overrides: malformed overrides are refused, naming the override") {
  struct bad_override {
    std::string item;
    std::string says;
  };
  for (const auto& [item, says] : std::vector<bad_override>{
           {"rounds", "override 'rounds': expected key=value"},
           {"=5", "override '=5': expected key=value"},
           {"model..hidden=1", "override 'model..hidden=1': empty field name"},
           {"model.=1", "override 'model.=1': empty field name"},
           {"rounds.max=1", "override 'rounds.max=1': 'max' is inside a non-object"},
       }) {
    CAPTURE(item);
    json root = {{"rounds", 50}};
    const auto e = error_of(core::apply_overrides(root, {"lr=0.1", item, "seed=3"}));
    CHECK(e.code == core::errc::invalid_spec);
    CHECK(e.message == says);
    CHECK_FALSE(root.contains("seed"));  // overrides after the bad one are not applied
  }
}

TEST_CASE("load_config: the file, or an empty object, with the overrides on top") {
  temp_dir dir;
  const std::string path = dir.file("hub.json");
  write_bytes(path, R"({"rounds": 5, "model": {"inputs": 10}})");
  const auto loaded = core::load_config(path, {"model.outputs=3", "rounds=9"});
  REQUIRE(loaded.ok());
  CHECK(loaded.value() == json{{"rounds", 9}, {"model", {{"inputs", 10}, {"outputs", 3}}}});

  CHECK(core::load_config("", {}).value() == json::object());
  CHECK(core::load_config("", {"a.b=1"}).value() == json{{"a", {{"b", 1}}}});
  CHECK(contains(error_of(core::load_config(dir.file("none.json"), {})).message, "none.json: cannot open"));
  CHECK(contains(error_of(core::load_config(path, {"x"})).message, "override 'x'"));
}

// ---- the field reader -----------------------------------------------------------------------------

TEST_CASE("config_reader: absent fields take their defaults, present ones their values") {
  const json j = json::parse(R"({"rounds": 12, "lr": 0.5, "fast": true, "name": "n", "strategy": "fedavg",
                                 "hidden": [4, 8], "codecs": ["q8"], "caps": [0.5, 1], "seed": 18446744073709551615,
                                 "whole": 3.0})");
  core::config_reader r(j, "cfg.json");
  CHECK(r.integer("rounds", 1, 1, 100, "doc") == 12);
  CHECK(r.integer("devices", 8, 1, 100, "doc") == 8);
  CHECK(r.integer("whole", 0, 0, 10, "doc") == 3);  // an integral number written as a float
  CHECK(r.number("lr", 0.1, 0.0, 1.0, "doc") == 0.5);
  CHECK(r.number("momentum", 0.9, 0.0, 1.0, "doc") == 0.9);
  CHECK(r.boolean("fast", false, "doc"));
  CHECK(r.string("name", "x", "doc") == "n");
  CHECK(r.choice("strategy", mode::ist, k_modes, "doc") == mode::fedavg);
  CHECK(r.integers("hidden", {}, 1, 1 << 20, "doc") == std::vector<std::int64_t>{4, 8});
  CHECK(r.choices("codecs", {core::codec_kind::f32}, core::k_codec_names, "doc") == std::vector<core::codec_kind>{core::codec_kind::q8});
  CHECK(r.numbers("caps", {}, 0.0, 1.0, "doc") == std::vector<double>{0.5, 1.0});
  CHECK(r.seed("seed", 1, "doc") == std::numeric_limits<std::uint64_t>::max());
  CHECK(r.has("rounds"));
  CHECK_FALSE(r.has("devices"));
  CHECK(r.finish().ok());
}

TEST_CASE("config_reader: a wrong value is refused naming the source, the field and what was found") {
  struct bad_field {
    std::string text;
    void (*read)(core::config_reader&);
    std::string says;
  };
  const std::vector<bad_field> cases = {
      {R"({"rounds": 0})", [](core::config_reader& r) { static_cast<void>(r.integer("rounds", 1, 1, 100, "doc")); },
       "cfg.json: field 'rounds': 0 is out of range [1, 100]"},
      {R"({"rounds": "ten"})", [](core::config_reader& r) { static_cast<void>(r.integer("rounds", 1, 1, 100, "doc")); },
       "cfg.json: field 'rounds': expected an integer, found \"ten\""},
      {R"({"rounds": 2.5})", [](core::config_reader& r) { static_cast<void>(r.integer("rounds", 1, 1, 100, "doc")); },
       "cfg.json: field 'rounds': expected an integer, found 2.5"},
      {R"({"rounds": 18446744073709551615})",
       [](core::config_reader& r) { static_cast<void>(r.integer("rounds", 1, 1, 100, "doc")); },
       "cfg.json: field 'rounds': out of range"},
      {R"({"seed": -1})", [](core::config_reader& r) { static_cast<void>(r.seed("seed", 1, "doc")); },
       "cfg.json: field 'seed': expected an integer in [0, 2^64), found -1"},
      {R"({"lr": 2})", [](core::config_reader& r) { static_cast<void>(r.number("lr", 0.1, 0.0, 1.0, "doc")); },
       "cfg.json: field 'lr': 2 is out of range [0.000000, 1.000000]"},
      {R"({"lr": [1]})", [](core::config_reader& r) { static_cast<void>(r.number("lr", 0.1, 0.0, 1.0, "doc")); },
       "cfg.json: field 'lr': expected a number, found [1]"},
      {R"({"fast": 1})", [](core::config_reader& r) { static_cast<void>(r.boolean("fast", false, "doc")); },
       "cfg.json: field 'fast': expected true or false, found 1"},
      {R"({"name": 5})", [](core::config_reader& r) { static_cast<void>(r.string("name", "", "doc")); },
       "cfg.json: field 'name': expected a string, found 5"},
      {R"({"strategy": "fedprox"})",
       [](core::config_reader& r) { static_cast<void>(r.choice("strategy", mode::ist, k_modes, "doc")); },
       "cfg.json: field 'strategy': 'fedprox' is not one of: ist, fedavg"},
      {R"({"hidden": [4, 0]})", [](core::config_reader& r) { static_cast<void>(r.integers("hidden", {}, 1, 64, "doc")); },
       "cfg.json: field 'hidden[1]': expected an integer in [1, 64], found 0"},
      {R"({"hidden": 4})", [](core::config_reader& r) { static_cast<void>(r.integers("hidden", {}, 1, 64, "doc")); },
       "cfg.json: field 'hidden': expected an array of integers, found 4"},
      {R"({"codecs": ["f32", "f8"]})",
       [](core::config_reader& r) { static_cast<void>(r.choices("codecs", {}, k_two_codecs, "doc")); },
       "cfg.json: field 'codecs[1]': expected one of f32, q8, found \"f8\""},
      {R"({"caps": [0.5, 1.5]})", [](core::config_reader& r) { static_cast<void>(r.numbers("caps", {}, 0.0, 1.0, "doc")); },
       "cfg.json: field 'caps[1]': expected a number in [0.000000, 1.000000], found 1.5"},
      {R"({"model": [1]})", [](core::config_reader& r) { static_cast<void>(r.object("model", "doc")); },
       "cfg.json: field 'model': expected an object, found [1]"},
      {R"({"roundz": 5})", [](core::config_reader& r) { static_cast<void>(r.integer("rounds", 1, 1, 100, "doc")); },
       "cfg.json: field 'roundz': unknown field"},
      {R"([1, 2])", [](core::config_reader&) {}, "cfg.json: expected a JSON object"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const core::error e = reader_error(c.text, c.read);
    CHECK(e.code == core::errc::invalid_spec);
    CHECK(e.message == c.says);
  }
}

TEST_CASE("config_reader: a refused value reads as its default, and the first error is the one kept") {
  const json j = json::parse(R"({"rounds": 0, "lr": "fast", "extra": 1})");
  core::config_reader r(j, "cfg.json");
  CHECK(r.integer("rounds", 7, 1, 100, "doc") == 7);
  CHECK(r.number("lr", 0.25, 0.0, 1.0, "doc") == 0.25);
  r.fail("batch", "larger than the data");
  CHECK(error_of(r.finish()).message == "cfg.json: field 'rounds': 0 is out of range [1, 100]");
}

TEST_CASE("config_reader: nested objects are read by child readers whose errors give the dotted path") {
  const json j = json::parse(R"({"model": {"inputs": 784, "hidden": [8], "extra": true}, "rounds": 3})");
  core::config_reader r(j, "sim.json");
  CHECK(r.integer("rounds", 1, 1, 10, "doc") == 3);
  const json* model = r.object("model", "doc");
  REQUIRE(model != nullptr);
  CHECK(r.object("data", "doc") == nullptr);  // absent
  core::config_reader m = r.child("model", *model);
  CHECK(m.integer("inputs", 1, 1, 1 << 20, "doc") == 784);
  CHECK(m.integers("hidden", {}, 1, 1 << 20, "doc") == std::vector<std::int64_t>{8});
  CHECK(m.where("inputs") == "sim.json: field 'model.inputs'");
  CHECK(error_of(m.finish()).message == "sim.json: field 'model.extra': unknown field");
  CHECK(r.finish().ok());  // the parent knows "model"; what is inside is the child's to check

  m.fail("hidden", "wider than inputs");
  CHECK(error_of(m.finish()).message == "sim.json: field 'model.hidden': wider than inputs");
  const json not_object = 5;
  CHECK(error_of(r.child("data", not_object).finish()).message == "sim.json: field 'data': expected a JSON object");

  // null leaves an optional object out (an override such as validation=null), and is a known field.
  const json n = json::parse(R"({"validation": null})");
  core::config_reader nr(n, "hub.json");
  CHECK(nr.object("validation", "doc") == nullptr);
  CHECK(nr.finish().ok());
}

TEST_CASE("config_reader: a describing reader lists every field it reads, with type, default and line") {
  core::field_table table;
  core::config_reader r = core::config_reader::describing(table);
  CHECK(r.integer("rounds", 50, 1, 100, "rounds to run") == 50);
  CHECK(r.choice("strategy", mode::fedavg, k_modes, "what to train") == mode::fedavg);
  const json* model = r.object("model", "the model");
  REQUIRE(model != nullptr);  // entered although absent, so its fields are listed too
  core::config_reader m = r.child("model", *model);
  (void)m.integers("hidden", {64, 32}, 1, 4096, "hidden widths");
  m.fail("hidden", "not recorded while describing");
  CHECK(m.finish().ok());
  (void)r.address("listen", "127.0.0.1:7443", true, "where to listen");
  CHECK(r.finish().ok());
  const auto& f = table.fields();
  REQUIRE(f.size() == 5);
  CHECK(f[0].path == "rounds");
  CHECK(f[0].type == "integer in [1, 100]");
  CHECK(f[0].fallback == "50");
  CHECK(f[0].doc == "rounds to run");
  CHECK(f[1].type == "one of: ist, fedavg");
  CHECK(f[1].fallback == "\"fedavg\"");
  CHECK(f[2].type == "object");
  CHECK(f[3].path == "model.hidden");
  CHECK(f[3].fallback == "[64,32]");
  CHECK(f[4].type == "HOST:PORT");
  const std::string text = table.render();
  CHECK(contains(text, "  model.hidden"));
  CHECK(contains(text, "hidden widths"));
  CHECK(contains(text, "list of integers in [1, 4096], default [64,32]"));
}

TEST_CASE("config_reader: HOST:PORT, and renamed fields that say their new name") {
  const json j = json::parse(R"({"listen": "[::1]:0", "hub": "hub.example.org:7443", "bad": "nohost", "images": "a"})");
  core::config_reader r(j, "hub.json");
  const auto listen = r.address("listen", "127.0.0.1:1", true, "doc");
  CHECK(listen.host == "::1");
  CHECK(listen.port == 0);
  const auto hub = r.address("hub", "127.0.0.1:1", false, "doc");
  CHECK(hub.host == "hub.example.org");
  CHECK(hub.port == 7443);
  (void)r.address("bad", "127.0.0.1:1", false, "doc");
  CHECK(error_of(r.finish()).message == "hub.json: field 'bad': 'nohost' is not HOST:PORT (e.g. 10.0.0.5:7443)");

  const json zero_port = {{"hub", "h:0"}};
  core::config_reader zero(zero_port, "agent.json");
  (void)zero.address("hub", "127.0.0.1:1", false, "doc");
  CHECK(contains(error_of(zero.finish()).message, "'h:0' is not HOST:PORT"));

  core::config_reader old(j, "hub.json");
  old.renamed("images", "validation.features");
  CHECK(error_of(old.finish()).message == "hub.json: field 'images': renamed: use 'validation.features'");
}
