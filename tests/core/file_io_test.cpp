// Whole-file reads and crash-safe writes (file_io.cpp): the bytes and mode written, replacing or
// keeping an existing file, no temporary left behind, the old file intact when a write fails, and
// reads bounded by size.
#include "tessera/core/io/file_io.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "test_files.hpp"

namespace core = tessera::core;
namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

// The names of the entries of a folder.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("write_file_atomic: the bytes, with the mode asked, and nothing else in the folder") {
  temp_dir dir;
  const std::string path = dir.file("hub.ckpt");
  REQUIRE(core::write_file_atomic(path, bytes_of("checkpoint 1"), 0600, /*replace=*/false).ok());
  CHECK(read_bytes(path) == "checkpoint 1");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(entries(dir.path()) == std::vector<std::string>{"hub.ckpt"});

  REQUIRE(core::write_file_atomic(dir.file("empty"), {}, 0644, false).ok());
  CHECK(fs::file_size(dir.file("empty")) == 0);
}

TEST_CASE("write_file_atomic: replace swaps in a new file, so a reader of the old one keeps the old bytes") {
  temp_dir dir;
  const std::string path = dir.file("model.bin");
  REQUIRE(core::write_file_atomic(path, bytes_of("old bytes"), 0644, false).ok());
  std::ifstream reader(path, std::ios::binary);  // opened before the replacement
  REQUIRE(core::write_file_atomic(path, bytes_of("new"), 0644, /*replace=*/true).ok());
  CHECK(read_bytes(path) == "new");
  const std::string seen{std::istreambuf_iterator<char>(reader), std::istreambuf_iterator<char>()};
  CHECK(seen == "old bytes");  // never written in place: the old file is whole, not a mix
  CHECK(entries(dir.path()) == std::vector<std::string>{"model.bin"});
}

TEST_CASE("write_file_atomic: without replace an existing file is kept and the write refused") {
  temp_dir dir;
  const std::string path = dir.file("ca.key");
  REQUIRE(core::write_file_atomic(path, bytes_of("first key"), 0600, false).ok());
  const auto e = error_of(core::write_file_atomic(path, bytes_of("second key"), 0600, false));
  CHECK(e.code == core::errc::io);
  CHECK(e.message == path + " exists (use --force to replace it)");
  CHECK(read_bytes(path) == "first key");
  CHECK(entries(dir.path()) == std::vector<std::string>{"ca.key"});
}

TEST_CASE("write_file_atomic: a failed write leaves the old file as it was and no temporary") {
  temp_dir dir;
  // The target is a non-empty folder: rename() cannot put a file in its place.
  const std::string target = dir.file("target");
  fs::create_directories(fs::path(target) / "inside");
  const auto e = error_of(core::write_file_atomic(target, bytes_of("data"), 0644, /*replace=*/true));
  CHECK(e.code == core::errc::io);
  CHECK(contains(e.message, "cannot rename to " + target + ": "));
  CHECK(fs::is_directory(fs::path(target) / "inside"));
  CHECK(entries(dir.path()) == std::vector<std::string>{"target"});

  // A folder that does not exist: the temporary cannot even be created.
  const std::string nowhere = dir.file("no-such-dir/file");
  const auto n = error_of(core::write_file_atomic(nowhere, bytes_of("data"), 0644, true));
  CHECK(n.code == core::errc::io);
  CHECK(contains(n.message, "cannot create " + nowhere + ".tmp"));
  CHECK(contains(n.message, "No such file"));
}

TEST_CASE("read_file_bounded: the whole file up to the bound, refused above it, naming the path") {
  temp_dir dir;
  const std::string path = dir.file("small");
  write_bytes(path, std::string_view("0123456789"));
  CHECK(core::read_file_bounded(path, 10).value() == bytes_of("0123456789"));
  CHECK(core::read_file_bounded(path, 1 << 20).value().size() == 10);
  const auto big = error_of(core::read_file_bounded(path, 9));
  CHECK(big.code == core::errc::bad_format);
  CHECK(big.message == path + ": larger than 9 bytes");

  write_bytes(dir.file("empty"), std::string_view());
  CHECK(core::read_file_bounded(dir.file("empty"), 0).value().empty());

  const auto missing = error_of(core::read_file_bounded(dir.file("missing"), 10));
  CHECK(missing.code == core::errc::io);
  CHECK(contains(missing.message, "cannot open " + dir.file("missing") + ": No such file"));
}

TEST_CASE("read_file_into: the whole file into the caller's buffer, refused if it does not fit") {
  temp_dir dir;
  const std::string path = dir.file("key");
  write_bytes(path, std::string_view("0123456789"));
  std::vector<std::byte> buffer(16, std::byte{0xff});
  CHECK(core::read_file_into(path, buffer).value() == 10);
  CHECK(std::vector<std::byte>(buffer.begin(), buffer.begin() + 10) == bytes_of("0123456789"));
  CHECK(buffer[10] == std::byte{0xff});  // nothing past the file's bytes is touched
  std::vector<std::byte> small(9);
  const auto big = error_of(core::read_file_into(path, small));
  CHECK(big.code == core::errc::bad_format);
  CHECK(big.message == path + ": larger than 9 bytes");
  CHECK(error_of(core::read_file_into(dir.file("missing"), buffer)).code == core::errc::io);
}
