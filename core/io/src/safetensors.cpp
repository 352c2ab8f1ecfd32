// safetensors reading and writing (layout in the header). The reader trusts nothing in the file: the
// header length is bounded before it sizes a buffer, and every tensor's dtype, shape and offsets are
// checked against each other and against the file's size before any tensor byte is read.
#include "tessera/core/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/base/endian.hpp"

namespace tessera::core {
namespace {

using json = nlohmann::json;

constexpr std::size_t k_length_bytes = 8;  // the u64 header length in front of the header
// The reference implementation pads the header with spaces to a multiple of 8 so that the tensor data
// starts 8-aligned when the file is memory-mapped.
constexpr std::size_t k_header_alignment = 8;
// Bytes converted per read or write call between the file and the float vectors.
constexpr std::size_t k_staging_bytes = std::size_t{1} << 18;
static_assert(k_staging_bytes % sizeof(float) == 0);
// Names in messages are cut at this length: a hostile header must not make a message megabytes long.
constexpr std::size_t k_max_quoted_name = 80;
constexpr const char* k_metadata_key = "__metadata__";

std::string errno_text(int e) { return std::generic_category().message(e); }

std::string quote_name(std::string_view name) {
  if (name.size() <= k_max_quoted_name) return "'" + std::string(name) + "'";
  return "'" + std::string(name.substr(0, k_max_quoted_name)) + "...'";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return out + "]";
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

class unique_fd {
 public:
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Reads until `out` is full or the file ends; returns the bytes read.
result<std::size_t> pread_full(int fd, std::span<std::uint8_t> out, std::uint64_t offset, const std::string& path) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io, path + ": read failed at offset " + std::to_string(offset + done) + ": " +
                                      errno_text(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

// Product of `shape` if every entry is >= 0 and it fits in 64 bits, else nullopt.
std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  bool overflow = false;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u) overflow = true;
    n *= u;  // wraps only when overflow is set; a later 0 still makes the product 0
    if (u == 0) return std::uint64_t{0};
  }
  if (overflow) return std::nullopt;
  return n;
}

// ---- writing -------------------------------------------------------------------------------------

result<std::string> build_header(const std::string& path, std::span<const tensor_f32> tensors,
                                 const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const tensor_f32& t : tensors) {
    if (t.name.empty()) return make_error(errc::invalid_argument, path + ": a tensor has an empty name");
    if (t.name == k_metadata_key)
      return make_error(errc::invalid_argument, path + ": a tensor cannot be called '__metadata__'");
    if (!names.insert(t.name).second)
      return make_error(errc::invalid_argument, path + ": two tensors are called " + quote_name(t.name));
    const auto n = element_count(t.shape);
    if (!n || *n != t.data.size())
      return make_error(errc::invalid_argument, path + ": tensor " + quote_name(t.name) + " has shape " +
                                                    shape_text(t.shape) + " but " + std::to_string(t.data.size()) +
                                                    " values");
    const std::uint64_t bytes = std::uint64_t{t.data.size()} * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[k_metadata_key] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    // dump() is the one place nlohmann throws on our data: a string that is not valid UTF-8.
    return make_error(errc::invalid_argument, path + ": a tensor name or metadata string is not valid UTF-8");
  }
  text.append((k_header_alignment - text.size() % k_header_alignment) % k_header_alignment, ' ');
  if (text.size() > k_safetensors_max_header)
    return make_error(errc::over_budget, path + ": the header would be " + std::to_string(text.size()) +
                                             " bytes, over the limit of " +
                                             std::to_string(k_safetensors_max_header) + " that readers enforce");
  return text;
}

result<void> write_contents(std::FILE* f, const std::string& tmp, const std::string& header,
                            std::span<const tensor_f32> tensors) {
  const auto failed = [&] { return make_error(errc::io, tmp + ": write failed: " + errno_text(errno)); };
  std::array<std::uint8_t, k_length_bytes> length{};
  le_writer(length).u64(header.size());
  if (std::fwrite(length.data(), 1, length.size(), f) != length.size()) return failed();
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) return failed();
  std::vector<std::uint8_t> staging(k_staging_bytes);
  for (const tensor_f32& t : tensors) {
    for (std::size_t i = 0; i < t.data.size();) {
      const std::size_t k = std::min(t.data.size() - i, staging.size() / sizeof(float));
      le_writer w{std::span(staging).first(k * sizeof(float))};
      for (std::size_t j = 0; j < k; ++j) w.f32(t.data[i + j]);
      if (std::fwrite(staging.data(), 1, k * sizeof(float), f) != k * sizeof(float)) return failed();
      i += k;
    }
  }
  // The data must be on disk before the rename makes it the file: otherwise a crash could leave the
  // new name pointing at an empty or partial file.
  if (std::fflush(f) != 0) return failed();
  if (::fsync(fileno(f)) != 0) return make_error(errc::io, tmp + ": fsync failed: " + errno_text(errno));
  return {};
}

