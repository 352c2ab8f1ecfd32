// Private to the .npy reader and writers: the file format, and opening a file by reading and checking
// its preamble and header.
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
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "dataset_internal.hpp"

namespace tessera::core::detail {

inline constexpr std::array<std::uint8_t, 6> k_npy_magic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// Bounds on what a header may declare, the same as the IDX reader's: 2^24 elements per example, 2^31
// examples (gather() takes 32-bit indices). The writers refuse what the reader would.
inline constexpr std::uint64_t k_npy_max_features = std::uint64_t{1} << 24;
inline constexpr std::uint64_t k_npy_max_count = std::uint64_t{1} << 31;

// What a file holds, which decides the dtypes and shapes it may declare.
enum class npy_role { features, labels };

struct npy_dtype {
  char kind = 'f';          // 'f', 'i' or 'u'
  unsigned size = 4;        // bytes per element: 1, 2, 4 or 8
  bool big_endian = false;  // the byte order of the elements in the file
  std::string descr;        // as written, for messages
};

struct npy_header {
  npy_dtype dtype;
  std::string shape_text;          // "(60000, 28, 28)", for messages
  std::int64_t count = 0;          // examples: the first dimension
  std::int64_t record_elements = 0;
  std::int64_t record_bytes = 0;
  std::int64_t data_offset = 0;    // bytes before the first record

  [[nodiscard]] record_layout layout() const noexcept { return {count, record_bytes, data_offset}; }
  // What the header declares, as messages quote it: "('shape' (60000, 784), 'descr' '<f4')".
  [[nodiscard]] std::string declared() const { return "('shape' " + shape_text + ", 'descr' '" + dtype.descr + "')"; }
};

// A .npy file open for pread, with its checked header.
struct npy_file {
  std::string path;
  unique_fd fd;
  npy_header header;
};

// Opens a .npy file for pread: parses and checks the header for `role`, then the file size against it,
// so that gather() can only meet a short read if the file shrinks while open.
[[nodiscard]] result<npy_file> open_npy_file(const std::string& path, npy_role role);

}  // namespace tessera::core::detail
