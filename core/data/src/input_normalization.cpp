#include "tessera/core/data/input_normalization.hpp"

#include "tessera/core/base/assert.hpp"

namespace tessera::core {

void normalize_rows(std::span<float> rows, const input_normalization& n) noexcept {
  const std::size_t f = n.size();
  if (f == 0) return;
  TESSERA_ASSERT(rows.size() % f == 0 && n.std.size() == f);
  for (std::size_t i = 0; i < rows.size(); i += f)
    for (std::size_t j = 0; j < f; ++j) rows[i + j] = (rows[i + j] - n.mean[j]) / n.std[j];
}

}  // namespace tessera::core