// ---- reading -------------------------------------------------------------------------------------

struct tensor_entry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t elements = 0;
  std::uint64_t begin = 0;  // within the data section
  std::uint64_t end = 0;
};

// A JSON value as a non-negative integer; `what` names the field for the message.
result<std::uint64_t> unsigned_field(const json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer()) return make_error(errc::bad_format, what + " is negative (" + v.dump() + ")");
  return make_error(errc::bad_format, what + " is not a non-negative integer");
}

result<tensor_entry> parse_entry(const std::string& path, const std::string& name, const json& v,
                                 std::uint64_t data_bytes) {
  const std::string where = path + ": tensor " + quote_name(name);
  if (!v.is_object()) return make_error(errc::bad_format, where + ": the entry is not a JSON object");
  const auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string())
    return make_error(errc::bad_format, where + ": 'dtype' is missing or not a string");
  if (dtype->get_ref<const std::string&>() != "F32")
    return make_error(errc::unsupported, where + " has dtype " + quote_name(dtype->get_ref<const std::string&>()) +
                                             "; only F32 is supported");
  tensor_entry e;
  e.name = name;
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array())
    return make_error(errc::bad_format, where + ": 'shape' is missing or not an array");
  for (std::size_t i = 0; i < shape->size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(const std::uint64_t d,
                             unsigned_field((*shape)[i], where + ": shape[" + std::to_string(i) + "]"));
    if (d > std::uint64_t{std::numeric_limits<std::int64_t>::max()})
      return make_error(errc::bad_format, where + ": shape[" + std::to_string(i) + "] is too large");
    e.shape.push_back(static_cast<std::int64_t>(d));
  }
  const auto offsets = v.find("data_offsets");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2)
    return make_error(errc::bad_format, where + ": 'data_offsets' is missing or not an array of two offsets");
  TESSERA_ASSIGN_OR_RETURN(e.begin, unsigned_field((*offsets)[0], where + ": data_offsets[0]"));
  TESSERA_ASSIGN_OR_RETURN(e.end, unsigned_field((*offsets)[1], where + ": data_offsets[1]"));
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end)
    return make_error(errc::bad_format, where + ": data_offsets " + range + " end before they begin");
  if (e.end > data_bytes)
    return make_error(errc::truncated, where + ": data_offsets " + range + " run past the end of the " +
                                           std::to_string(data_bytes) + "-byte data section");
  const auto n = element_count(e.shape);
  if (!n || *n > (e.end - e.begin) / sizeof(float) || *n * sizeof(float) != e.end - e.begin)
    return make_error(errc::bad_format, where + ": shape " + shape_text(e.shape) + " does not match data_offsets " +
                                            range + " (" + std::to_string(e.end - e.begin) + " bytes, " +
                                            std::to_string(sizeof(float)) + " per F32 value)");
  e.elements = *n;
  return e;
}

