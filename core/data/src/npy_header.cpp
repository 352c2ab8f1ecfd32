// Reading and checking a .npy preamble and header (the byte layout is in npy_header.hpp).
#include "npy_header.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/base/endian.hpp"

namespace tessera::core::detail {

namespace {

// While parsing, a dimension above this is refused before it could overflow the 64-bit accumulator
// (k_max_dim * 10 + 9 < 2^64); the real limits (k_npy_max_features, k_npy_max_count) are checked after.
constexpr std::uint64_t k_max_dim = std::uint64_t{1} << 40;
// NumPy 2's NPY_MAXDIMS.
constexpr std::size_t k_max_rank = 64;

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

// ---- dtypes and shapes ----------------------------------------------------------------------------

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

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::string out = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(dims[i]);
  return out + (dims.size() == 1 ? ",)" : ")");
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
  if (dims[0] > k_npy_max_count)
    return make_error(errc::bad_format, path + ": 'shape' " + h.shape_text + " declares " + std::to_string(dims[0]) +
                                            " examples, more than the limit of " + std::to_string(k_npy_max_count));
  std::uint64_t features = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] == 0)
      return make_error(errc::unsupported, path + ": 'shape' " + h.shape_text + " gives examples with no elements");
    if (dims[i] > k_npy_max_features / features)
      return make_error(errc::unsupported, path + ": 'shape' " + h.shape_text + " gives more than " +
                                               std::to_string(k_npy_max_features) + " elements per example");
    features *= dims[i];
  }
  h.count = static_cast<std::int64_t>(dims[0]);
  h.record_elements = static_cast<std::int64_t>(features);
  h.record_bytes = h.record_elements * static_cast<std::int64_t>(h.dtype.size);
  return {};
}

}  // namespace

result<npy_file> open_npy_file(const std::string& path, npy_role role) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(errc::io, path + ": cannot stat: " + errno_text(errno));
  const std::int64_t file_size = st.st_size;

  std::array<std::uint8_t, 12> pre{};
  TESSERA_ASSIGN_OR_RETURN(const std::size_t have, pread_full(fd.get(), pre, 0, path));
  const std::size_t magic_have = std::min(have, k_npy_magic.size());
  if (!std::equal(pre.begin(), pre.begin() + static_cast<std::ptrdiff_t>(magic_have), k_npy_magic.begin()))
    return make_error(errc::bad_format, path + ": not a .npy file: the magic is " +
                                            hex_bytes(std::span(pre).first(magic_have)) +
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
  const bool read = le_reader(std::span(pre).subspan(8, length_bytes)).uint(header_length, length_bytes);
  TESSERA_ASSERT(read);  // have >= preamble: the bytes are there
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
                           pread_full(fd.get(), text_bytes, static_cast<std::int64_t>(preamble), path));
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

  TESSERA_TRY(check_file_size(path, file_size, h.layout(), h.declared()));
  return npy_file{path, std::move(fd), std::move(h)};
}

}  // namespace tessera::core::detail
