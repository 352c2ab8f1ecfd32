// The CSV reader (dataset_csv.cpp): header lines, label columns, delimiters and line ends, numbers as
// written by people and spreadsheets, normalization, and one table of every way it refuses its input.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "test_files.hpp"

namespace core = tessera::core;

using namespace tessera::testing;

namespace {

// Options that differ from the defaults in one field.
core::csv_options header_line() {
  core::csv_options o;
  o.header = true;
  return o;
}
core::csv_options max_line(std::size_t bytes) {
  core::csv_options o;
  o.max_line_bytes = bytes;
  return o;
}
core::csv_options label_column(std::size_t column) {
  core::csv_options o;
  o.label_column = column;
  return o;
}
core::csv_options delimiter(char d) {
  core::csv_options o;
  o.delimiter = d;
  return o;
}

// `text` as the file data.csv in `dir`, opened with `options`.
std::unique_ptr<core::example_stream> open_text(const temp_dir& dir, std::string_view text,
                                                const core::csv_options& options = {}) {
  write_bytes(dir.file("data.csv"), text);
  auto s = core::open_csv(dir.file("data.csv"), options);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

}  // namespace

TEST_CASE("csv: header line, label in the first column") {
  temp_dir dir;
  const auto s = open_text(dir, "label,a,b\n1,0.5,2\n0, -1.25 ,+3\n\n2,1e2,-0\n", header_line());
  CHECK(s->feature_count() == 2);
  CHECK(s->size_hint() == -1);
  CHECK(s->describe() == dir.file("data.csv"));
  const auto all = read_stream(*s, 2);
  CHECK(all.x == std::vector<float>{0.5f, 2.0f, -1.25f, 3.0f, 100.0f, -0.0f});
  CHECK(all.y == std::vector<float>{1, 0, 2});
  REQUIRE(s->rewind().ok());
  CHECK(read_stream(*s, 10).y == all.y);
}

TEST_CASE("csv: no header, label in the last column, other delimiter, CRLF, no final newline") {
  temp_dir dir;
  core::csv_options opt = label_column(3);
  opt.delimiter = ';';
  const auto s = open_text(dir, "1;2;3;7\r\n4;5;6;8\r\n0.25;.5;5.;9", opt);
  CHECK(s->feature_count() == 3);
  const auto all = read_stream(*s, 1);
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

TEST_CASE("csv: an error stays until rewind, and the stream does not skip the bad line") {
  temp_dir dir;
  const auto s = open_text(dir, "y,a,b,c\n1,2,3,4\n1,2,3,abc\n", header_line());
  const auto e = read_until_error(*s);
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "data.csv: line 3, column 4: 'abc' is not a number"));
  std::vector<float> x(3);
  std::vector<float> y(1);
  const auto again = error_of(s->read(x, y));
  CHECK(again.message == e.message);
  REQUIRE(s->rewind().ok());
  CHECK(s->read(x, y).value() == 1);
}

TEST_CASE("csv: a number too small for a float is 0, not an error") {
  temp_dir dir;
  CHECK(read_stream(*open_text(dir, "0,1e-400\n1,-1e-50\n"), 2).x == std::vector<float>{0.0f, -0.0f});
}

TEST_CASE("csv: a UTF-8 byte order mark, as spreadsheets write, is not part of the first cell") {
  temp_dir dir;
  const auto with_header = open_text(dir, "\xEF\xBB\xBFlabel,a\n1,2\n", header_line());
  CHECK(read_stream(*with_header, 4).x == std::vector<float>{2});
  const auto data_first = open_text(dir, "\xEF\xBB\xBF" "3,4\n5,6\n");
  const auto all = read_stream(*data_first, 4);
  CHECK(all.y == std::vector<float>{3, 5});
  CHECK(all.x == std::vector<float>{4, 6});
}

TEST_CASE("csv: a line of exactly max_line_bytes is read") {
  temp_dir dir;
  const std::string line = "1," + std::string(98, '0');  // 100 bytes
  const auto s = open_text(dir, "0,1\n" + line + "\n", max_line(100));
  CHECK(read_stream(*s, 4).y == std::vector<float>{0, 1});
}

// ---- every way the reader must refuse its input: one enum, one generator, one table ---------------

