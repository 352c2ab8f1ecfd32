// IDX (the MNIST format) readers and writers.
//
// Byte layout of one file, all integers big-endian:
//   0  u8   0x00
//   1  u8   0x00
//   2  u8   element type: 0x08 unsigned byte (the only one read here; 0x09 i8, 0x0B i16, 0x0C i32,
//           0x0D f32, 0x0E f64 exist and are refused)
//   3  u8   number of dimensions N
//   4  u32  N dimensions; the first is the example count
//   4+4N    the elements, row-major, one record of product(dims[1..]) bytes per example
// Images have N >= 2, labels N == 1. Files are often shipped gzip-compressed; zlib reads both kinds
// through the same calls, so the stream reader does not care, while the table reader needs byte offsets
// in the file itself and so refuses compressed files.
#include <fcntl.h>
#include <sys/stat.h>
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

#include "tessera/core/dataset.hpp"
#include "dataset_internal.hpp"

namespace tessera::core {

namespace {

constexpr std::uint8_t k_type_u8 = 0x08;
// Bounds on what a header may declare, so a corrupt or hostile header cannot size a buffer: 2^24 bytes
// per example is 16 MiB (a 4096x4096 image), 2^31 examples is more than any IDX dataset we know of.
constexpr std::uint64_t k_max_features = std::uint64_t{1} << 24;
constexpr std::uint64_t k_max_count = std::uint64_t{1} << 31;
// Bytes of image data read per chunk by the stream reader (rounded to whole records, at least one).
constexpr std::size_t k_chunk_bytes = std::size_t{1} << 16;
// zlib's own input buffer; its default of 8 KiB costs a system call per 8 KiB.
constexpr unsigned k_gz_buffer_bytes = 1u << 16;

enum class idx_role { images, labels };

struct idx_header {
  std::int64_t count = 0;        // examples
  std::int64_t features = 0;     // bytes per record: product of the dimensions after the first
  std::int64_t data_offset = 0;  // bytes of header before the first record
  std::string shape;             // "60000 x 28 x 28", for messages

