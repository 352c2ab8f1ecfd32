// Tests of tessera/core/data/data_source.hpp: one configuration of a source, one opener by format.
#include "tessera/core/data/data_source.hpp"

#include <doctest/doctest.h>

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "test_files.hpp"

namespace core = tessera::core;
using json = nlohmann::json;
using namespace tessera::testing;

namespace {

// Six 2x2 images whose pixels are 10·label + position, labels 0..5.
void write_images(const temp_dir& d) {
  std::vector<std::uint8_t> px, lab;
  for (std::uint8_t i = 0; i < 6; ++i) {
    for (std::uint8_t p = 0; p < 4; ++p) px.push_back(static_cast<std::uint8_t>(10 * i + p));
    lab.push_back(i);
  }
  REQUIRE(core::write_idx_images(d.file("img"), 2, 2, px).ok());
  REQUIRE(core::write_idx_labels(d.file("lab"), lab).ok());
}

void gzip_file(const std::string& from, const std::string& to) {
  const std::string bytes = read_bytes(from);
  gzFile gz = gzopen(to.c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

core::data_source read(const json& j, const core::data_source_rules& rules, std::string* error = nullptr) {
  core::config_reader r(j, "cfg.json", "data");
  const core::data_source s = core::read_data_source(r, {}, rules);
  auto done = r.finish();
  if (error) *error = done.ok() ? "" : done.error().message;
  else REQUIRE_MESSAGE(done.ok(), (done.ok() ? "" : done.error().message));
  return s;
}

}  // namespace

TEST_CASE("data source: fields, defaults by format, and what each reader allows") {
  const core::data_source_rules strict{.required = true, .allow_standardize = false, .csv_default = core::normalization::none};
  auto idx = read({{"format", "idx"}, {"features", "i"}, {"labels", "l"}}, strict);
  CHECK(idx.format == core::data_format::idx);
  CHECK(idx.norm == core::normalization::scale_unit);
  auto csv = read({{"format", "csv"}, {"features", "t.csv"}, {"label_column", 3}, {"header", true}}, strict);
  CHECK(csv.norm == core::normalization::none);  // the reader's default for csv
  CHECK(csv.label_column == 3);
  CHECK(csv.header);
  auto sim_csv = read({{"format", "csv"}, {"features", "t.csv"}},
                      {.required = true, .allow_standardize = true, .csv_default = core::normalization::standardize});
  CHECK(sim_csv.norm == core::normalization::standardize);

  std::string error;
  (void)read({{"format", "idx"}, {"features", "i"}, {"labels", "l"}, {"normalization", "standardize"}}, strict, &error);
  CHECK(error == "cfg.json: field 'data.normalization': standardize is not offered here (none or scale_unit)");
  (void)read({{"format", "npy"}, {"features", "x.npy"}}, strict, &error);
  CHECK(error == "cfg.json: field 'data.labels': required for npy");
  (void)read({{"format", "parquet"}}, strict, &error);
  CHECK(error == "cfg.json: field 'data.format': 'parquet' is not one of: idx, npy, csv");
  (void)read(json::object(), {.required = false, .allow_standardize = false, .csv_default = core::normalization::none}, &error);
  CHECK(error.empty());
}

TEST_CASE("data source: a table where the files allow random access, a stream otherwise; the same examples") {
  temp_dir d;
  write_images(d);
  gzip_file(d.file("img"), d.file("img.gz"));
  gzip_file(d.file("lab"), d.file("lab.gz"));
  std::vector<std::int32_t> labels{0, 1, 2, 3, 4, 5};
  std::vector<float> features;
  for (int i = 0; i < 6; ++i)
    for (int p = 0; p < 4; ++p) features.push_back(static_cast<float>(10 * i + p));
  REQUIRE(core::write_npy_features(d.file("x.npy"), 4, features).ok());
  REQUIRE(core::write_npy_labels(d.file("y.npy"), labels).ok());
  {
    std::ofstream csv(d.file("t.csv"));
    for (int i = 0; i < 6; ++i) csv << 10 * i << ',' << 10 * i + 1 << ',' << 10 * i + 2 << ',' << 10 * i + 3 << ',' << i << '\n';
  }
  const core::data_source plain{.format = core::data_format::idx, .features = d.file("img"), .labels = d.file("lab"),
                                .norm = core::normalization::none};
  core::data_source gz = plain, npy = plain, csv = plain;
  gz.features = d.file("img.gz");
  gz.labels = d.file("lab.gz");
  npy.format = core::data_format::npy;
  npy.features = d.file("x.npy");
  npy.labels = d.file("y.npy");
  csv.format = core::data_format::csv;
  csv.features = d.file("t.csv");
  csv.labels.clear();
  csv.label_column = 4;

  struct expect {
    const core::data_source* source;
    bool table;
  };
  for (const auto& [source, table] : {expect{&plain, true}, expect{&gz, false}, expect{&npy, true}, expect{&csv, false}}) {
    INFO(core::k_data_format_names.name(source->format), " ", source->features);
    auto opened = core::open_data(*source, nullptr);
    REQUIRE_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error().message));
    CHECK((opened.value().table != nullptr) == table);
    CHECK((opened.value().stream != nullptr) == !table);
    auto loaded = core::load_data(*source, nullptr);
    REQUIRE(loaded.ok());
    CHECK(loaded.value().size() == 6);
    CHECK(std::equal(loaded.value().features().begin(), loaded.value().features().end(), features.begin()));
    CHECK(loaded.value().targets()[5] == 5.0f);
    auto first = core::load_data(*source, nullptr, 2);
    REQUIRE(first.ok());
    CHECK(first.value().size() == 2);
  }
  core::data_source bounded = npy;
  bounded.max_examples = 5;
  auto refused = core::load_data(bounded, nullptr);
  REQUIRE_FALSE(refused.ok());
  CHECK(contains(refused.error().message, "5"));
}

TEST_CASE("data source: statistics of the raw values, whatever the source's normalization") {
  temp_dir d;
  write_images(d);
  const core::data_source s{.format = core::data_format::idx, .features = d.file("img"), .labels = d.file("lab"),
                            .norm = core::normalization::scale_unit};
  auto stats = core::measure_stats(s);
  REQUIRE(stats.ok());
  REQUIRE(stats.value().mean.size() == 4);
  CHECK(stats.value().mean[0] == doctest::Approx(25.0));  // pixels 0, 10, ..., 50
  CHECK(stats.value().mean[3] == doctest::Approx(28.0));
  CHECK(stats.value().std[0] == doctest::Approx(std::sqrt(1750.0 / 6.0)).epsilon(1e-4));  // population deviation
}
