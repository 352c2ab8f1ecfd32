// Secure aggregation's inputs: a device's weighted change, its encoding in the ring, the values on the
// wire, and the sums computed from unmasked encodings (tessera-sim).
#include <algorithm>
#include <cmath>
#include <string>

#include "secagg_checks.hpp"
#include "tessera/core/base/endian.hpp"
#include "tessera/crypto/noise.hpp"
#include "tessera/crypto/secagg.hpp"

namespace tessera::crypto {

using detail::check_params;
using detail::check_segments;

void secagg_pack(std::span<const std::uint64_t> y, int bits, std::span<std::byte> out) {
  const std::size_t w = secagg_value_bytes(bits);
  const std::size_t n = std::min(y.size(), out.size() / w);  // as many whole values as fit
  core::le_writer writer(out);
  for (std::size_t i = 0; i < n; ++i) writer.uint(y[i], w);
}

core::result<std::vector<std::uint64_t>> secagg_unpack(std::span<const std::byte> in, int bits) {
  const std::size_t w = secagg_value_bytes(bits);
  if (in.size() % w != 0)
    return make_error(errc::bad_format, std::to_string(in.size()) + " bytes of masked values, not a multiple of " + std::to_string(w));
  const std::uint64_t high = bits >= 64 ? 0 : ~((std::uint64_t{1} << bits) - 1);
  std::vector<std::uint64_t> y(in.size() / w);
  core::le_reader r(in);
  for (std::size_t i = 0; i < y.size(); ++i) {
    std::uint64_t v = 0;
    const bool read = r.uint(v, w);
    TESSERA_ASSERT(read);  // the size is a multiple of w
    if ((v & high) != 0) return make_error(errc::bad_format, "masked value " + std::to_string(i) + " lies outside the ring");
    y[i] = v;
  }
  return y;
}

namespace {

// Each covered segment's values weight·(trained − received), then the weight's value: weight·clip, or 0
// for an unweighted (private) input.
core::result<std::vector<std::vector<float>>> segment_inputs(std::span<const float> received, std::span<const float> trained,
                                                             double weight, bool weight_value, const secagg_params& p,
                                                             std::span<const std::uint32_t> segments) {
  if (received.size() != trained.size())
    return make_error(errc::invalid_argument, std::to_string(trained.size()) + " trained values for " + std::to_string(received.size()) + " received");
  if (!(weight >= 0.0 && weight <= 1.0)) return make_error(errc::invalid_argument, "an input weight outside [0, 1]");
  std::vector<std::vector<float>> out;
  std::size_t at = 0;
  for (const std::uint32_t seg : segments) {
    if (seg >= p.segments.size() || p.segments[seg].length < 2)
      return make_error(errc::invalid_argument, "segment " + std::to_string(seg) + " cannot hold an input and its weight");
    const std::size_t n = p.segments[seg].length - 1;
    if (received.size() - at < n)
      return make_error(errc::invalid_argument, "an update of " + std::to_string(received.size()) + " values does not fill its segments");
    std::vector<float> v(n + 1);
    for (std::size_t i = 0; i < n; ++i, ++at)
      if (!std::isfinite(trained[at]) || !std::isfinite(received[at]))
        return make_error(errc::invalid_argument, "value " + std::to_string(at) + " of the update is not finite");
      else
        v[i] = static_cast<float>(weight * (static_cast<double>(trained[at]) - static_cast<double>(received[at])));
    // The weight's value, at most weight·clip (a float rounded up past the clip would count as clipped).
    const double w = weight_value ? weight * p.clip : 0.0;
    v[n] = static_cast<float>(w);
    if (static_cast<double>(v[n]) > w) v[n] = std::nextafter(v[n], 0.0f);
    out.push_back(std::move(v));
  }
  if (at != received.size())
    return make_error(errc::invalid_argument, "an update of " + std::to_string(received.size()) + " values, its segments hold " + std::to_string(at));
  return out;
}

}  // namespace

core::result<std::vector<std::vector<float>>> secagg_weighted_input(std::span<const float> received, std::span<const float> trained,
                                                                    double weight, const secagg_params& p,
                                                                    std::span<const std::uint32_t> segments) {
  return segment_inputs(received, trained, weight, true, p, segments);
}

bool secagg_draws_in(const secagg_params& p, key256_view key) {
  if (!(p.sample_rate > 0 && p.sample_rate < 1)) return true;
  keystream coin(key);
  return coin.next_unit() < p.sample_rate;
}

core::result<std::vector<std::vector<float>>> secagg_change_input(std::span<const float> received, std::span<const float> trained,
                                                                  const secagg_params& p, std::span<const std::uint32_t> segments,
                                                                  bool fitted, bool drawn) {
  TESSERA_ASSIGN_OR_RETURN(auto in, segment_inputs(received, trained, drawn ? 1.0 : 0.0, false, p, segments));
  if (p.fitted_value > 0 && !in.empty() && drawn) in.back().back() = static_cast<float>(fitted ? p.fitted_value : -p.fitted_value);
  return in;
}

core::result<secagg_encoded> secagg_encode(const secagg_params& p, std::size_t summands, std::span<const std::uint32_t> segments,
                                           const std::vector<std::vector<float>>& input, key256_view rounding_key,
                                           const key256* noise_key) {
  if (input.size() != segments.size())
    return make_error(errc::invalid_argument, std::to_string(input.size()) + " input vectors for " + std::to_string(segments.size()) + " segments");
  TESSERA_TRY(detail::check_noise(p));
  if (p.noise > 0 && noise_key == nullptr) return make_error(errc::invalid_argument, "a private input without a noise key");
  TESSERA_ASSIGN_OR_RETURN(const auto fp, fixed_point::create(p.clip, p.bits, secagg_summands(p, summands)));
  keystream rounding(rounding_key);
  secagg_encoded out;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::uint32_t seg = segments[i];
    if (seg >= p.segments.size() || input[i].size() != p.segments[seg].length)
      return make_error(errc::invalid_argument, "segment " + std::to_string(seg) + ": " + std::to_string(input[i].size()) +
                                                    " values, not the segment's length");
    const std::size_t at = out.y.size();
    out.y.resize(at + input[i].size());
    out.clipped += fp.encode(input[i], std::span(out.y).subspan(at), &rounding);
  }
  if (p.noise > 0) {
    // The device's share of the noise, added in the ring after rounding: its values may now pass
    // ±limit (the ring's summands leave room for that).
    skellam_sampler noise(*noise_key, p.noise);
    const std::uint64_t m = p.bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << p.bits) - 1;
    for (auto& y : out.y) y = (y + static_cast<std::uint64_t>(noise.next())) & m;
  }
  return out;
}