  [[nodiscard]] detail::record_layout layout() const noexcept { return {count, features, data_offset}; }
  // What the header declares, as messages quote it: "(60000 x 28 x 28)".
  [[nodiscard]] std::string declared() const { return "(" + shape + ")"; }
};

std::string errno_text(int e) { return std::generic_category().message(e); }

std::string truncated_at(const std::string& path, const idx_header& h, std::int64_t record) {
  return detail::truncated_at(path, h.layout(), record);
}

// Parses the header through `read(span) -> result<size_t>`, which returns fewer bytes than asked only at
// the end of the file.
template <class Read>
result<idx_header> parse_idx_header(Read&& read, const std::string& path, idx_role role) {
  std::array<std::uint8_t, 4> magic{};
  TESSERA_ASSIGN_OR_RETURN(std::size_t got, read(std::span<std::uint8_t>(magic)));
  if (got < magic.size())
    return make_error(errc::truncated, path + ": truncated in the header (" + std::to_string(got) +
                                           " of the 4 magic bytes)");
  if (magic[0] != 0 || magic[1] != 0)
    return make_error(errc::bad_format, path + ": not an IDX file: it starts with " + detail::hex_bytes(magic) +
                                            ", an IDX file starts with 00 00 08 NN");
  if (magic[2] != k_type_u8)
    return make_error(errc::unsupported, path + ": IDX element type " + detail::hex_bytes(std::span(magic).subspan(2, 1)) +
                                             " is not supported (only 08, unsigned bytes)");
  const unsigned rank = magic[3];
  if (role == idx_role::images && rank < 2)
    return make_error(errc::unsupported, path + ": IDX images need at least 2 dimensions (count, then the "
                                                "example's shape), the header has " + std::to_string(rank));
  if (role == idx_role::labels && rank != 1)
    return make_error(errc::unsupported, path + ": IDX labels need exactly 1 dimension, the header has " +
                                             std::to_string(rank));

  std::array<std::uint8_t, 4 * 255> raw{};  // the rank is one byte
  const auto dims_bytes = std::span(raw).first(4 * std::size_t{rank});
  TESSERA_ASSIGN_OR_RETURN(got, read(dims_bytes));
  if (got < dims_bytes.size())
    return make_error(errc::truncated, path + ": truncated in the header (" + std::to_string(got) + " of the " +
                                           std::to_string(dims_bytes.size()) + " bytes of dimensions)");
  idx_header h;
  std::uint64_t features = 1;
  for (unsigned i = 0; i < rank; ++i) {
    const std::uint64_t d = (std::uint64_t{raw[4 * i]} << 24) | (std::uint64_t{raw[4 * i + 1]} << 16) |
                            (std::uint64_t{raw[4 * i + 2]} << 8) | std::uint64_t{raw[4 * i + 3]};
    h.shape += (i == 0 ? "" : " x ") + std::to_string(d);
    if (i == 0) {
      if (d > k_max_count)
        return make_error(errc::bad_format, path + ": the header declares " + std::to_string(d) +
                                                " examples, more than the limit of " + std::to_string(k_max_count));
      h.count = static_cast<std::int64_t>(d);
      continue;
    }
    if (d == 0)
      return make_error(errc::bad_format, path + ": dimension " + std::to_string(i) + " is 0");
    // Both factors are at most 2^32 and the running product at most 2^24 here: no overflow in 64 bits.
    features *= d;
    if (features > k_max_features)
      return make_error(errc::bad_format, path + ": dimensions " + h.shape + "... give more than " +
                                              std::to_string(k_max_features) + " bytes per example");
  }
  h.features = static_cast<std::int64_t>(features);
  h.data_offset = 4 + 4 * static_cast<std::int64_t>(rank);
  return h;
}

result<void> check_counts(const std::string& images_path, const idx_header& images, const std::string& labels_path,
                          const idx_header& labels) {
  if (images.count != labels.count)
    return make_error(errc::invalid_argument, images_path + " has " + std::to_string(images.count) + " images but " +
                                                  labels_path + " has " + std::to_string(labels.count) + " labels");
  return {};
}

// Turns u8 records into normalized fp32 rows. For `none` and `scale_unit` a 256-entry table gives the
// exact value for each byte; `standardize` needs per-feature parameters.
class u8_converter {
 public:
  explicit u8_converter(normalization norm, detail::standardize_params params = {})
      : norm_(norm), mean_(std::move(params.mean)), inv_stddev_(std::move(params.inv_stddev)) {
    for (unsigned v = 0; v < 256; ++v)
      table_[v] = norm == normalization::scale_unit ? static_cast<float>(v) / 255.0f : static_cast<float>(v);
  }

  void convert(const std::uint8_t* in, float* out, std::size_t features) const {
    if (norm_ != normalization::standardize) {
      for (std::size_t j = 0; j < features; ++j) out[j] = table_[in[j]];
      return;
    }
    for (std::size_t j = 0; j < features; ++j) out[j] = (static_cast<float>(in[j]) - mean_[j]) * inv_stddev_[j];
  }

