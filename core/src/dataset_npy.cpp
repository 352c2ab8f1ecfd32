// NumPy .npy reader (random access with pread) and writers.
//
// Byte layout of one file (numpy.lib.format):
//   0       6 bytes  magic "\x93NUMPY"
//   6       u8       major version: 1, 2 or 3 (3 only declares the header text UTF-8; we read ASCII)
//   7       u8       minor version: 0
//   8       u16 LE   header length in bytes (version 1); u32 LE for versions 2 and 3, at the same offset
//   10 / 12          the header: a Python dict literal, e.g.
//                      {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
//                    padded with spaces and ended by '\n'; NumPy pads so the data starts at a multiple of 64
//   then             the elements in C order: one record of product(shape[1..]) elements per example
// 'descr' is a byte order ('<' little, '>' big, '=' native, '|' not applicable to 1-byte types), a kind
// ('f' float, 'i' signed, 'u' unsigned) and a size in bytes. Every element is assembled from its bytes in
// the declared order, so big-endian files are byte-swapped and read correctly on any host.
//
// The header is parsed by a small strict parser for exactly that dict form (the three keys in any order,
// single or double quotes, an optional trailing comma, blank padding), never by a general evaluator.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "tessera/core/dataset.hpp"
#include "dataset_internal.hpp"

namespace tessera::core {

namespace {

constexpr std::array<std::uint8_t, 6> k_magic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// Bounds on what a header may declare, the same as the IDX reader's: 2^24 elements per example, 2^31
// examples (gather() takes 32-bit indices).
constexpr std::uint64_t k_max_features = std::uint64_t{1} << 24;
constexpr std::uint64_t k_max_count = std::uint64_t{1} << 31;
// While parsing, a dimension above this is refused before it could overflow the 64-bit accumulator
// (k_max_dim * 10 + 9 < 2^64); the real limits above are checked after.
constexpr std::uint64_t k_max_dim = std::uint64_t{1} << 40;
// NumPy 2's NPY_MAXDIMS.
constexpr std::size_t k_max_rank = 64;
// Bytes of one record read per pread: a record larger than this is read in pieces, so the table holds
// this much whatever the record or file size.
constexpr std::size_t k_scratch_bytes = std::size_t{1} << 16;
static_assert(k_scratch_bytes % 8 == 0, "whole elements of every size fit in the scratch buffer");
// Integers up to 2^24 in magnitude are exactly representable in float32; above, some are not.
constexpr std::uint64_t k_max_exact_label = std::uint64_t{1} << 24;
// Indices per gather() when a table is read as a stream (a stack array, not an allocation).
constexpr std::size_t k_index_chunk = 256;
// NumPy aligns the start of the data to this (so it can be memory-mapped with any dtype).
constexpr std::size_t k_data_alignment = 64;

std::string errno_text(int e) { return std::generic_category().message(e); }


std::string number_text(double v) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.9g", v);
  return buf.data();
}



// ---- the header dict ------------------------------------------------------------------------------

struct header_dict {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

// Parses {'descr': <str>, 'fortran_order': <True|False>, 'shape': <tuple of ints>} with the keys in any
// order, each exactly once, an optional trailing comma, and blanks between tokens and after the '}'.
class dict_parser {
 public:
  dict_parser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  result<header_dict> parse() {
    header_dict d;
    bool have_descr = false;
    bool have_fortran = false;
    bool have_shape = false;
    skip_blanks();
    if (!eat('{')) return malformed("expected '{' (the header is a Python dict literal)");
    while (true) {
      skip_blanks();
      if (eat('}')) break;
      TESSERA_ASSIGN_OR_RETURN(const std::string k, parse_string("a quoted key"));
      skip_blanks();
      if (!eat(':')) return malformed("expected ':' after the key '" + k + "'");
      skip_blanks();
      bool* seen = nullptr;
      if (k == "descr") {
        seen = &have_descr;
        // A list here is a structured dtype (records with named fields): valid NumPy, not for us.
        if (peek() == '[')
          return make_error(errc::unsupported, path_ + ": 'descr' is a structured dtype (a list of fields); "
                                                       "only plain numeric dtypes are supported");
        TESSERA_ASSIGN_OR_RETURN(d.descr, parse_string("a quoted string as the value of 'descr'"));
      } else if (k == "fortran_order") {
        seen = &have_fortran;
        const std::string_view word = parse_word();
        if (word == "True") {
          d.fortran_order = true;
        } else if (word == "False") {
          d.fortran_order = false;
        } else {
          return malformed("expected True or False as the value of 'fortran_order'");
        }
      } else if (k == "shape") {
        seen = &have_shape;
        TESSERA_ASSIGN_OR_RETURN(d.shape, parse_shape());
      } else {
        return malformed("unknown key '" + k + "' (a .npy header has 'descr', 'fortran_order' and 'shape')");
      }
      if (*seen) return malformed("the key '" + k + "' appears twice");
      *seen = true;
      skip_blanks();
      if (eat(',')) continue;
      if (eat('}')) break;
      return malformed("expected ',' or '}' after the value of '" + k + "'");
    }
    skip_blanks();
    if (pos_ != text_.size()) return malformed("unexpected text after the closing '}'");
    for (const auto& [have, name] : {std::pair{have_descr, "descr"}, std::pair{have_fortran, "fortran_order"},
                                     std::pair{have_shape, "shape"}}) {
      if (!have)
        return make_error(errc::bad_format, path_ + ": .npy header has no '" + name + "' key: " + excerpt());
    }
    return d;
  }

