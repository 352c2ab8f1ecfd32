#include "tessera/core/data/data_source.hpp"

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

namespace tessera::core {
namespace {

bool is_gzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;  // the reader reports the missing file with its own message
  unsigned char magic[2] = {0, 0};
  const bool gz = std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::fclose(f);
  return gz;
}

}  // namespace

data_source read_data_source(config_reader& r, const data_source& defaults, const data_source_rules& rules) {
  data_source s;
  s.format = r.choice("format", defaults.format, k_data_format_names, "idx (MNIST's format, plain or gzip), npy or csv");
  s.features = r.string("features", defaults.features, "IDX images, .npy features, or the CSV file");
  s.labels = r.string("labels", defaults.labels, "IDX labels or .npy labels (not for csv)");
  s.label_column = static_cast<std::size_t>(r.integer("label_column", static_cast<std::int64_t>(defaults.label_column), 0, 1 << 20,
                                                      "csv: the column holding the label"));
  s.header = r.boolean("header", defaults.header, "csv: the first line names the columns");
  const normalization fallback = s.format == data_format::csv && !r.describing() ? rules.csv_default : defaults.norm;
  s.norm = r.choice("normalization", fallback, k_normalization_names,
                    "none, scale_unit (/255, images) or standardize (per-feature mean and deviation)");
  if (rules.csv_default != defaults.norm)
    r.default_is("normalization", std::string(k_normalization_names.name(defaults.norm)) + " (csv: " +
                                      std::string(k_normalization_names.name(rules.csv_default)) + ")");
  s.max_examples = r.integer("max_examples", defaults.max_examples, 1, std::int64_t{1} << 31,
                             "a bound: a source loaded whole refuses more examples");
  if (s.norm == normalization::standardize && !rules.allow_standardize)
    r.fail("normalization", "standardize is not offered here (none or scale_unit)");
  if (rules.required && s.features.empty()) r.fail("features", "required: the file of the examples");
  if (rules.required && s.format != data_format::csv && s.labels.empty())
    r.fail("labels", "required for " + std::string(k_data_format_names.name(s.format)));
  return s;
}

result<opened_data> open_data(const data_source& s, const input_normalization* stats) {
  opened_data out;
  input_normalization given = stats != nullptr ? *stats : input_normalization{};
  switch (s.format) {
    case data_format::npy: {
      TESSERA_ASSIGN_OR_RETURN(out.table, open_npy(s.features, s.labels, {.norm = s.norm, .stats = std::move(given)}));
      break;
    }
    case data_format::idx: {
      const idx_options o{.norm = s.norm, .stats = std::move(given)};
      if (!is_gzip(s.features) && !is_gzip(s.labels)) {
        TESSERA_ASSIGN_OR_RETURN(out.table, open_idx_table(s.features, s.labels, o));
      } else {
        TESSERA_ASSIGN_OR_RETURN(out.stream, open_idx(s.features, s.labels, o));
      }
      break;
    }
    case data_format::csv: {
      csv_options o;
      o.norm = s.norm;
      o.stats = std::move(given);
      o.label_column = s.label_column;
      o.header = s.header;
      TESSERA_ASSIGN_OR_RETURN(out.stream, open_csv(s.features, o));
      break;
    }
  }
  return out;
}

result<std::unique_ptr<example_stream>> open_data_stream(const data_source& s, const input_normalization* stats) {
  TESSERA_ASSIGN_OR_RETURN(opened_data d, open_data(s, stats));
  if (d.stream) return std::move(d.stream);
  return make_table_stream(std::move(d.table));
}

result<memory_table> load_data(const data_source& s, const input_normalization* stats, std::int64_t first) {
  TESSERA_ASSIGN_OR_RETURN(auto stream, open_data_stream(s, stats));
  if (first > 0) return load_first(*stream, std::min(first, s.max_examples));
  return load_all(*stream, s.max_examples);
}

std::string locate_example(const data_source& s, std::int64_t index) {
  const std::string row = "row " + std::to_string(index) + " (counting from 0)";
  if (s.format != data_format::csv) return s.labels + ": " + row;
  // Only the reader knows which line holds the example (a header, blank lines): read up to it.
  data_source raw = s;
  raw.norm = normalization::none;
  auto stream = open_data_stream(raw, nullptr);
  if (!stream) return s.features + ": example " + std::to_string(index) + " (counting from 0)";
  example_stream& in = *stream.value();
  std::vector<float> x(static_cast<std::size_t>(in.feature_count()));
  float y = 0;
  for (std::int64_t i = 0; i <= index; ++i) {
    auto got = in.read(x, std::span(&y, 1));
    if (!got || got.value() == 0) return s.features + ": example " + std::to_string(index) + " (counting from 0)";
  }
  return s.features + ": " + in.last_position();
}

result<input_normalization> measure_stats(const data_source& s) {
  data_source raw = s;
  raw.norm = normalization::none;
  TESSERA_ASSIGN_OR_RETURN(auto stream, open_data_stream(raw, nullptr));
  return compute_stats(*stream);
}

}  // namespace tessera::core
