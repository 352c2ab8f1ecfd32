// tessera/core/data/targets.hpp — are a dataset's targets what a model can learn from?
//
// Classification needs whole-number labels in [0, outputs); regression needs finite targets and one
// output. A target_summary is taken in one pass over the data (the simulator's and the hub's tables as
// they load, an agent's files when it opens them) and checked against a model later: an agent learns
// the model only from its first assignment. Errors name the file and the row: the CSV line, the record
// of an IDX or .npy labels file (found again only when there is an error).
//
//   core::target_summary s;
//   s.add(table.targets());                                          // any number of calls, in order
//   TESSERA_TRY(core::check_targets(s, spec.task, spec.outputs, source));
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/data_source.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

struct target_summary {
  std::int64_t examples = 0;
  float min = 0, max = 0;              // of the finite targets
  std::int64_t min_at = -1, max_at = -1;
  std::int64_t first_not_finite = -1;  // example index, -1 if none
  std::int64_t first_fractional = -1;  // a finite target that is not a whole number
  float fractional = 0;

  // Takes the next targets, in the data's order.
  void add(std::span<const float> targets) noexcept;
};

// Whether targets so summarised suit a model of `task` with `outputs` outputs. `where(i)` says where
// example i (counting from 0) is, as "file: line 13"; it is called only for an error.
using example_locator = std::function<std::string(std::int64_t)>;
[[nodiscard]] result<void> check_targets(const target_summary& s, task_kind task, std::int64_t outputs,
                                         const example_locator& where);
// The same for the examples of `source`, located with locate_example.
[[nodiscard]] result<void> check_targets(const target_summary& s, task_kind task, std::int64_t outputs,
                                         const data_source& source);

}  // namespace tessera::core
