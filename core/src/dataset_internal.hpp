// Private to the dataset readers: what dataset.cpp, dataset_idx.cpp and dataset_csv.cpp share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/dataset.hpp"

namespace tessera::core::detail {

// Checks `stats` against `features` and turns it into what the readers' inner loops use: the mean and
// the reciprocal of the standard deviation per feature, with a deviation of 0 treated as 1.
result<void> prepare_standardize(const feature_stats& stats, std::int64_t features, const std::string& what,
                                 std::vector<float>& mean, std::vector<float>& inv_stddev);

}  // namespace tessera::core::detail
