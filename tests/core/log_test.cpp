// Tests of tessera/core/config/log.hpp: the standard sink's line format and its level.
#include "tessera/core/config/log.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "test_files.hpp"

namespace core = tessera::core;
using namespace tessera::testing;

namespace {

// What `f` writes to standard error.
template <class F>
std::string stderr_of(F&& f) {
  temp_dir d;
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int file = ::open(d.file("err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE((saved >= 0 && file >= 0));
  ::dup2(file, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(file);
  return read_bytes(d.file("err"));
}

}  // namespace

TEST_CASE("stderr_log: '[tag HH:MM:SS] level: text' lines, none below its level") {
  const std::string out = stderr_of([] {
    const core::log_sink log = core::stderr_log("hub", core::log_level::warning);
    log(core::log_level::info, "device pi-07 joined");
    log(core::log_level::warning, "device pi-07 missed the deadline");
    log(core::log_level::error, "checkpoint failed");
  });
  CHECK_FALSE(contains(out, "joined"));
  CHECK(contains(out, "] warning: device pi-07 missed the deadline\n"));
  CHECK(contains(out, "] error: checkpoint failed\n"));
  CHECK(out.starts_with("[hub "));
  CHECK(out.size() > 14);
  CHECK(out[7] == ':');  // "[hub HH:MM:SS]"
  CHECK(out[10] == ':');
  const std::string info = stderr_of([] { core::stderr_log("edge")(core::log_level::info, "connected"); });
  CHECK(contains(info, "] connected\n"));  // info carries no level word
}

TEST_CASE("log levels: one table of names, ordered by severity") {
  CHECK(core::k_log_level_names.find("warning") == core::log_level::warning);
  CHECK_FALSE(core::k_log_level_names.find("debug").has_value());
  CHECK(core::log_level::info < core::log_level::warning);
  CHECK(core::log_level::warning < core::log_level::error);
}

TEST_CASE("log_format json: one object per line, stable fields, every message escaped into valid JSON") {
  // 2026-12-04T14:03:07.251Z
  const auto when = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796392987251));
  CHECK(core::json_log_line("hub", core::log_level::warning, "update from pi-07 refused", when) ==
        R"({"time":"2026-12-04T14:03:07.251Z","level":"warning","source":"hub","message":"update from pi-07 refused"})");
  CHECK(core::json_quote("a\"b\\c\nd\te\x01") == R"("a\"b\\c\nd\te\u0001")");
  CHECK(core::json_quote("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");  // valid UTF-8 kept
  // A peer's bytes that are not UTF-8 (a lone continuation, an overlong, a surrogate, a cut sequence) become U+FFFD.
  CHECK(core::json_quote("x\x80y") == "\"x\xef\xbf\xbdy\"");
  CHECK(core::json_quote("\xc0\xaf") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(core::json_quote("\xed\xa0\x80") == "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(core::json_quote("\xe2\x82") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");

  const std::string out = stderr_of([] {
    const core::log_sink log = core::stderr_log("edge", core::log_level::info, core::log_format::json);
    log(core::log_level::info, "connected");
    log(core::log_level::error, "line\nbreak");
  });
  const auto first = out.find('\n');
  REQUIRE(first != std::string::npos);
  CHECK(out.substr(0, 9) == "{\"time\":\"");
  CHECK(contains(out.substr(0, first), R"("level":"info","source":"edge","message":"connected"})"));
  CHECK(contains(out.substr(first + 1), R"("level":"error","source":"edge","message":"line\nbreak"})"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);  // the message's newline is escaped, not a line
  CHECK(core::k_log_format_names.find("json") == core::log_format::json);
}
