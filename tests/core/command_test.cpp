// Tests of tessera/core/config/command.hpp: the command-line layer of every command.
#include "tessera/core/config/command.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "test_files.hpp"

namespace core = tessera::core;
using namespace tessera::testing;

namespace {

const core::command k_tool{.name = "tool",
                           .usage = "tool [--config FILE] [KEY=VALUE ...]",
                           .about = "Does a thing.",
                           .options = {{.flag = "--out", .value = "DIR", .doc = "where to write"},
                                       {.flag = "--dry", .value = "", .doc = "only say what would be done"}}};

core::result<core::command_line> parse(const core::command& cmd, std::vector<const char*> args) {
  args.insert(args.begin(), "tool");
  return core::parse_command_line(cmd, static_cast<int>(args.size()), args.data(), 1);
}

}  // namespace

TEST_CASE("command line: config, overrides in order, options with and without values, log level") {
  auto line = parse(k_tool, {"--config", "a.json", "rounds=3", "--out", "first", "--out", "dir", "model.hidden=[4]", "--dry",
                             "--log-level", "warning"});
  REQUIRE(line.ok());
  CHECK(line.value().config_path == "a.json");
  CHECK(line.value().overrides == std::vector<std::string>{"rounds=3", "model.hidden=[4]"});
  CHECK(line.value().value("--out") == "dir");  // the last one given
  CHECK(line.value().all("--out") == std::vector<std::string>{"first", "dir"});
  CHECK(line.value().has("--dry"));
  CHECK(line.value().value("--dry").empty());
  CHECK_FALSE(line.value().has("--missing"));
  CHECK(line.value().level == core::log_level::warning);
  CHECK_FALSE(line.value().help);
  CHECK(parse(k_tool, {"-h"}).value().help);
}

TEST_CASE("command line: every mistake is named") {
  struct bad {
    std::vector<const char*> args;
    const char* says;
  };
  const bad cases[] = {
      {{"--config"}, "--config needs a value"},
      {{"--out"}, "--out needs a value"},
      {{"--log-level", "loud"}, "--log-level: 'loud' is not one of info, warning, error"},
      {{"--bogus"}, "unknown option '--bogus'"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"=5"}, "unexpected argument '=5'"},
  };
  for (const auto& c : cases) {
    auto line = parse(k_tool, c.args);
    REQUIRE_FALSE(line.ok());
    CHECK_MESSAGE(contains(line.error().message, c.says), line.error().message);
  }
  core::command options_only = k_tool;
  options_only.configured = false;
  CHECK(contains(parse(options_only, {"rounds=3"}).error().message, "unexpected argument 'rounds=3'"));
  CHECK(contains(parse(options_only, {"--config", "a.json"}).error().message, "unknown option '--config'"));
}

TEST_CASE("command help: usage, about, the options, and the parser's own fields") {
  core::field_table fields;
  core::config_reader r = core::config_reader::describing(fields);
  (void)r.integer("rounds", 50, 1, 100, "rounds to run");
  const std::string help = core::help_text(k_tool, fields);
  CHECK(help.starts_with("usage: tool [--config FILE]"));
  CHECK(contains(help, "Does a thing."));
  CHECK(contains(help, "--out DIR"));
  CHECK(contains(help, "where to write"));
  CHECK(contains(help, "--log-level LEVEL"));
  CHECK(contains(help, "Configuration fields:"));
  CHECK(contains(help, "rounds to run"));
  core::command options_only = k_tool;
  options_only.configured = false;
  CHECK_FALSE(contains(core::help_text(options_only, {}), "JSON configuration"));
}

TEST_CASE("run_command: help without running, the body's status, errors as exit 1") {
  int ran = 0;
  auto body = [&](const core::command_line&) -> core::result<int> {
    ++ran;
    return 3;
  };
  const char* help[] = {"tool", "--help"};
  CHECK(core::run_command(k_tool, 2, help, 1, {}, body) == 0);
  CHECK(ran == 0);
  const char* plain[] = {"tool", "rounds=1"};
  CHECK(core::run_command(k_tool, 2, plain, 1, {}, body) == 3);
  CHECK(ran == 1);
  const char* bad[] = {"tool", "--bogus"};
  CHECK(core::run_command(k_tool, 2, bad, 1, {}, body) == 1);
  CHECK(ran == 1);
  auto failing = [](const core::command_line&) -> core::result<int> {
    return core::make_error(core::errc::io, "x.json: cannot open");
  };
  CHECK(core::run_command(k_tool, 2, plain, 1, {}, failing) == 1);
  // --version: the name and the build's version, without running (no binary had it).
  const char* version[] = {"tool", "--version"};
  CHECK(core::run_command(k_tool, 2, version, 1, {}, body) == 0);
  CHECK(ran == 1);
  CHECK(core::version().find('.') != std::string_view::npos);  // major.minor.patch from the build
  CHECK(core::help_text(k_tool, {}).find("--version") != std::string::npos);
}