 private:
  [[nodiscard]] char peek() const noexcept { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool eat(char c) noexcept {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  void skip_blanks() noexcept {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r'))
      ++pos_;
  }

  // The header, cut for a one-line message.
  [[nodiscard]] std::string excerpt() const {
    constexpr std::size_t k_max_excerpt = 80;
    std::string out;
    for (const char c : text_.substr(0, k_max_excerpt)) out += (c >= ' ' && c <= '~') ? c : '?';
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + (text_.size() > k_max_excerpt ? "..." : "");
  }

  error malformed(const std::string& what) const {
    return make_error(errc::bad_format, path_ + ": malformed .npy header at byte " + std::to_string(pos_) + ": " +
                                            what + "; the header is: " + excerpt());
  }

  // A Python string literal without escapes (NumPy never writes any in these three fields).
  result<std::string> parse_string(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') return malformed("expected " + what);
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) return malformed("unterminated string");
      const char c = text_[pos_];
      if (c == quote) break;
      if (c == '\\' || c < ' ' || c > '~') return malformed("unexpected character in a string");
      out += c;
      ++pos_;
    }
    ++pos_;
    return out;
  }

  std::string_view parse_word() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) != 0 || text_[pos_] == '_'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // A tuple of non-negative integers: (), (5,), (5, 3) or (5, 3,); Python 2's long suffix (5L) is taken.
  // (5) is not a tuple in Python, so it is refused as NumPy refuses it.
  result<std::vector<std::uint64_t>> parse_shape() {
    if (!eat('(')) return malformed("expected a tuple such as (60000, 784) as the value of 'shape'");
    std::vector<std::uint64_t> dims;
    bool comma_after_last = false;
    while (true) {
      skip_blanks();
      if (eat(')')) break;
      if (std::isdigit(static_cast<unsigned char>(peek())) == 0)
        return malformed("expected a non-negative integer in the 'shape' tuple");
      std::uint64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek())) != 0) {
        v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
        if (v > k_max_dim) return malformed("dimension " + std::to_string(dims.size()) + " of 'shape' is too large");
        ++pos_;
      }
      if (peek() == 'L' || peek() == 'l') ++pos_;
      if (dims.size() == k_max_rank)
        return make_error(errc::unsupported, path_ + ": 'shape' has more than " + std::to_string(k_max_rank) +
                                                 " dimensions");
      dims.push_back(v);
      skip_blanks();
      comma_after_last = eat(',');
      if (comma_after_last) continue;
      if (eat(')')) break;
      return malformed("expected ',' or ')' in the 'shape' tuple");
    }
    if (dims.size() == 1 && !comma_after_last)
      return malformed("'shape' (" + std::to_string(dims[0]) + ") is not a tuple; a 1-tuple is written (" +
                       std::to_string(dims[0]) + ",)");
    return dims;
  }

  std::string_view text_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

