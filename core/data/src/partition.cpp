#include "tessera/core/data/partition.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tessera/core/base/rng.hpp"

namespace tessera::core {
namespace {

double standard_normal(rng& r) {
  const double u1 = 1.0 - r.uniform_double();
  const double u2 = r.uniform_double();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 through the boost U^(1/shape).
double gamma_sample(rng& r, double shape) {
  if (shape < 1.0) {
    const double u = 1.0 - r.uniform_double();
    return gamma_sample(r, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0;
    double v = 0;
    do {
      x = standard_normal(r);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - r.uniform_double();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

}  // namespace

shard_list shard_iid(std::int64_t n, std::size_t devices, std::uint64_t seed) {
  TESSERA_ASSERT(devices > 0 && n >= 0);
  std::vector<std::uint32_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0u);
  rng r(mix_seed(seed, 0x5a4d));
  shuffle(all.begin(), all.end(), r);
  shard_list shards(devices);
  for (std::size_t i = 0; i < all.size(); ++i) shards[i % devices].push_back(all[i]);
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

result<shard_list> shard_dirichlet(std::span<const float> labels, std::int64_t classes, std::size_t devices,
                                   double alpha, std::uint64_t seed, std::size_t min_examples) {
  if (devices == 0 || classes < 1 || !(alpha > 0))
    return make_error(errc::invalid_argument, "dirichlet sharding needs devices > 0, classes > 0 and alpha > 0");
  std::vector<std::vector<std::uint32_t>> by_class(static_cast<std::size_t>(classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float y = labels[i];
    if (!(y >= 0 && y < static_cast<float>(classes)) || y != std::floor(y))
      return make_error(errc::bad_format, "dirichlet sharding: example " + std::to_string(i) + " has label " +
                                              std::to_string(y) + ", not a class in [0, " + std::to_string(classes) + ")");
    by_class[static_cast<std::size_t>(y)].push_back(static_cast<std::uint32_t>(i));
  }
  rng r(mix_seed(seed, 0xd112));
  constexpr int k_attempts = 100;
  for (int attempt = 0; attempt < k_attempts; ++attempt) {
    shard_list shards(devices);
    for (auto members : by_class) {
      shuffle(members.begin(), members.end(), r);
      std::vector<double> p(devices);
      double total = 0;
      for (auto& v : p) total += (v = gamma_sample(r, alpha));
      // Cut points by cumulative proportion, so the class is dealt out exactly once.
      double acc = 0;
      std::size_t begin = 0;
      for (std::size_t d = 0; d < devices; ++d) {
        acc += p[d] / total;
        const std::size_t end = d + 1 == devices ? members.size()
                                                  : std::min(members.size(), static_cast<std::size_t>(std::llround(acc * static_cast<double>(members.size()))));
        for (std::size_t i = begin; i < std::max(begin, end); ++i) shards[d].push_back(members[i]);
        begin = std::max(begin, end);
      }
    }
    const bool enough = std::all_of(shards.begin(), shards.end(), [&](const auto& s) { return s.size() >= min_examples; });
    if (enough) {
      for (auto& s : shards) std::sort(s.begin(), s.end());
      return shards;
    }
  }
  return make_error(errc::invalid_argument, "dirichlet sharding: no draw in " + std::to_string(k_attempts) +
                                                " gave every device at least " + std::to_string(min_examples) +
                                                " examples; raise alpha or use fewer devices");
}

}  // namespace tessera::core
