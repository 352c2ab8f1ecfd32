// Shared by the benchmarks: end the run with a message on the first error, and take a result's value.
//
//   auto shards = bench::must(sim::write_shards(cfg, dir));   // or: "bench: <the error's message>", exit 1
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/core/base/error.hpp"

namespace tessera::bench {

[[noreturn]] inline void die(const std::string& m) {
  std::fprintf(stderr, "bench: %s\n", m.c_str());
  std::exit(1);
}
template <class T>
T must(core::result<T> r) {
  if (!r) die(r.error().message);
  return std::move(r).value();
}
inline void must(core::result<void> r) {
  if (!r) die(r.error().message);
}
// An option's value that must be a JSON object (run-configuration fields to merge, e.g. --ist).
inline nlohmann::json json_object_option(const std::string& flag, const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) die(flag + ": \"" + text + "\" is not a JSON object of run-configuration fields");
  return j;
}

}  // namespace tessera::bench
