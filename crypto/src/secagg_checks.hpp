// crypto/src/secagg_checks.hpp — internal: the checks secure aggregation's server and plain sum share.
#pragma once

#include <string>
#include <vector>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/noise.hpp"
#include "tessera/crypto/secagg.hpp"

namespace tessera::crypto::detail {

inline core::result<void> check_noise(const secagg_params& p) {
  if (!(p.noise >= 0 && p.noise <= k_max_skellam_variance))
    return make_error(errc::invalid_argument, "a noise variance of " + std::to_string(p.noise) + " ring steps² (0 to 2^50)");
  if (p.noise_contributors == 1 || (p.noise_contributors > 0 && !(p.noise > 0)))
    return make_error(errc::invalid_argument, "noise sized for " + std::to_string(p.noise_contributors) + " contributor(s) in a round " +
                                                  (p.noise > 0 ? "(at least 2, or 0)" : "without noise"));
  if (!(p.fitted_value >= 0 && p.fitted_value <= p.clip))
    return make_error(errc::invalid_argument, "a fitted-change value of " + std::to_string(p.fitted_value) + " outside [0, clip]");
  return {};
}

inline core::result<void> check_params(const secagg_params& p) {
  TESSERA_TRY(check_noise(p));
  if (p.segments.empty()) return make_error(errc::invalid_argument, "secure aggregation over no segments");
  if (p.threshold < 2) return make_error(errc::invalid_argument, "a secure aggregation threshold below 2 reveals single devices");
  if (p.neighbors == 1) return make_error(errc::invalid_argument, "one neighbour per device cannot connect a segment's devices");
  for (std::size_t s = 0; s < p.segments.size(); ++s)
    if (p.segments[s].min_aggregate < 2)
      return make_error(errc::invalid_argument, "segment " + std::to_string(s) + ": min_aggregate below 2 reveals single devices");
  return {};
}

inline core::result<void> check_segments(const std::vector<std::uint32_t>& segments, std::size_t count, const std::string& id) {
  if (segments.empty()) return make_error(errc::invalid_argument, id + " covers no segment");
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i] >= count) return make_error(errc::invalid_argument, id + " covers segment " + std::to_string(segments[i]) + ", which does not exist");
    if (i > 0 && segments[i] <= segments[i - 1]) return make_error(errc::invalid_argument, id + "'s segments are not sorted and distinct");
  }
  return {};
}

// Why a segment with `contributors` survivors was not released: below its min_aggregate, or below the
// contributors the devices' noise is sized for.
inline std::string too_few(std::size_t contributors, const secagg_params& p, std::size_t segment) {
  const std::size_t least = secagg_release_minimum(p, segment);
  return std::to_string(contributors) + " contributor" + (contributors == 1 ? "" : "s") +
         (least > p.segments[segment].min_aggregate ? ", below the " + std::to_string(least) + " the devices' noise is sized for"
                                                    : ", below the threshold " + std::to_string(least));
}

}  // namespace tessera::crypto::detail
