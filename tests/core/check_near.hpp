// Shared by tests/core's hand-computed cases: every entry of a float vector within a few float roundings
// (relative 1e-6) of its value computed by hand in double.
#pragma once

#include <doctest/doctest.h>

#include <vector>

namespace tessera::testing {

inline void check_near(const std::vector<float>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
  }
}

}  // namespace tessera::testing
