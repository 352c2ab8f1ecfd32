// tessera/core/data/data_source.hpp — where examples come from: one configuration and one opener by format.
//
// The agent's data, the hub's validation set and the simulator's training and test sets are each a
// data_source, read from the same configuration fields and opened by the same function:
//
//   field          meaning
//   format         idx | npy | csv
//   features       IDX images, .npy features (float32 or uint8), or the CSV file
//   labels         IDX labels or .npy labels (class indices, or float targets for regression); not CSV
//   label_column   CSV: which column holds the label (the others are features)
//   header         CSV: the first line names the columns
//   normalization  none | scale_unit (÷255, for images) | standardize (per-feature mean and deviation)
//   max_examples   a bound: a source loaded whole refuses to hold more
//
// open_data() gives a table where the files can be read at random (.npy, uncompressed IDX) and a stream
// otherwise (CSV, gzip IDX); load_data() reads any of them into memory.
//
//   core::config_reader r(json, "hub.json");
//   core::data_source v = core::read_data_source(r.child("validation", *obj), {}, {.required = true});
//   TESSERA_ASSIGN_OR_RETURN(core::memory_table t, core::load_data(v, nullptr));
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/config/json_config.hpp"
#include "tessera/core/data/dataset.hpp"

namespace tessera::core {

enum class data_format { idx, npy, csv };
inline constexpr auto k_data_format_names = names_in_order<data_format>({"idx", "npy", "csv"});

struct data_source {
  data_format format = data_format::idx;
  std::string features{};
  std::string labels{};
  std::size_t label_column = 0;
  bool header = false;
  normalization norm = normalization::scale_unit;  // the default for idx and npy; none for csv
  std::int64_t max_examples = 10'000'000;
};

// What a reader of sources allows where it reads them.
struct data_source_rules {
  bool required = true;             // features (and labels, for idx and npy) must be given
  bool allow_standardize = false;   // standardize needs statistics this reader can get
  normalization csv_default = normalization::none;
};

// Reads a source's fields (the table above) from `r`, each defaulting to `defaults`'. Errors are kept
// by the reader, naming the field.
[[nodiscard]] data_source read_data_source(config_reader& r, const data_source& defaults, const data_source_rules& rules);

struct opened_data {
  std::unique_ptr<example_table> table;    // random access, or
  std::unique_ptr<example_stream> stream;  // in order
};
// Opens a source by its format; `stats` (may be null) for standardize, measured in a first pass when
// absent.
[[nodiscard]] result<opened_data> open_data(const data_source& source, const input_normalization* stats);
// The source as a stream, whatever its format (a table read in order).
[[nodiscard]] result<std::unique_ptr<example_stream>> open_data_stream(const data_source& source, const input_normalization* stats);
// The whole source in memory (its first `first` examples when first > 0); refuses more than
// source.max_examples.
[[nodiscard]] result<memory_table> load_data(const data_source& source, const input_normalization* stats, std::int64_t first = 0);
// Where example `index` (counting from 0) of the source is, for messages: "data.csv: line 13" for CSV
// (read again up to it), "labels.npy: row 11 (counting from 0)" for the record of an IDX or .npy labels file.
[[nodiscard]] std::string locate_example(const data_source& source, std::int64_t index);
// Per-feature mean and deviation of the source's raw values (its normalization ignored).
[[nodiscard]] result<input_normalization> measure_stats(const data_source& source);

}  // namespace tessera::core