 private:
  normalization norm_;
  std::vector<float> mean_;
  std::vector<float> inv_stddev_;
  std::array<float, 256> table_{};
};

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

// ---- random access with pread ---------------------------------------------------------------------



struct table_file {
  detail::unique_fd fd;
  idx_header header;
};

// Opens an uncompressed IDX file for pread and checks its size against the header.
result<table_file> open_table_file(const std::string& path, idx_role role) {
  detail::unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  std::array<std::uint8_t, 2> first{};
  TESSERA_ASSIGN_OR_RETURN(const std::size_t got, detail::pread_full(fd.get(), first, 0, path));
  if (got == 2 && first[0] == 0x1f && first[1] == 0x8b)
    return make_error(errc::unsupported, path + ": gzip-compressed; random access needs an uncompressed IDX file "
                                                "(gunzip it, or read it in order with open_idx)");
  std::int64_t pos = 0;
  const auto read = [&](std::span<std::uint8_t> out) -> result<std::size_t> {
    auto n = detail::pread_full(fd.get(), out, pos, path);
    if (n) pos += static_cast<std::int64_t>(n.value());
    return n;
  };
  TESSERA_ASSIGN_OR_RETURN(idx_header h, parse_idx_header(read, path, role));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(errc::io, path + ": cannot stat: " + errno_text(errno));
  // Checked here once, so gather() can only meet a short read if the file shrinks while open.
  TESSERA_TRY(detail::check_file_size(path, st.st_size, h.layout(), h.declared()));
  return table_file{std::move(fd), std::move(h)};
}

class idx_table final : public example_table {
 public:
  idx_table(std::string images_path, std::string labels_path, table_file images, table_file labels, u8_converter conv)
      : images_path_(std::move(images_path)),
        labels_path_(std::move(labels_path)),
        images_(std::move(images)),
        labels_(std::move(labels)),
        conv_(std::move(conv)),
        record_(static_cast<std::size_t>(images_.header.features)) {}

  std::int64_t feature_count() const noexcept override { return images_.header.features; }
  std::int64_t size() const noexcept override { return images_.header.count; }
  std::string describe() const override { return images_path_ + " + " + labels_path_; }

  void set_converter(u8_converter conv) { conv_ = std::move(conv); }

  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override {
    const std::size_t f = record_.size();
    TESSERA_ASSERT(targets.size() >= indices.size());
    TESSERA_ASSERT(features.size() >= indices.size() * f);
    const idx_header& ih = images_.header;
    const idx_header& lh = labels_.header;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::int64_t i = indices[k];
      if (i >= ih.count)
        return make_error(errc::invalid_argument, describe() + ": index " + std::to_string(i) +
                                                      " is out of range (size " + std::to_string(ih.count) + ")");
      TESSERA_ASSIGN_OR_RETURN(std::size_t got, detail::pread_full(images_.fd.get(), record_,
                                                                   ih.data_offset + i * ih.features, images_path_));
      if (got < f) return make_error(errc::truncated, truncated_at(images_path_, ih, i));
      std::array<std::uint8_t, 1> label{};
      TESSERA_ASSIGN_OR_RETURN(got, detail::pread_full(labels_.fd.get(), label, lh.data_offset + i, labels_path_));
      if (got < 1) return make_error(errc::truncated, truncated_at(labels_path_, lh, i));
      conv_.convert(record_.data(), features.data() + k * f, f);
      targets[k] = static_cast<float>(label[0]);
    }
    return {};
  }

