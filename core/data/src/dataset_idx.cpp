// IDX (the MNIST format) reader in order, plain or gzip-compressed, through zlib. The byte layout and
// the header parser are in idx_format.hpp; random access and the writers are in dataset_idx_table.cpp.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"
#include "idx_format.hpp"
#include "idx_table.hpp"

namespace tessera::core {

namespace {

using detail::errno_text;
using detail::idx_file;
using detail::idx_header;
using detail::idx_role;
using detail::idx_table;
using detail::truncated_at;
using detail::u8_converter;

// Bytes of image data read per chunk by the stream reader (rounded to whole records, at least one).
constexpr std::size_t k_chunk_bytes = std::size_t{1} << 16;
// zlib's own input buffer; its default of 8 KiB costs a system call per 8 KiB.
constexpr unsigned k_gz_buffer_bytes = 1u << 16;

// ---- streaming through zlib ----------------------------------------------------------------------

struct gz_closer {
  void operator()(gzFile_s* f) const noexcept { gzclose_r(f); }
};
using gz_ptr = std::unique_ptr<gzFile_s, gz_closer>;

result<gz_ptr> open_gz(const std::string& path) {
  // open() ourselves rather than gzopen(), so a missing file reports errno reliably.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  gz_ptr gz(gzdopen(fd, "rb"));
  if (!gz) {
    ::close(fd);
    return make_error(errc::io, path + ": cannot open through zlib (out of memory)");
  }
  gzbuffer(gz.get(), k_gz_buffer_bytes);
  return gz;
}

// zlib's last error text, without the "<fd:N>: " it prefixes for handles made by gzdopen (our messages
// name the file themselves).
std::string gz_error_text(gzFile_s* gz) {
  int code = 0;
  std::string_view text = gzerror(gz, &code);
  if (code == Z_ERRNO) return errno_text(errno);
  if (text.starts_with("<fd:")) {
    const auto colon = text.find(": ");
    if (colon != std::string_view::npos) text.remove_prefix(colon + 2);
  }
  return std::string(text);
}

// Reads until `out` is full or the data ends; returns the bytes read.
result<std::size_t> gz_read(gzFile_s* gz, std::span<std::uint8_t> out, const std::string& path) {
  std::size_t done = 0;
  while (done < out.size()) {
    const auto ask = static_cast<unsigned>(std::min<std::size_t>(out.size() - done, INT_MAX));
    const int n = gzread(gz, out.data() + done, ask);
    if (n < 0) {
      int code = 0;
      gzerror(gz, &code);
      if (code == Z_ERRNO) return make_error(errc::io, path + ": read failed: " + errno_text(errno));
      return make_error(errc::bad_format, path + ": corrupt gzip data: " + gz_error_text(gz));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

// Not final: idx_plain_stream adds random access to it when both files are uncompressed.
class idx_stream : public example_stream {
 public:
  idx_stream(std::string images_path, std::string labels_path, gz_ptr images, gz_ptr labels, idx_header images_h,
             idx_header labels_h, u8_converter conv)
      : images_path_(std::move(images_path)),
        labels_path_(std::move(labels_path)),
        images_(std::move(images)),
        labels_(std::move(labels)),
        images_h_(std::move(images_h)),
        labels_h_(std::move(labels_h)),
        conv_(std::move(conv)) {
    const auto f = static_cast<std::size_t>(images_h_.features);
    chunk_records_ = std::max<std::size_t>(1, k_chunk_bytes / f);
    image_buf_.resize(chunk_records_ * f);
    label_buf_.resize(chunk_records_);
  }

  virtual void set_converter(u8_converter conv) { conv_ = std::move(conv); }

  std::int64_t feature_count() const noexcept override { return images_h_.features; }
  std::int64_t size_hint() const noexcept override { return images_h_.count; }
  std::string describe() const override { return images_path_ + " + " + labels_path_; }

  result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(images_h_.features);
    TESSERA_ASSERT(features.size() >= targets.size() * f);
    // After an error the zlib positions no longer match next_; repeat the error until rewind().
    if (failed_) return *failed_;
    const auto left = static_cast<std::size_t>(images_h_.count - next_);
    if (left == 0) {
      auto end = check_end();
      if (!end) return fail(std::move(end).error());
      return std::size_t{0};
    }
    const std::size_t want = std::min(targets.size(), left);
    std::size_t done = 0;
    while (done < want) {
      const std::size_t k = std::min(chunk_records_, want - done);
      const auto image_bytes = std::span(image_buf_).first(k * f);
      auto got = gz_read(images_.get(), image_bytes, images_path_);
      if (!got) return fail(std::move(got).error());
      if (got.value() < image_bytes.size())
        return fail(make_error(errc::truncated, truncated_at(images_path_, images_h_,
                                                             next_ + static_cast<std::int64_t>(got.value() / f))));
      const auto label_bytes = std::span(label_buf_).first(k);
      got = gz_read(labels_.get(), label_bytes, labels_path_);
      if (!got) return fail(std::move(got).error());
      if (got.value() < label_bytes.size())
        return fail(make_error(errc::truncated,
                               truncated_at(labels_path_, labels_h_, next_ + static_cast<std::int64_t>(got.value()))));
      for (std::size_t r = 0; r < k; ++r) {
        conv_.convert(image_buf_.data() + r * f, features.data() + (done + r) * f, f);
        targets[done + r] = static_cast<float>(label_buf_[r]);
      }
      done += k;
      next_ += static_cast<std::int64_t>(k);
    }
    return done;
  }

  result<void> rewind() override {
    failed_.reset();
    next_ = 0;
    end_checked_ = false;
    for (auto [gz, path, offset] : {std::tuple{images_.get(), &images_path_, images_h_.data_offset},
                                    std::tuple{labels_.get(), &labels_path_, labels_h_.data_offset}}) {
      // gzseek on a file open for reading rewinds and skips forward as needed (decompressing the
      // header again for gzip, a plain seek otherwise).
      if (gzseek(gz, static_cast<z_off_t>(offset), SEEK_SET) < 0) {
        int code = 0;
        gzerror(gz, &code);  // zlib refuses to seek a stream it found corrupt: that is bad data, not I/O
        return fail(make_error(code == Z_ERRNO ? errc::io : errc::bad_format,
                               *path + ": cannot rewind: " + gz_error_text(gz)));
      }
    }
    return {};
  }

 private:
  error fail(error e) {
    failed_ = e;
    return e;
  }

  // Bytes after the declared records mean the header and the data disagree: refuse rather than guess
  // which one is right.
  result<void> check_end() {
    if (end_checked_) return {};
    for (auto [gz, path, h] : {std::tuple{images_.get(), &images_path_, &images_h_},
                               std::tuple{labels_.get(), &labels_path_, &labels_h_}}) {
      std::array<std::uint8_t, 1> extra{};
      TESSERA_ASSIGN_OR_RETURN(const std::size_t got, gz_read(gz, extra, *path));
      if (got != 0) return make_error(errc::bad_format, detail::data_continues(*path, h->layout(), h->declared()));
    }
    end_checked_ = true;
    return {};
  }

  std::string images_path_;
  std::string labels_path_;
  gz_ptr images_;
  gz_ptr labels_;
  idx_header images_h_;
  idx_header labels_h_;
  u8_converter conv_;
  std::size_t chunk_records_ = 1;
  std::vector<std::uint8_t> image_buf_;
  std::vector<std::uint8_t> label_buf_;
  std::int64_t next_ = 0;  // index of the next record to read
  bool end_checked_ = false;
  std::optional<error> failed_;
};

result<idx_header> read_gz_header(gzFile_s* gz, const std::string& path, idx_role role) {
  return detail::parse_idx_header(
      [&](std::span<std::uint8_t> out) { return gz_read(gz, out, path); }, path, role);
}

// The stream over two uncompressed files, which is also their table (as dataset.hpp promises for
// open_idx): reading in order goes through zlib's buffered transparent mode, gather() through pread.
class idx_plain_stream final : public idx_stream, public example_table {
 public:
  idx_plain_stream(std::string images_path, std::string labels_path, gz_ptr images, gz_ptr labels,
                   idx_file images_table, idx_file labels_table, u8_converter conv)
      : idx_stream(images_path, labels_path, std::move(images), std::move(labels), images_table.header,
                   labels_table.header, conv),
        table_(std::move(images_path), std::move(labels_path), std::move(images_table), std::move(labels_table),
               std::move(conv)) {}

  // Both bases declare these; one definition serves both.
  std::int64_t feature_count() const noexcept override { return idx_stream::feature_count(); }
  std::string describe() const override { return idx_stream::describe(); }

  void set_converter(u8_converter conv) override {
    table_.set_converter(conv);
    idx_stream::set_converter(std::move(conv));
  }

  std::int64_t size() const noexcept override { return table_.size(); }
  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override {
    return table_.gather(indices, features, targets);
  }

 private:
  idx_table table_;
};

// Opens both files for reading in order, converting with `none` until set_converter().
result<std::unique_ptr<idx_stream>> open_idx_stream(const std::string& images_path, const std::string& labels_path) {
  TESSERA_ASSIGN_OR_RETURN(gz_ptr images, open_gz(images_path));
  TESSERA_ASSIGN_OR_RETURN(gz_ptr labels, open_gz(labels_path));
  TESSERA_ASSIGN_OR_RETURN(idx_header images_h, read_gz_header(images.get(), images_path, idx_role::images));
  TESSERA_ASSIGN_OR_RETURN(idx_header labels_h, read_gz_header(labels.get(), labels_path, idx_role::labels));
  TESSERA_TRY(detail::check_counts(images_path, images_h, labels_path, labels_h));
  u8_converter conv(normalization::none);
  // gzdirect() tells, once zlib has looked at the first bytes, whether the file is read as is. For plain
  // files the table's size check runs now, so a truncated plain file is refused here rather than on the
  // read that reaches the missing record (the message is the same).
  if (gzdirect(images.get()) == 1 && gzdirect(labels.get()) == 1) {
    TESSERA_ASSIGN_OR_RETURN(idx_file images_table, detail::open_idx_file(images_path, idx_role::images));
    TESSERA_ASSIGN_OR_RETURN(idx_file labels_table, detail::open_idx_file(labels_path, idx_role::labels));
    return std::unique_ptr<idx_stream>(std::make_unique<idx_plain_stream>(
        images_path, labels_path, std::move(images), std::move(labels), std::move(images_table),
        std::move(labels_table), std::move(conv)));
  }
  return std::make_unique<idx_stream>(images_path, labels_path, std::move(images), std::move(labels),
                                      std::move(images_h), std::move(labels_h), std::move(conv));
}

}  // namespace

result<std::unique_ptr<example_stream>> open_idx(const std::string& images_path, const std::string& labels_path,
                                                 const idx_options& options) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<idx_stream> stream, open_idx_stream(images_path, labels_path));
  idx_stream& s = *stream;
  // The stream still converts with `none` here: statistics it measures are those of the raw bytes.
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, s.feature_count(), &s, images_path));
  s.set_converter(u8_converter(options.norm, std::move(params)));
  return std::unique_ptr<example_stream>(std::move(stream));
}

}  // namespace tessera::core