// ---- dtypes, headers and files --------------------------------------------------------------------

enum class npy_role { features, labels };

struct npy_dtype {
  char kind = 'f';          // 'f', 'i' or 'u'
  unsigned size = 4;        // bytes per element: 1, 2, 4 or 8
  bool big_endian = false;  // the byte order of the elements in the file
  std::string descr;        // as written, for messages
};

result<npy_dtype> parse_descr(const std::string& descr, const std::string& path, npy_role role) {
  const auto refuse = [&] {
    return make_error(errc::unsupported,
                      path + ": 'descr' '" + descr + "' is not supported for " +
                          (role == npy_role::features
                               ? "features (float32 '<f4' or uint8 '|u1')"
                               : "labels (an integer type, or float32 '<f4' / float64 '<f8' for regression)"));
  };
  // Every accepted dtype is spelled in three characters: byte order, kind, size.
  if (descr.size() != 3) return refuse();
  const char order = descr[0];
  const char kind = descr[1];
  const char size = descr[2];
  if (order != '<' && order != '>' && order != '=' && order != '|') return refuse();
  if (kind != 'f' && kind != 'i' && kind != 'u') return refuse();
  if (size != '1' && size != '2' && size != '4' && size != '8') return refuse();
  npy_dtype t;
  t.kind = kind;
  t.size = static_cast<unsigned>(size - '0');
  t.descr = descr;
  // '|' (no byte order) only makes sense for 1-byte types; a 1-byte type reads the same in any order.
  if (order == '|' && t.size != 1) return refuse();
  t.big_endian = order == '>' || (order == '=' && std::endian::native == std::endian::big);
  const bool ok = role == npy_role::features
                      ? (kind == 'f' && t.size == 4) || (kind == 'u' && t.size == 1)
                      : kind != 'f' || t.size == 4 || t.size == 8;
  if (!ok) return refuse();
  return t;
}

struct npy_header {
  npy_dtype dtype;
  std::string shape_text;          // "(60000, 28, 28)", for messages
  std::int64_t count = 0;          // examples: the first dimension
  std::int64_t record_elements = 0;
  std::int64_t record_bytes = 0;
  std::int64_t data_offset = 0;    // bytes before the first record

  [[nodiscard]] detail::record_layout layout() const noexcept { return {count, record_bytes, data_offset}; }
  // What the header declares, as messages quote it: "('shape' (60000, 784), 'descr' '<f4')".
  [[nodiscard]] std::string declared() const { return "('shape' " + shape_text + ", 'descr' '" + dtype.descr + "')"; }
};

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::string out = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(dims[i]);
  return out + (dims.size() == 1 ? ",)" : ")");
}

std::string truncated_at(const std::string& path, const npy_header& h, std::int64_t record) {
  return detail::truncated_at(path, h.layout(), record);
}

// Checks the shape for the file's role; sets count and the record size.
result<void> apply_shape(const std::vector<std::uint64_t>& dims, const std::string& path, npy_role role,
                         npy_header& h) {
  h.shape_text = shape_text(dims);
  if (role == npy_role::features && dims.empty())
    return make_error(errc::unsupported, path + ": 'shape' () is a single scalar; features need (N, ...) with one "
                                                "row per example");
  if (role == npy_role::labels && !(dims.size() == 1 || (dims.size() == 2 && dims[1] == 1)))
    return make_error(errc::unsupported, path + ": labels need 'shape' (N,) or (N, 1), the header has " +
                                             h.shape_text);
  if (dims[0] > k_max_count)
    return make_error(errc::bad_format, path + ": 'shape' " + h.shape_text + " declares " + std::to_string(dims[0]) +
                                            " examples, more than the limit of " + std::to_string(k_max_count));
  std::uint64_t features = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] == 0)
      return make_error(errc::unsupported, path + ": 'shape' " + h.shape_text + " gives examples with no elements");
    if (dims[i] > k_max_features / features)
      return make_error(errc::unsupported, path + ": 'shape' " + h.shape_text + " gives more than " +
                                               std::to_string(k_max_features) + " elements per example");
    features *= dims[i];
  }
  h.count = static_cast<std::int64_t>(dims[0]);
  h.record_elements = static_cast<std::int64_t>(features);
  h.record_bytes = h.record_elements * static_cast<std::int64_t>(h.dtype.size);
  return {};
}

