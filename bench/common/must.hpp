// Shared by the benchmarks: end the run with a message on the first error, and take a result's value.
//
//   auto shards = bench::must(sim::write_shards(cfg, dir));   // or: "bench: <the error's message>", exit 1
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "tessera/core/error.hpp"

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

}  // namespace tessera::bench
