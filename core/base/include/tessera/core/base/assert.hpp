// tessera/core/base/assert.hpp — an always-on assertion for programming errors.
//
// TESSERA_ASSERT(cond) aborts with file, line and the failed condition whenever `cond` is false,
// in every build type. It guards invariants of our own code (a layout that must add up, an index the
// caller promised is in range); it is never used to validate input, which gets a typed error instead.
//
//   TESSERA_ASSERT(offset + size <= buffer.size());
#pragma once

namespace tessera::core::detail {
[[noreturn]] void assertion_failed(const char* condition, const char* file, int line) noexcept;
}  // namespace tessera::core::detail

#define TESSERA_ASSERT(cond)                                                     \
  do {                                                                           \
    if (!(cond)) [[unlikely]]                                                    \
      ::tessera::core::detail::assertion_failed(#cond, __FILE__, __LINE__);      \
  } while (false)