struct npy_file {
  std::string path;
  detail::unique_fd fd;
  npy_header header;
};

// Opens a .npy file for pread: parses and checks the header, then the file size against it, so that
// gather() can only meet a short read if the file shrinks while open.
result<npy_file> open_npy_file(const std::string& path, npy_role role) {
  detail::unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(errc::io, path + ": cannot stat: " + errno_text(errno));
  const std::int64_t file_size = st.st_size;

  std::array<std::uint8_t, 12> pre{};
  TESSERA_ASSIGN_OR_RETURN(const std::size_t have, detail::pread_full(fd.get(), pre, 0, path));
  const std::size_t magic_have = std::min(have, k_magic.size());
  if (!std::equal(pre.begin(), pre.begin() + static_cast<std::ptrdiff_t>(magic_have), k_magic.begin()))
    return make_error(errc::bad_format, path + ": not a .npy file: the magic is " +
                                            detail::hex_bytes(std::span(pre).first(magic_have)) +
                                            ", a .npy file starts with 93 4e 55 4d 50 59 (\"\\x93NUMPY\")");
  if (have < 8)
    return make_error(errc::truncated, path + ": truncated in the preamble (" + std::to_string(have) +
                                           " of the 8 bytes of magic and version)");
  const unsigned major = pre[6];
  const unsigned minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return make_error(errc::unsupported, path + ": .npy format version " + std::to_string(major) + "." +
                                             std::to_string(minor) + " is not supported (1.0, 2.0 and 3.0 are)");
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t preamble = 8 + length_bytes;
  if (have < preamble)
    return make_error(errc::truncated, path + ": truncated in the preamble (the header length needs " +
                                           std::to_string(length_bytes) + " bytes at offset 8)");
  std::uint64_t header_length = 0;
  for (std::size_t b = 0; b < length_bytes; ++b) header_length |= std::uint64_t{pre[8 + b]} << (8 * b);
  if (header_length > k_npy_max_header)
    return make_error(errc::bad_format, path + ": header length " + std::to_string(header_length) +
                                            " bytes is over the limit of " + std::to_string(k_npy_max_header));
  // Both terms are small here (the header is at most 2^16 bytes): no overflow.
  if (static_cast<std::int64_t>(preamble + header_length) > file_size)
    return make_error(errc::truncated, path + ": header length " + std::to_string(header_length) +
                                           " bytes runs past the end of the file (" + std::to_string(file_size) +
                                           " bytes, the header starts at offset " + std::to_string(preamble) + ")");

  std::string text(static_cast<std::size_t>(header_length), '\0');
  const std::span text_bytes(reinterpret_cast<std::uint8_t*>(text.data()), text.size());
  TESSERA_ASSIGN_OR_RETURN(const std::size_t got,
                           detail::pread_full(fd.get(), text_bytes, static_cast<std::int64_t>(preamble), path));
  if (got < text.size())
    return make_error(errc::truncated, path + ": truncated in the header (the file shrank while it was read)");
  TESSERA_ASSIGN_OR_RETURN(const header_dict dict, dict_parser(text, path).parse());
  if (dict.fortran_order)
    return make_error(errc::unsupported, path + ": 'fortran_order' True (column-major data) is not supported; "
                                                "save a C-ordered array (numpy.ascontiguousarray)");
  npy_header h;
  TESSERA_ASSIGN_OR_RETURN(h.dtype, parse_descr(dict.descr, path, role));
  TESSERA_TRY(apply_shape(dict.shape, path, role, h));
  h.data_offset = static_cast<std::int64_t>(preamble + header_length);

  TESSERA_TRY(detail::check_file_size(path, file_size, h.layout(), h.declared()));
  return npy_file{path, std::move(fd), std::move(h)};
}