secagg_plain_sum::secagg_plain_sum(secagg_params params, std::size_t summands)
    : params_(std::move(params)), summands_(summands), contributors_(params_.segments.size(), 0) {
  for (const auto& s : params_.segments) acc_.emplace_back(s.length, 0);
}

core::result<void> secagg_plain_sum::add(std::span<const std::uint32_t> segments, const secagg_encoded& e) {
  TESSERA_TRY(check_params(params_));
  TESSERA_TRY(check_segments({segments.begin(), segments.end()}, params_.segments.size(), "an input"));
  if (++added_ > summands_)
    return make_error(errc::invalid_argument, "more inputs than the " + std::to_string(summands_) + " the ring was sized for");
  std::size_t length = 0;
  for (const std::uint32_t seg : segments) length += params_.segments[seg].length;
  if (e.y.size() != length)
    return make_error(errc::invalid_argument, std::to_string(e.y.size()) + " encoded values, expected " + std::to_string(length));
  std::size_t at = 0;
  for (const std::uint32_t seg : segments) {
    add_into(acc_[seg], std::span(e.y).subspan(at, acc_[seg].size()), params_.bits);
    at += acc_[seg].size();
    ++contributors_[seg];
  }
  clipped_ += e.clipped;
  return {};
}

core::result<std::vector<secagg_segment_sum>> secagg_plain_sum::finish() const {
  TESSERA_ASSIGN_OR_RETURN(const auto fp, fixed_point::create(params_.clip, params_.bits, secagg_summands(params_, summands_)));
  std::vector<secagg_segment_sum> out(params_.segments.size());
  for (std::size_t seg = 0; seg < out.size(); ++seg) {
    out[seg].contributors = contributors_[seg];
    if (contributors_[seg] < secagg_release_minimum(params_, seg)) {
      out[seg].withheld = detail::too_few(contributors_[seg], params_, seg);
      continue;
    }
    out[seg].released = true;
    out[seg].sum.resize(acc_[seg].size());
    fp.decode_sum(acc_[seg], out[seg].sum);
  }
  return out;
}

}  // namespace tessera::crypto
