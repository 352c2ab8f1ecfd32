#include "tessera/core/io/file_io.hpp"

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera::core {
namespace {

error io_error(const std::string& what, const std::filesystem::path& path, int err) {
  return make_error(errc::io, what + " " + path.string() + ": " + std::strerror(err));
}

// The bytes in a new file beside `path`, fsync'd and closed: the temporary's name, or an error with
// nothing left behind.
result<std::filesystem::path> write_temporary(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                              unsigned mode) {
  // A random suffix keeps concurrent writers from sharing a temporary.
  std::random_device rd;
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(rd());
  // O_EXCL: never follow or reuse something already there; the mode is set at creation so a private
  // file is never readable by others, not even for an instant.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return io_error("cannot create", tmp, errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error("cannot write", tmp, err);
    }
    done += static_cast<std::size_t>(n);
  }
  // The data must be on disk before a rename makes it the file.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot flush", tmp, err);
  }
  return tmp;
}

// Makes renames in the folder of `path` durable. Best effort: some file systems refuse fsync on a
// directory.
void sync_directory_of(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    static_cast<void>(::fsync(dir_fd));
    ::close(dir_fd);
  }
}

}  // namespace

result<void> write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes, unsigned mode,
                               bool replace) {
  TESSERA_ASSIGN_OR_RETURN(const std::filesystem::path tmp, write_temporary(path, bytes, mode));
  if (replace) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return io_error("cannot rename to", path, err);
    }
  } else {
    // link() fails with EEXIST instead of replacing: the no-overwrite promise holds even if the file
    // appeared after the caller looked.
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      if (err == EEXIST) return make_error(errc::io, path.string() + " exists (use --force to replace it)");
      return io_error("cannot create", path, err);
    }
    ::unlink(tmp.c_str());
  }
  sync_directory_of(path);
  return {};
}

result<void> write_file_keeping_previous(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                         unsigned mode, const std::filesystem::path& previous) {
  // Each step, and what a crash right after it leaves (A the file at `path`, B the new bytes):
  //   1. B written to a temporary and fsync'd      path = A, previous = older; a stray temporary
  //   2. rename path -> previous                   path absent, previous = A
  //   3. rename temporary -> path                  path = B, previous = A
  //   4. fsync the folder                          the renames are durable
  // Until 4 the file system may keep any prefix of the renames, or (without ordering promises) only
  // 3: path = B, previous = older. B is whole on disk before 3 can name it, so every state holds A
  // or B whole under path or previous.
  TESSERA_ASSIGN_OR_RETURN(const std::filesystem::path tmp, write_temporary(path, bytes, mode));
  if (::rename(path.c_str(), previous.c_str()) != 0 && errno != ENOENT) {  // no file yet: nothing to keep
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename " + path.string() + " to", previous, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());  // previous still holds the last good bytes
    return io_error("cannot rename to", path, err);
  }
  sync_directory_of(path);
  return {};
}

namespace {

// The file open for reading and its size; errc::bad_format naming the path if it is over max_bytes.
struct sized_file {
  int fd = -1;
  std::size_t bytes = 0;
};
result<sized_file> open_sized(const std::filesystem::path& path, std::size_t max_bytes) {
  // POSIX calls rather than iostreams: the static agent then carries no locale machinery.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot size", path, err);
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return make_error(errc::bad_format, path.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  return sized_file{.fd = fd, .bytes = static_cast<std::size_t>(st.st_size)};
}

// Fills `out` from the file and closes it.
result<void> read_and_close(int fd, const std::filesystem::path& path, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return io_error(n < 0 ? "cannot read" : "file shrank while reading", path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return {};
}

}  // namespace

result<std::vector<std::byte>> read_file_bounded(const std::filesystem::path& path, std::size_t max_bytes) {
  TESSERA_ASSIGN_OR_RETURN(const sized_file f, open_sized(path, max_bytes));
  std::vector<std::byte> bytes(f.bytes);
  TESSERA_TRY(read_and_close(f.fd, path, bytes));
  return bytes;
}

result<std::size_t> read_file_into(const std::filesystem::path& path, std::span<std::byte> out) {
  TESSERA_ASSIGN_OR_RETURN(const sized_file f, open_sized(path, out.size()));
  TESSERA_TRY(read_and_close(f.fd, path, out.first(f.bytes)));
  return f.bytes;
}

}  // namespace tessera::core
