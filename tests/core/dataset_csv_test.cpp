// The CSV reader (dataset_csv.cpp): header lines, label columns, delimiters and line ends, numbers as
// written by people and spreadsheets, normalization, and one named case for every way it refuses input.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

namespace {

using tessera::testing::contains;
using tessera::testing::read_stream;
using tessera::testing::read_until_error;
using tessera::testing::temp_dir;
using tessera::testing::write_bytes;

}  // namespace

TEST_CASE("csv: header line, label in the first column") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "label,a,b\n1,0.5,2\n0, -1.25 ,+3\n\n2,1e2,-0\n");
  core::csv_options opt;
  opt.header = true;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 2);
  CHECK(s.value()->size_hint() == -1);
  CHECK(s.value()->describe() == path);
  const auto all = read_stream(*s.value(), 2);
  CHECK(all.x == std::vector<float>{0.5f, 2.0f, -1.25f, 3.0f, 100.0f, -0.0f});
  CHECK(all.y == std::vector<float>{1, 0, 2});
  REQUIRE(s.value()->rewind().ok());
  CHECK(read_stream(*s.value(), 10).y == all.y);
}

TEST_CASE("csv: no header, label in the last column, other delimiter, CRLF, no final newline") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "1;2;3;7\r\n4;5;6;8\r\n0.25;.5;5.;9");
  core::csv_options opt;
  opt.label_column = 3;
  opt.delimiter = ';';
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  CHECK(s.value()->feature_count() == 3);
  const auto all = read_stream(*s.value(), 1);
  CHECK(all.x == std::vector<float>{1, 2, 3, 4, 5, 6, 0.25f, 0.5f, 5.0f});
  CHECK(all.y == std::vector<float>{7, 8, 9});
}

TEST_CASE("csv: scale_unit and standardize") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "0,0,255\n1,4,255\n");
  core::csv_options opt;
  opt.norm = core::normalization::scale_unit;
  CHECK(read_stream(*core::open_csv(path, opt).value(), 4).x == std::vector<float>{0, 1, 4 / 255.0f, 1});
  opt.norm = core::normalization::standardize;
  const auto measured = read_stream(*core::open_csv(path, opt).value(), 4);
  REQUIRE(measured.x.size() == 4);
  CHECK(measured.x[0] == doctest::Approx(-1.0));
  CHECK(measured.x[1] == doctest::Approx(0.0));
  CHECK(measured.x[2] == doctest::Approx(1.0));
  CHECK(measured.x[3] == doctest::Approx(0.0));
  CHECK(measured.y == std::vector<float>{0, 1});
}

TEST_CASE("csv: non-numeric cell names line and column") {
  temp_dir dir;
  const std::string path = dir.file("data.csv");
  write_bytes(path, "y,a,b,c\n1,2,3,4\n1,2,3,abc\n");
  core::csv_options opt;
  opt.header = true;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "data.csv: line 3, column 4: 'abc' is not a number"));
  // The error stays until rewind, and the stream does not skip past the bad line.
  std::vector<float> x(3);
  std::vector<float> y(1);
  CHECK_FALSE(s.value()->read(x, y).ok());
  REQUIRE(s.value()->rewind().ok());
  CHECK(s.value()->read(x, y).value() == 1);

  const std::string empty_cell = dir.file("empty-cell.csv");
  write_bytes(empty_cell, "1,,3\n");
  auto ec = core::open_csv(empty_cell, {});
  REQUIRE(ec.ok());
  const auto ee = read_until_error(*ec.value());
  CHECK(ee.code == core::errc::bad_format);
  CHECK(contains(ee.message, "empty-cell.csv: line 1, column 2: '' is not a number"));

  const std::string unexpected_header = dir.file("header.csv");  // a header, but header = false
  write_bytes(unexpected_header, "label,x\n1,2\n");
  auto uh = core::open_csv(unexpected_header, {});
  REQUIRE(uh.ok());
  const auto he = read_until_error(*uh.value());
  CHECK(he.code == core::errc::bad_format);
  CHECK(contains(he.message, "header.csv: line 1, column 1: 'label' is not a number (a header line? set header)"));
}