// The element at `p` as raw bits, assembled in the file's byte order.
std::uint64_t load_bits(const std::uint8_t* p, unsigned size, bool big_endian) noexcept {
  std::uint64_t v = 0;
  for (unsigned b = 0; b < size; ++b) v = (v << 8) | p[big_endian ? b : size - 1 - b];
  return v;
}

// ---- the table ------------------------------------------------------------------------------------

class npy_table final : public example_table {
 public:
  npy_table(npy_file features, npy_file labels) : x_(std::move(features)), y_(std::move(labels)) {
    const auto elem = static_cast<std::size_t>(x_.header.dtype.size);
    const auto record = static_cast<std::size_t>(x_.header.record_bytes);
    scratch_.resize(std::min(record, k_scratch_bytes / elem * elem));
  }

  std::int64_t feature_count() const noexcept override { return x_.header.record_elements; }
  std::int64_t size() const noexcept override { return x_.header.count; }
  std::string describe() const override { return x_.path + " + " + y_.path; }

  void set_normalization(normalization norm, detail::standardize_params params) {
    norm_ = norm;
    mean_ = std::move(params.mean);
    inv_stddev_ = std::move(params.inv_stddev);
  }

  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(x_.header.record_elements);
    TESSERA_ASSERT(targets.size() >= indices.size());
    TESSERA_ASSERT(features.size() >= indices.size() * f);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::int64_t i = indices[k];
      if (i >= x_.header.count)
        return make_error(errc::invalid_argument, describe() + ": index " + std::to_string(i) +
                                                      " is out of range (size " + std::to_string(x_.header.count) +
                                                      ")");
      TESSERA_TRY(read_features(i, features.data() + k * f));
      TESSERA_ASSIGN_OR_RETURN(targets[k], read_label(i));
    }
    return {};
  }

 private:
  // Reads record i into out[0, features), a scratch-sized piece at a time, and normalizes it.
  result<void> read_features(std::int64_t i, float* out) {
    const npy_header& h = x_.header;
    const auto f = static_cast<std::size_t>(h.record_elements);
    const std::size_t elem = h.dtype.size;
    const std::size_t chunk = scratch_.size() / elem;
    const std::int64_t offset = h.data_offset + i * h.record_bytes;
    for (std::size_t done = 0; done < f;) {
      const std::size_t k = std::min(chunk, f - done);
      const auto bytes = std::span(scratch_).first(k * elem);
      const std::int64_t at = offset + static_cast<std::int64_t>(done * elem);
      TESSERA_ASSIGN_OR_RETURN(const std::size_t got, detail::pread_full(x_.fd.get(), bytes, at, x_.path));
      if (got < bytes.size()) return make_error(errc::truncated, truncated_at(x_.path, h, i));
      float* dst = out + done;
      if (h.dtype.kind == 'u') {
        for (std::size_t j = 0; j < k; ++j) dst[j] = static_cast<float>(bytes[j]);
      } else {
        if (h.dtype.big_endian == (std::endian::native == std::endian::big)) {
          std::memcpy(dst, bytes.data(), bytes.size());
        } else {
          for (std::size_t j = 0; j < k; ++j)
            dst[j] = std::bit_cast<float>(static_cast<std::uint32_t>(load_bits(bytes.data() + 4 * j, 4, true)));
        }
        for (std::size_t j = 0; j < k; ++j)
          if (!std::isfinite(dst[j])) return not_finite(i, done + j, dst[j], "");
      }
      done += k;
    }
    switch (norm_) {
      case normalization::none:
        break;
      case normalization::scale_unit:
        for (std::size_t j = 0; j < f; ++j) out[j] /= 255.0f;
        break;
      case normalization::standardize:
        for (std::size_t j = 0; j < f; ++j) {
          out[j] = (out[j] - mean_[j]) * inv_stddev_[j];
          // Finite inputs near the float range can overflow here.
          if (!std::isfinite(out[j])) return not_finite(i, j, out[j], " after standardize");
        }
        break;
    }
    return {};
  }

  error not_finite(std::int64_t record, std::size_t feature, float v, const char* when) const {
    return make_error(errc::not_finite, x_.path + ": record " + std::to_string(record) + " of " +
                                            std::to_string(x_.header.count) + ", feature " + std::to_string(feature) +
                                            " is not finite" + when + " (" + number_text(v) + ")");
  }

  result<float> read_label(std::int64_t i) {
    const npy_header& h = y_.header;
    std::array<std::uint8_t, 8> raw{};
    const auto bytes = std::span(raw).first(h.dtype.size);
    TESSERA_ASSIGN_OR_RETURN(const std::size_t got,
                             detail::pread_full(y_.fd.get(), bytes, h.data_offset + i * h.record_bytes, y_.path));
    if (got < bytes.size()) return make_error(errc::truncated, truncated_at(y_.path, h, i));
    const std::uint64_t bits = load_bits(raw.data(), h.dtype.size, h.dtype.big_endian);
    const auto where = [&] { return y_.path + ": record " + std::to_string(i) + " of " + std::to_string(h.count); };
    if (h.dtype.kind == 'f') {
      const double v = h.dtype.size == 4 ? double{std::bit_cast<float>(static_cast<std::uint32_t>(bits))}
                                         : std::bit_cast<double>(bits);
      if (!std::isfinite(v) || std::fabs(v) > double{std::numeric_limits<float>::max()})
        return make_error(errc::not_finite, where() + ": label " + number_text(v) + " is not a finite float32");
      return static_cast<float>(v);
    }
    // Integers: sign-extend signed types, then check the magnitude fits a float exactly.
    bool negative = false;
    std::uint64_t magnitude = bits;
    const unsigned width = 8 * h.dtype.size;
    if (h.dtype.kind == 'i' && ((bits >> (width - 1)) & 1) != 0) {
      negative = true;
      // Two's complement magnitude within the element's width (2^width - bits), exact for INT64_MIN too.
      magnitude = width == 64 ? (~bits + 1) : ((std::uint64_t{1} << width) - bits);
    }
    const std::string text = (negative ? "-" : "") + std::to_string(magnitude);
    if (magnitude > k_max_exact_label)
      return make_error(errc::unsupported, where() + ": label " + text +
                                               " has no exact float32 value (integer labels must be within 2^24)");
    const auto v = static_cast<float>(magnitude);
    return negative ? -v : v;
  }

  npy_file x_;
  npy_file y_;
  normalization norm_ = normalization::none;
  std::vector<float> mean_;
  std::vector<float> inv_stddev_;
  std::vector<std::uint8_t> scratch_;  // one record or a piece of one, reused by every gather
};

