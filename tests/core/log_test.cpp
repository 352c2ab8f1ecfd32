// Tests of tessera/core/log.hpp: the standard sink's line format and its level.
#include "tessera/core/log.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

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