TEST_CASE("csv: ragged row is refused") {
  temp_dir dir;
  const std::string path = dir.file("ragged.csv");
  write_bytes(path, "1,2,3\n4,5,6\n7,8\n");
  auto s = core::open_csv(path, {});
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "ragged.csv: line 3 has 2 columns, expected 3"));
}

TEST_CASE("csv: over-long line is refused") {
  temp_dir dir;
  const std::string path = dir.file("long.csv");
  // The second line spans several 64 KiB reads: the bound must hold across buffer refills.
  std::string text = "1,2\n1,";
  text.append(200000, '5');
  text += "\n";
  write_bytes(path, text);
  core::csv_options opt;
  opt.max_line_bytes = 100000;
  auto s = core::open_csv(path, opt);
  REQUIRE(s.ok());
  const auto e = read_until_error(*s.value());
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "long.csv: line 2 is longer than max_line_bytes (100000)"));

  opt.max_line_bytes = 2;  // even the first line is too long: found while opening
  auto first = core::open_csv(path, opt);
  REQUIRE_FALSE(first.ok());
  CHECK(first.error().code == core::errc::bad_format);
  CHECK(contains(first.error().message, "long.csv: line 1 is longer"));
}

TEST_CASE("csv: NaN and infinite cells are refused") {
  temp_dir dir;
  for (const std::string cell : {"nan", "NaN", "inf", "-infinity", "1e999", "1e39"}) {
    CAPTURE(cell);
    const std::string path = dir.file("nan.csv");
    write_bytes(path, "0,1,2\n1,2," + cell + "\n");
    auto s = core::open_csv(path, {});
    REQUIRE(s.ok());
    const auto e = read_until_error(*s.value());
    CHECK(e.code == core::errc::not_finite);
    CHECK(contains(e.message, "nan.csv: line 2, column 3: '" + cell + "'"));
  }
  // Too small for a float is not an error: it is 0.
  const std::string tiny = dir.file("tiny.csv");
  write_bytes(tiny, "0,1e-400\n");
  CHECK(read_stream(*core::open_csv(tiny, {}).value(), 1).x == std::vector<float>{0.0f});
}

TEST_CASE("csv: empty file is refused") {
  temp_dir dir;
  const std::string empty = dir.file("empty.csv");
  write_bytes(empty, "");
  auto e = core::open_csv(empty, {});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == core::errc::bad_format);
  CHECK(contains(e.error().message, "empty.csv: no data lines"));

  const std::string header_only = dir.file("header-only.csv");
  write_bytes(header_only, "label,a\n\n");
  core::csv_options opt;
  opt.header = true;
  auto h = core::open_csv(header_only, opt);
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == core::errc::bad_format);
  CHECK(contains(h.error().message, "header-only.csv: no data lines after the header"));
}

TEST_CASE("csv: a label column past the last column is refused") {
  temp_dir dir;
  const std::string path = dir.file("narrow.csv");
  write_bytes(path, "1,2\n");
  core::csv_options opt;
  opt.label_column = 2;
  auto r = core::open_csv(path, opt);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::invalid_argument);
  CHECK(contains(r.error().message, "narrow.csv"));

  const std::string single = dir.file("single.csv");
  write_bytes(single, "1\n2\n");
  auto one = core::open_csv(single, {});
  REQUIRE_FALSE(one.ok());
  CHECK(one.error().code == core::errc::bad_format);
  CHECK(contains(one.error().message, "single.csv: line 1 has 1 column"));
}

TEST_CASE("csv: missing file is an io error") {
  temp_dir dir;
  auto r = core::open_csv(dir.file("missing.csv"), {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::errc::io);
  CHECK(contains(r.error().message, "missing.csv: cannot open: No such file"));
}