// A table read in order, as a stream: lets compute_stats measure a table.
class table_stream final : public example_stream {
 public:
  explicit table_stream(example_table& table) : table_(table) {}
  std::int64_t feature_count() const noexcept override { return table_.feature_count(); }
  std::int64_t size_hint() const noexcept override { return table_.size(); }
  std::string describe() const override { return table_.describe(); }

  result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(table_.feature_count());
    const auto want = static_cast<std::size_t>(
        std::min<std::int64_t>(static_cast<std::int64_t>(targets.size()), table_.size() - next_));
    std::array<std::uint32_t, k_index_chunk> indices{};
    std::size_t done = 0;
    while (done < want) {
      const std::size_t k = std::min(k_index_chunk, want - done);
      for (std::size_t j = 0; j < k; ++j) indices[j] = static_cast<std::uint32_t>(next_ + static_cast<std::int64_t>(j));
      TESSERA_TRY(table_.gather(std::span(indices).first(k), features.subspan(done * f, k * f), targets.subspan(done, k)));
      done += k;
      next_ += static_cast<std::int64_t>(k);
    }
    return done;
  }

  result<void> rewind() override {
    next_ = 0;
    return {};
  }

 private:
  example_table& table_;
  std::int64_t next_ = 0;
};

// ---- writers --------------------------------------------------------------------------------------