// Tensors must tile the data section exactly, as the reference implementation requires: no overlap
// (two tensors sharing bytes), no gap (bytes no tensor owns), nothing after the last one. Sorts them
// by offset.
result<void> check_tiling(const std::string& path, std::vector<tensor_entry>& entries, std::uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const tensor_entry& a, const tensor_entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const tensor_entry* previous = nullptr;
  for (const tensor_entry& e : entries) {
    if (e.begin < covered)
      return make_error(errc::bad_format, path + ": tensor " + quote_name(e.name) + " at data offset " +
                                              std::to_string(e.begin) + " overlaps tensor " +
                                              quote_name(previous->name) + ", which ends at " + std::to_string(covered));
    if (e.begin > covered)
      return make_error(errc::bad_format, path + ": data bytes [" + std::to_string(covered) + ", " +
                                              std::to_string(e.begin) + ") before tensor " + quote_name(e.name) +
                                              " belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes)
    return make_error(errc::bad_format, path + ": " + std::to_string(data_bytes - covered) +
                                            " data bytes after the last tensor belong to no tensor");
  return {};
}

result<std::map<std::string, std::string>> parse_metadata(const std::string& path, const json& v) {
  if (!v.is_object()) return make_error(errc::bad_format, path + ": '__metadata__' is not a JSON object");
  std::map<std::string, std::string> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string())
      return make_error(errc::bad_format, path + ": '__metadata__' entry " + quote_name(it.key()) + " is not a string");
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

}  // namespace

const tensor_f32* safetensors_file::find(const std::string& name) const {
  for (const tensor_f32& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

result<void> write_safetensors(const std::string& path, std::span<const tensor_f32> tensors,
                               const std::map<std::string, std::string>& metadata) {
  TESSERA_ASSIGN_OR_RETURN(const std::string header, build_header(path, tensors, metadata));
  const std::string tmp = path + ".tmp";
  file_ptr f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return make_error(errc::io, tmp + ": cannot create: " + errno_text(errno));
  auto written = write_contents(f.get(), tmp, header, tensors);
  const int close_result = std::fclose(f.release());
  if (written && close_result != 0) written = make_error(errc::io, tmp + ": close failed: " + errno_text(errno));
  if (!written) {
    std::remove(tmp.c_str());
    return written;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return make_error(errc::io, path + ": cannot rename " + tmp + " over it: " + errno_text(e));
  }
  // Make the rename itself durable. Best effort: some file systems refuse fsync on a directory, and the
  // file is complete either way.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) static_cast<void>(::fsync(dir_fd.get()));
  return {};
}

result<safetensors_file> read_safetensors(const std::string& path) {
  const unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(errc::io, path + ": cannot stat: " + errno_text(errno));
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < k_length_bytes)
    return make_error(errc::truncated, path + ": " + std::to_string(file_bytes) +
                                           " bytes, too short for the 8-byte header length");

  std::array<std::uint8_t, k_length_bytes> length{};
  TESSERA_ASSIGN_OR_RETURN(std::size_t got, pread_full(fd.get(), length, 0, path));
  if (got < length.size()) return make_error(errc::truncated, path + ": the file shrank while being read");
  std::uint64_t header_bytes = 0;
  const bool whole = le_reader(length).u64(header_bytes);
  TESSERA_ASSERT(whole);  // the array holds exactly the 8 bytes
  // Both bounds are checked before the header is read: the length is the file's word, not ours.
  if (header_bytes > k_safetensors_max_header)
    return make_error(errc::over_budget, path + ": header length " + std::to_string(header_bytes) +
                                             " is over the limit of " + std::to_string(k_safetensors_max_header) +
                                             " bytes (not a safetensors file, or a hostile one)");
  if (header_bytes > file_bytes - k_length_bytes)
    return make_error(errc::truncated, path + ": header length " + std::to_string(header_bytes) +
                                           " runs past the end of the file (" +
                                           std::to_string(file_bytes - k_length_bytes) + " bytes follow it)");

  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  const std::span text_bytes(reinterpret_cast<std::uint8_t*>(text.data()), text.size());
  TESSERA_ASSIGN_OR_RETURN(got, pread_full(fd.get(), text_bytes, k_length_bytes, path));
  if (got < text.size()) return make_error(errc::truncated, path + ": the file shrank while being read");
  json header;
  try {
    header = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const json::exception&) {
    header = json(json::value_t::discarded);  // not expected with exceptions off; treated the same
  }
  if (header.is_discarded()) return make_error(errc::bad_format, path + ": the header is not valid JSON");
  if (!header.is_object()) return make_error(errc::bad_format, path + ": the header is not a JSON object");

  const std::uint64_t data_offset = k_length_bytes + header_bytes;
  const std::uint64_t data_bytes = file_bytes - data_offset;
  safetensors_file out;
  std::vector<tensor_entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == k_metadata_key) {
      TESSERA_ASSIGN_OR_RETURN(out.metadata, parse_metadata(path, it.value()));
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(tensor_entry e, parse_entry(path, it.key(), it.value(), data_bytes));
    entries.push_back(std::move(e));
  }

  TESSERA_TRY(check_tiling(path, entries, data_bytes));

  std::vector<std::uint8_t> staging(k_staging_bytes);
  for (tensor_entry& e : entries) {
    tensor_f32 t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.data.resize(static_cast<std::size_t>(e.elements));
    for (std::size_t i = 0; i < t.data.size();) {
      const std::size_t k = std::min(t.data.size() - i, staging.size() / sizeof(float));
      const auto chunk = std::span(staging).first(k * sizeof(float));
      TESSERA_ASSIGN_OR_RETURN(got, pread_full(fd.get(), chunk, data_offset + e.begin + i * sizeof(float), path));
      if (got < chunk.size())
        return make_error(errc::truncated, path + ": tensor " + quote_name(t.name) + ": the file shrank while being read");
      le_reader r(chunk);
      for (std::size_t j = 0; j < k; ++j) {
        const bool read = r.f32(t.data[i + j]);
        TESSERA_ASSERT(read);  // the chunk holds exactly k values
      }
      i += k;
    }
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace tessera::core
