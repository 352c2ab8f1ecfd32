// Streaming CSV reader: numeric cells, one label column, optional header line.
//
// Memory is a fixed 64 KiB read buffer plus one line of at most `max_line_bytes`, whatever the file
// size. Numbers are parsed with std::from_chars, which ignores the C locale (a German locale must not
// turn "0.5" into 0). Lines are numbered from 1 as an editor shows them, header included; columns too.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"

namespace tessera::core {

namespace {

constexpr std::size_t k_read_buffer_bytes = std::size_t{1} << 16;
// Cells longer than this are cut in messages: the message is one line for a person, not a dump.
constexpr std::size_t k_max_quoted_cell = 40;

using detail::errno_text;

std::string quote_cell(std::string_view cell) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict, its bug 105329) on "'" + std::string.
  std::string out(1, '\'');
  out.append(cell.substr(0, k_max_quoted_cell));
  out.append(cell.size() > k_max_quoted_cell ? "...'" : "'");
  return out;
}

enum class cell_status { ok, not_a_number, not_finite };

// Parses one cell as a finite float. Surrounding blanks are allowed (not the delimiter itself, which
// may be a blank); so is a leading '+', which from_chars does not take.
cell_status parse_cell(std::string_view cell, char delimiter, float& out) {
  const auto blank = [delimiter](char c) { return c != delimiter && (c == ' ' || c == '\t' || c == '\r'); };
  while (!cell.empty() && blank(cell.front())) cell.remove_prefix(1);
  while (!cell.empty() && blank(cell.back())) cell.remove_suffix(1);
  if (cell.size() >= 2 && cell[0] == '+' && cell[1] != '-' && cell[1] != '+') cell.remove_prefix(1);
  if (cell.empty()) return cell_status::not_a_number;
  // Parsed as double and then narrowed, so that values between the float and double ranges are told
  // apart: too large for a float is "not finite" (it would become inf), too small becomes 0.
  double value = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (end != cell.data() + cell.size()) return cell_status::not_a_number;
  if (ec == std::errc::result_out_of_range) {
    // from_chars does not say which way it went out of range: a negative exponent means underflow.
    const auto e = cell.find_first_of("eE");
    if (e != std::string_view::npos && e + 1 < cell.size() && cell[e + 1] == '-') {
      out = cell.front() == '-' ? -0.0f : 0.0f;
      return cell_status::ok;
    }
    return cell_status::not_finite;
  }
  if (ec != std::errc()) return cell_status::not_a_number;
  if (!std::isfinite(value) || std::fabs(value) > double{std::numeric_limits<float>::max()})
    return cell_status::not_finite;
  out = static_cast<float>(value);
  return cell_status::ok;
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

class csv_stream final : public example_stream {
 public:
  csv_stream(std::string path, file_ptr file, const csv_options& options)
      : path_(std::move(path)),
        file_(std::move(file)),
        label_column_(options.label_column),
        header_(options.header),
        delimiter_(options.delimiter),
        max_line_bytes_(options.max_line_bytes),
        buffer_(k_read_buffer_bytes) {}

  // Reads up to the first data line to learn the column count, then starts again.
  result<void> start() {
    TESSERA_TRY(rewind());
    while (true) {
      TESSERA_ASSIGN_OR_RETURN(const bool more, next_line());
      if (!more)
        return make_error(errc::bad_format, path_ + ": no data lines" + (header_ ? " after the header" : ""));
      if (!is_blank(line_)) break;
    }
    columns_ = column_count(line_);
    first_data_line_ = line_no_;
    if (label_column_ >= columns_)
      return make_error(errc::invalid_argument, path_ + ": label_column " + std::to_string(label_column_) +
                                                    " (counting from 0) does not exist: line " + std::to_string(line_no_) + " has " +
                                                    std::to_string(columns_) + " columns (0 to " + std::to_string(columns_ - 1) + ")");
    if (columns_ < 2)
      return make_error(errc::bad_format, path_ + ": line " + std::to_string(line_no_) +
                                              " has 1 column; a label and at least one feature are needed");
    return rewind();
  }

  void set_normalization(normalization norm, detail::standardize_params params) {
    norm_ = norm;
    mean_ = std::move(params.mean);
    inv_stddev_ = std::move(params.inv_stddev);
  }

  std::int64_t feature_count() const noexcept override { return static_cast<std::int64_t>(columns_ - 1); }
  std::int64_t size_hint() const noexcept override { return -1; }
  std::string describe() const override { return path_; }
  std::string last_position() const override { return "line " + std::to_string(line_no_); }

  result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const std::size_t f = columns_ - 1;
    TESSERA_ASSERT(features.size() >= targets.size() * f);
    // After an error the position in the file is mid-way; repeat the error until rewind().
    if (failed_) return *failed_;
    std::size_t n = 0;
    while (n < targets.size()) {
      auto more = next_line();
      if (!more) return fail(std::move(more).error());
      if (!more.value()) break;
      if (is_blank(line_)) continue;  // a trailing empty line is common; it is not an example
      auto row = parse_row(features.subspan(n * f, f), targets[n]);
      if (!row) return fail(std::move(row).error());
      ++n;
    }
    return n;
  }

  result<void> rewind() override {
    failed_.reset();
    if (std::fseek(file_.get(), 0, SEEK_SET) != 0)
      return fail(make_error(errc::io, path_ + ": cannot rewind: " + errno_text(errno)));
    std::clearerr(file_.get());
    pos_ = 0;
    end_ = 0;
    line_no_ = 0;
    if (header_) {
      auto more = next_line();
      if (!more) return fail(std::move(more).error());
    }
    return {};
  }

 private:
  error fail(error e) {
    failed_ = e;
    return e;
  }

  bool is_blank(std::string_view line) const {
    return std::all_of(line.begin(), line.end(),
                       [this](char c) { return c != delimiter_ && (c == ' ' || c == '\t' || c == '\r'); });
  }

  std::size_t column_count(std::string_view line) const {
    return static_cast<std::size_t>(std::count(line.begin(), line.end(), delimiter_)) + 1;
  }

  // Refills the read buffer; returns the bytes now in it (0 at the end of the file).
  result<std::size_t> fill() {
    pos_ = 0;
    end_ = std::fread(buffer_.data(), 1, buffer_.size(), file_.get());
    if (end_ == 0 && std::ferror(file_.get()) != 0)
      return make_error(errc::io, path_ + ": read failed after line " + std::to_string(line_no_) + ": " +
                                      errno_text(errno));
    return end_;
  }

  // Puts the next line, without its end of line, in line_; false at the end of the file. A line longer
  // than max_line_bytes is an error found before it is stored, so it never sizes an allocation.
  result<bool> next_line() {
    line_.clear();
    bool any = false;
    while (true) {
      if (pos_ == end_) {
        TESSERA_ASSIGN_OR_RETURN(const std::size_t n, fill());
        if (n == 0) {
          if (!any) return false;
          break;  // the last line has no newline
        }
      }
      any = true;
      const char* start = buffer_.data() + pos_;
      const auto avail = end_ - pos_;
      const void* newline = std::memchr(start, '\n', avail);
      const std::size_t len = newline != nullptr ? static_cast<std::size_t>(static_cast<const char*>(newline) - start)
                                                 : avail;
      if (line_.size() + len > max_line_bytes_)
        return make_error(errc::bad_format, path_ + ": line " + std::to_string(line_no_ + 1) +
                                                " is longer than max_line_bytes (" + std::to_string(max_line_bytes_) +
                                                ")");
      line_.append(start, len);
      pos_ += len;
      if (newline != nullptr) {
        ++pos_;
        break;
      }
    }
    ++line_no_;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();  // files written on Windows
    // A UTF-8 byte order mark, as spreadsheet programs write, is not part of the first cell.
    if (line_no_ == 1 && line_.starts_with("\xEF\xBB\xBF")) line_.erase(0, 3);
    return true;
  }

  // Parses line_ into one row of features (normalized) and its target.
  result<void> parse_row(std::span<float> row, float& target) {
    const std::size_t found = column_count(line_);
    if (found != columns_)
      return make_error(errc::bad_format, path_ + ": line " + std::to_string(line_no_) + " has " +
                                              std::to_string(found) + " columns, expected " +
                                              std::to_string(columns_) + " (as line " +
                                              std::to_string(first_data_line_) + ")");
    std::string_view rest = line_;
    std::size_t feature = 0;
    for (std::size_t column = 0; column < columns_; ++column) {
      const auto cut = rest.find(delimiter_);
      const std::string_view cell = rest.substr(0, cut);
      rest.remove_prefix(cut == std::string_view::npos ? rest.size() : cut + 1);
      float value = 0;
      switch (parse_cell(cell, delimiter_, value)) {
        case cell_status::ok: break;
        case cell_status::not_a_number:
          // The commonest cause by far is a header line read as data: say so.
          return make_error(errc::bad_format, path_ + ": line " + std::to_string(line_no_) + ", column " +
                                                  std::to_string(column + 1) + ": " + quote_cell(cell) +
                                                  " is not a number" +
                                                  (line_no_ == 1 && !header_ ? " (a header line? set header)" : ""));
        case cell_status::not_finite:
          return make_error(errc::not_finite, path_ + ": line " + std::to_string(line_no_) + ", column " +
                                                  std::to_string(column + 1) + ": " + quote_cell(cell) +
                                                  " is not a finite 32-bit float");
      }
      if (column == label_column_) {
        target = value;
        continue;
      }
      switch (norm_) {
        case normalization::none: row[feature] = value; break;
        case normalization::scale_unit: row[feature] = value / 255.0f; break;
        case normalization::standardize: row[feature] = (value - mean_[feature]) * inv_stddev_[feature]; break;
      }
      ++feature;
    }
    return {};
  }

  std::string path_;
  file_ptr file_;
  std::size_t label_column_;
  bool header_;
  char delimiter_;
  std::size_t max_line_bytes_;
  normalization norm_ = normalization::none;
  std::vector<float> mean_;
  std::vector<float> inv_stddev_;

  std::vector<char> buffer_;  // k_read_buffer_bytes; [pos_, end_) not yet consumed
  std::size_t pos_ = 0;
  std::size_t end_ = 0;
  std::string line_;          // the current line, at most max_line_bytes_
  std::size_t line_no_ = 0;   // number of the line in line_, from 1
  std::size_t columns_ = 0;   // of every data line, from the first one
  std::size_t first_data_line_ = 0;
  std::optional<error> failed_;
};

}  // namespace

result<std::unique_ptr<example_stream>> open_csv(const std::string& path, const csv_options& options) {
  if (options.max_line_bytes == 0)
    return make_error(errc::invalid_argument, path + ": max_line_bytes is 0");
  if (options.delimiter == '\n' || options.delimiter == '\r')
    return make_error(errc::invalid_argument, path + ": the delimiter cannot be a line break");
  file_ptr file(std::fopen(path.c_str(), "rb"));
  if (!file) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  auto stream = std::make_unique<csv_stream>(path, std::move(file), options);
  TESSERA_TRY(stream->start());
  // The stream still reads raw values here: statistics it measures are those of the file.
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, stream->feature_count(),
                                                        stream.get(), path));
  stream->set_normalization(options.norm, std::move(params));
  return std::unique_ptr<example_stream>(std::move(stream));
}

}  // namespace tessera::core