// A version 1.0 preamble and header for `descr` and `shape`, padded as NumPy pads it: spaces, then '\n'
// as the last byte, so that the data starts at a multiple of k_data_alignment.
std::string npy_preamble(std::string_view descr, const std::string& shape) {
  std::string dict = "{'descr': '";
  dict.append(descr);
  dict.append("', 'fortran_order': False, 'shape': ");
  dict.append(shape);
  dict.append(", }");
  constexpr std::size_t k_preamble = 10;  // magic, version, u16 header length
  const std::size_t unpadded = k_preamble + dict.size() + 1;
  const std::size_t total = (unpadded + k_data_alignment - 1) / k_data_alignment * k_data_alignment;
  dict.append(total - unpadded, ' ');
  dict.push_back('\n');
  const std::size_t header_length = dict.size();
  TESSERA_ASSERT(header_length <= 0xffff);  // a two-dimensional shape is far below the u16 limit
  std::string out(k_magic.begin(), k_magic.end());
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_length & 0xff));
  out.push_back(static_cast<char>(header_length >> 8));
  return out + dict;
}

// Writes a preamble then `values` as 4-byte little-endian elements; on failure removes what was written.
template <class T>
result<void> write_npy_32(const std::string& path, std::string_view descr, const std::string& shape,
                          std::span<const T> values) {
  static_assert(sizeof(T) == 4);
  const std::string header = npy_preamble(descr, shape);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(errc::io, path + ": cannot create: " + errno_text(errno));
  bool failed = std::fwrite(header.data(), 1, header.size(), f) != header.size();
  int err = failed ? errno : 0;
  constexpr std::size_t k_chunk_values = 4096;
  std::array<std::uint8_t, 4 * k_chunk_values> buf{};
  for (std::size_t done = 0; !failed && done < values.size();) {
    const std::size_t k = std::min(k_chunk_values, values.size() - done);
    for (std::size_t j = 0; j < k; ++j) {
      const auto bits = std::bit_cast<std::uint32_t>(values[done + j]);
      for (unsigned b = 0; b < 4; ++b) buf[4 * j + b] = static_cast<std::uint8_t>((bits >> (8 * b)) & 0xff);
    }
    if (std::fwrite(buf.data(), 1, 4 * k, f) != 4 * k) {
      failed = true;
      err = errno;
    }
    done += k;
  }
  return detail::close_written(f, failed, err, path);
}

}  // namespace

result<std::unique_ptr<example_table>> open_npy(const std::string& features_path, const std::string& labels_path,
                                                const npy_options& options) {
  TESSERA_ASSIGN_OR_RETURN(npy_file x, open_npy_file(features_path, npy_role::features));
  TESSERA_ASSIGN_OR_RETURN(npy_file y, open_npy_file(labels_path, npy_role::labels));
  if (x.header.count != y.header.count)
    return make_error(errc::invalid_argument, features_path + " has " + std::to_string(x.header.count) +
                                                  " examples but " + labels_path + " has " +
                                                  std::to_string(y.header.count) + " labels");
  auto table = std::make_unique<npy_table>(std::move(x), std::move(y));
  // The table still converts with `none` here: statistics measured through `raw` are of the raw values.
  table_stream raw(*table);
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, table->feature_count(), &raw,
                                                        features_path));
  table->set_normalization(options.norm, std::move(params));
  return std::unique_ptr<example_table>(std::move(table));
}

result<void> write_npy_features(const std::string& path, std::int64_t features, std::span<const float> values) {
  if (features <= 0 || static_cast<std::uint64_t>(features) > k_max_features)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(features) +
                                                  " features per example is empty or over the reader's limit of " +
                                                  std::to_string(k_max_features));
  const auto f = static_cast<std::size_t>(features);
  if (values.size() % f != 0)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(values.size()) +
                                                  " values are not a whole number of examples of " +
                                                  std::to_string(features) + " features");
  const std::size_t count = values.size() / f;
  if (count > k_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(count) + " examples, over the limit of " +
                                                  std::to_string(k_max_count));
  return write_npy_32(path, "<f4", "(" + std::to_string(count) + ", " + std::to_string(features) + ")", values);
}

result<void> write_npy_labels(const std::string& path, std::span<const std::int32_t> labels) {
  if (labels.size() > k_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(labels.size()) +
                                                  " labels, over the limit of " + std::to_string(k_max_count));
  return write_npy_32(path, "<i4", "(" + std::to_string(labels.size()) + ",)", labels);
}

}  // namespace tessera::core