 private:
  std::string images_path_;
  std::string labels_path_;
  table_file images_;
  table_file labels_;
  u8_converter conv_;
  std::vector<std::uint8_t> record_;  // one image record, reused by every gather
};

result<idx_header> read_gz_header(gzFile_s* gz, const std::string& path, idx_role role) {
  return parse_idx_header(
      [&](std::span<std::uint8_t> out) { return gz_read(gz, out, path); }, path, role);
}

// The stream over two uncompressed files, which is also their table (as dataset.hpp promises for
// open_idx): reading in order goes through zlib's buffered transparent mode, gather() through pread.
class idx_plain_stream final : public idx_stream, public example_table {
 public:
  idx_plain_stream(std::string images_path, std::string labels_path, gz_ptr images, gz_ptr labels,
                   table_file images_table, table_file labels_table, u8_converter conv)
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
  TESSERA_TRY(check_counts(images_path, images_h, labels_path, labels_h));
  u8_converter conv(normalization::none);
  // gzdirect() tells, once zlib has looked at the first bytes, whether the file is read as is. For plain
  // files the table's size check runs now, so a truncated plain file is refused here rather than on the
  // read that reaches the missing record (the message is the same).
  if (gzdirect(images.get()) == 1 && gzdirect(labels.get()) == 1) {
    TESSERA_ASSIGN_OR_RETURN(table_file images_table, open_table_file(images_path, idx_role::images));
    TESSERA_ASSIGN_OR_RETURN(table_file labels_table, open_table_file(labels_path, idx_role::labels));
    return std::unique_ptr<idx_stream>(std::make_unique<idx_plain_stream>(
        images_path, labels_path, std::move(images), std::move(labels), std::move(images_table),
        std::move(labels_table), std::move(conv)));
  }
  return std::make_unique<idx_stream>(images_path, labels_path, std::move(images), std::move(labels),
                                      std::move(images_h), std::move(labels_h), std::move(conv));
}

// Writes `header` then `data` to a new file at `path`; on failure removes what was written.
result<void> write_file(const std::string& path, std::span<const std::uint8_t> header,
                        std::span<const std::uint8_t> data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(errc::io, path + ": cannot create: " + errno_text(errno));
  bool failed = std::fwrite(header.data(), 1, header.size(), f) != header.size() ||
                (!data.empty() && std::fwrite(data.data(), 1, data.size(), f) != data.size());
  int err = failed ? errno : 0;
  return detail::close_written(f, failed, err, path);
}

void put_be32(std::vector<std::uint8_t>& out, std::uint64_t v) {
  out.push_back(static_cast<std::uint8_t>((v >> 24) & 0xff));
  out.push_back(static_cast<std::uint8_t>((v >> 16) & 0xff));
  out.push_back(static_cast<std::uint8_t>((v >> 8) & 0xff));
  out.push_back(static_cast<std::uint8_t>(v & 0xff));
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

result<std::unique_ptr<example_table>> open_idx_table(const std::string& images_path, const std::string& labels_path,
                                                      const idx_options& options) {
  TESSERA_ASSIGN_OR_RETURN(table_file images, open_table_file(images_path, idx_role::images));
  TESSERA_ASSIGN_OR_RETURN(table_file labels, open_table_file(labels_path, idx_role::labels));
  TESSERA_TRY(check_counts(images_path, images.header, labels_path, labels.header));
  const std::int64_t features = images.header.features;
  std::unique_ptr<example_stream> raw;  // opened only to measure statistics the caller did not give
  if (detail::must_measure(options.norm, options.stats)) {
    TESSERA_ASSIGN_OR_RETURN(raw, open_idx(images_path, labels_path, idx_options{normalization::none, {}}));
  }
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, features, raw.get(), images_path));
  return std::unique_ptr<example_table>(std::make_unique<idx_table>(images_path, labels_path, std::move(images),
                                                                    std::move(labels),
                                                                    u8_converter(options.norm, std::move(params))));
}

result<void> write_idx_images(const std::string& path, std::int64_t rows, std::int64_t cols,
                              std::span<const std::uint8_t> pixels) {
  if (rows <= 0 || cols <= 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) > k_max_features)
    return make_error(errc::invalid_argument, path + ": image shape " + std::to_string(rows) + " x " +
                                                  std::to_string(cols) + " is empty or over the IDX reader's limit");
  const auto per_image = static_cast<std::size_t>(rows * cols);
  if (pixels.size() % per_image != 0)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(pixels.size()) +
                                                  " pixels are not a whole number of " + std::to_string(rows) + " x " +
                                                  std::to_string(cols) + " images");
  const std::size_t count = pixels.size() / per_image;
  if (count > k_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(count) + " images, over the limit of " +
                                                  std::to_string(k_max_count));
  std::vector<std::uint8_t> header = {0x00, 0x00, k_type_u8, 0x03};
  put_be32(header, count);
  put_be32(header, static_cast<std::uint64_t>(rows));
  put_be32(header, static_cast<std::uint64_t>(cols));
  return write_file(path, header, pixels);
}

result<void> write_idx_labels(const std::string& path, std::span<const std::uint8_t> labels) {
  if (labels.size() > k_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(labels.size()) +
                                                  " labels, over the limit of " + std::to_string(k_max_count));
  std::vector<std::uint8_t> header = {0x00, 0x00, k_type_u8, 0x01};
  put_be32(header, labels.size());
  return write_file(path, header, labels);
}

}  // namespace tessera::core