namespace {

// A way a CSV file, or the options it is read with, can be wrong. bad_csv_text() writes each;
// csv_rejections() says how the reader must refuse it.
enum class bad_csv {
  not_a_number,          // 'abc' in line 3, column 4, after a header line
  empty_cell,            // 1,,3
  header_as_data,        // a header line read with header = false
  quoted_number,         // "2": quoting is not part of these files
  long_cell,             // 100 letters: the message quotes the first 40
  ragged_row,            // 2 columns in line 3 of a 3-column file
  line_too_long,         // a 200 000-byte line 2, max_line_bytes 100 000: found across buffer refills
  first_line_too_long,   // the same file with max_line_bytes 2: found on opening
  nan_cell,
  nan_capitalised,
  infinite_cell,
  negative_infinity,
  beyond_double,         // 1e999
  beyond_float,          // 1e39 is a double but no float
  no_data_lines,         // an empty file
  header_only,           // a header and a blank line
  label_column_missing,  // label column 3 of 2 columns
  single_column,         // a label and no feature
  zero_line_limit,       // max_line_bytes 0
  line_break_delimiter,  // '\n' as the delimiter
  missing_file,
};
constexpr std::size_t k_bad_csv_kinds = static_cast<std::size_t>(bad_csv::missing_file) + 1;

struct csv_rejection {
  bad_csv kind;
  std::string file;
  core::csv_options options;
  core::errc code;
  refused_by when;                // by open_csv, or by a read that reaches the line
  std::vector<std::string> says;  // what the message holds after the path: line, column, cell
};

// The text of the malformed file of `kind`; nullopt when the file must not exist.
std::optional<std::string> bad_csv_text(bad_csv kind) {
  // A valid file, two features and a label in column 1; most kinds change one cell of line 2 of it.
  const auto with_cell = [](const std::string& cell) { return "0,1,2\n1,2," + cell + "\n"; };
  using enum bad_csv;
  switch (kind) {
    case not_a_number: return "y,a,b,c\n1,2,3,4\n1,2,3,abc\n";
    case empty_cell: return "1,,3\n";
    case header_as_data: return "label,x\n1,2\n";
    case quoted_number: return with_cell("\"2\"");
    case long_cell: return with_cell(std::string(100, 'q'));
    case ragged_row: return "1,2,3\n4,5,6\n7,8\n";
    case line_too_long:
    case first_line_too_long: return "1,2\n1," + std::string(200000, '5') + "\n";
    case nan_cell: return with_cell("nan");
    case nan_capitalised: return with_cell("NaN");
    case infinite_cell: return with_cell("inf");
    case negative_infinity: return with_cell("-infinity");
    case beyond_double: return with_cell("1e999");
    case beyond_float: return with_cell("1e39");
    case no_data_lines: return "";
    case header_only: return "label,a\n\n";
    case label_column_missing: return "1,2\n";
    case single_column: return "1\n2\n";
    case zero_line_limit:
    case line_break_delimiter: return with_cell("3");
    case missing_file: return std::nullopt;
  }
  return std::nullopt;
}

// How the reader must refuse each kind, in the order of the enum.
const std::vector<csv_rejection>& csv_rejections() {
  using core::errc;
  using enum bad_csv;
  using enum refused_by;
  static const std::vector<csv_rejection> rows = {
      {not_a_number, "data.csv", header_line(), errc::bad_format, read, {"data.csv: line 3, column 4: 'abc' is not a number"}},
      {empty_cell, "empty-cell.csv", {}, errc::bad_format, read, {"empty-cell.csv: line 1, column 2: '' is not a number"}},
      {header_as_data, "header.csv", {}, errc::bad_format, read,
       {"header.csv: line 1, column 1: 'label' is not a number (a header line? set header)"}},
      {quoted_number, "quoted.csv", {}, errc::bad_format, read, {"quoted.csv: line 2, column 3: '\"2\"' is not a number"}},
      {long_cell, "long-cell.csv", {}, errc::bad_format, read,
       {"long-cell.csv: line 2, column 3: '" + std::string(40, 'q') + "...' is not a number"}},
      {ragged_row, "ragged.csv", {}, errc::bad_format, read, {"ragged.csv: line 3 has 2 columns, expected 3 (as line 1)"}},
      {line_too_long, "long.csv", max_line(100000), errc::bad_format, read,
       {"long.csv: line 2 is longer than max_line_bytes (100000)"}},
      {first_line_too_long, "long-first.csv", max_line(2), errc::bad_format, open,
       {"long-first.csv: line 1 is longer than max_line_bytes (2)"}},
      {nan_cell, "nan.csv", {}, errc::not_finite, read, {"nan.csv: line 2, column 3: 'nan' is not a finite 32-bit float"}},
      {nan_capitalised, "nan-caps.csv", {}, errc::not_finite, read, {"nan-caps.csv: line 2, column 3: 'NaN'"}},
      {infinite_cell, "inf.csv", {}, errc::not_finite, read, {"inf.csv: line 2, column 3: 'inf'"}},
      {negative_infinity, "minus-inf.csv", {}, errc::not_finite, read, {"minus-inf.csv: line 2, column 3: '-infinity'"}},
      {beyond_double, "1e999.csv", {}, errc::not_finite, read, {"1e999.csv: line 2, column 3: '1e999'"}},
      {beyond_float, "1e39.csv", {}, errc::not_finite, read, {"1e39.csv: line 2, column 3: '1e39'"}},
      {no_data_lines, "empty.csv", {}, errc::bad_format, open, {"empty.csv: no data lines"}},
      {header_only, "header-only.csv", header_line(), errc::bad_format, open,
       {"header-only.csv: no data lines after the header"}},
      {label_column_missing, "narrow.csv", label_column(2), errc::invalid_argument, open,
       {"narrow.csv: label_column 2 (counting from 0) does not exist: line 1 has 2 columns (0 to 1)"}},  // said 'column 3'
      {single_column, "single.csv", {}, errc::bad_format, open, {"single.csv: line 1 has 1 column"}},
      {zero_line_limit, "no-limit.csv", max_line(0), errc::invalid_argument, open,
       {"no-limit.csv: max_line_bytes is 0"}},
      {line_break_delimiter, "newline.csv", delimiter('\n'), errc::invalid_argument, open,
       {"newline.csv: the delimiter cannot be a line break"}},
      {missing_file, "missing.csv", {}, errc::io, open, {"missing.csv: cannot open: No such file"}},
  };
  return rows;
}

}  // namespace

TEST_CASE("csv: every malformed file is refused with its code, naming the file, line and column") {
  temp_dir dir;
  for_each_rejection(dir, csv_rejections(), k_bad_csv_kinds, bad_csv_text,
                     [](const csv_rejection& c, const std::string& bad) {
                       auto s = core::open_csv(bad, c.options);
                       // What the first data line shows is refused on opening; what follows when it is read.
                       CHECK(s.ok() == (c.when == refused_by::read));
                       check_refusal(s.ok() ? read_until_error(*s.value()) : std::move(s).error(), c.code,
                                     bad + ": ", c.says);
                     });
}
