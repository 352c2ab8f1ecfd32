#include "support/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "support/text.hpp"
#include "support/wait.hpp"

namespace tessera::testing {
namespace {

// A descriptor closed when it goes out of scope (the parent's copies of the child's ends).
class fd_guard {
 public:
  explicit fd_guard(int fd = -1) noexcept : fd_(fd) {}
  ~fd_guard() { reset(); }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

core::error os_error(const std::string& what) { return core::make_error(core::errc::io, what + ": " + std::strerror(errno)); }

int open_for_writing(const std::filesystem::path& path) {
  return ::open(path.empty() ? "/dev/null" : path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// Closes every descriptor from 3 up, except `keep`: the child holds nothing of the parent's.
void close_inherited(int keep, int max_fd) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  const bool low = keep <= 3 || ::close_range(3, static_cast<unsigned>(keep - 1), 0) == 0;
  if (low && ::close_range(static_cast<unsigned>(keep + 1), ~0u, 0) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd)
    if (fd != keep) ::close(fd);
}

}  // namespace

core::result<std::unique_ptr<child_process>> child_process::start(std::string name, std::vector<std::string> argv,
                                                                   child_output output) {
  if (argv.empty() || argv.front().empty()) return core::make_error(core::errc::invalid_argument, name + ": no program to run");
  std::unique_ptr<child_process> c(new child_process(std::move(name), std::move(output)));
  if (auto ok = c->launch(std::move(argv)); !ok) return std::move(ok).error();
  return c;
}

core::result<void> child_process::launch(std::vector<std::string> argv) {
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const bool piped = static_cast<bool>(output_.on_out_line);
  int out_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
  if (piped && ::pipe2(out_pipe, O_CLOEXEC) != 0) return os_error(name_ + ": pipe");
  fd_guard out_read(out_pipe[0]), out(piped ? out_pipe[1] : open_for_writing(output_.out));
  fd_guard err(open_for_writing(output_.err)), null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (out.get() < 0 || err.get() < 0 || null.get() < 0) return os_error(name_ + ": cannot open its output files");
  // Closed by a successful exec; otherwise the child writes exec's errno into it.
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return os_error(name_ + ": pipe");
  fd_guard exec_read(exec_pipe[0]), exec_write(exec_pipe[1]);
  const pid_t parent = ::getpid();
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const int max_fd = static_cast<int>(std::min<rlim_t>(files.rlim_cur, 65536));
  pid_ = ::fork();
  if (pid_ < 0) return os_error(name_ + ": fork");
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the thread that started it
    if (::getppid() != parent) ::_exit(126);
    ::dup2(null.get(), 0);
    ::dup2(out.get(), 1);
    ::dup2(err.get(), 2);
    close_inherited(exec_write.get(), max_fd);
    ::execv(args[0], args.data());
    const int why = errno;
    (void)!::write(exec_write.get(), &why, sizeof why);
    ::_exit(127);
  }
  exec_write.reset();
  int why = 0;
  ssize_t n = 0;
  while ((n = ::read(exec_read.get(), &why, sizeof why)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof why)) {
    int status = 0;
    rusage ru{};
    ::wait4(pid_, &status, 0, &ru);
    record(status, ru);
    errno = why;
    return os_error(name_ + ": cannot run " + argv.front());
  }
  if (piped) {
    reader_done_ = false;
    reader_ = std::thread([this, fd = out_read.release()] { read_lines(fd); });
  }
  return {};
}

child_process::~child_process() {
  kill();
  if (reader_.joinable()) reader_.join();
}

std::string child_process::out() const { return read_text(output_.out); }
std::string child_process::err() const { return read_text(output_.err); }

bool child_process::running() {
  if (status_ || pid_ <= 0) return false;
  int status = 0;
  rusage ru{};
  const pid_t r = ::wait4(pid_, &status, WNOHANG, &ru);
  if (r == 0) return true;
  record(r == pid_ ? status : -1, ru);
  return false;
}

std::optional<int> child_process::exit_code() {
  (void)running();
  if (!status_) return std::nullopt;
  if (*status_ < 0) return -1;
  if (WIFEXITED(*status_)) return WEXITSTATUS(*status_);
  if (WIFSIGNALED(*status_)) return 128 + WTERMSIG(*status_);
  return -1;
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds limit) {
  (void)eventually([&] { return !running(); }, limit);
  return exit_code();
}

void child_process::kill() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  rusage ru{};
  const pid_t r = ::wait4(pid_, &status, 0, &ru);
  record(r == pid_ ? status : -1, ru);
}

void child_process::terminate(std::chrono::milliseconds grace) {
  if (!running()) return;
  ::kill(pid_, SIGTERM);
  (void)wait_exit(grace);
  kill();
}

std::string child_process::exit_text() {
  (void)running();
  if (!status_) return "running";
  if (*status_ >= 0 && WIFSIGNALED(*status_)) return "signal " + std::to_string(WTERMSIG(*status_));
  return "status " + std::to_string(*exit_code());
}

bool child_process::wait_output_closed(std::chrono::milliseconds limit) {
  return eventually(
      [&] {
        std::lock_guard lock(reader_mutex_);
        return reader_done_;
      },
      limit);
}

void child_process::record(int status, const rusage& ru) {
  status_ = status;
  usage_ = ru;
}

void child_process::read_lines(int fd) {
  std::FILE* in = ::fdopen(fd, "r");
  if (in == nullptr) ::close(fd);
  std::ofstream copy;
  if (!output_.out.empty()) copy.open(output_.out, std::ios::out | std::ios::trunc);
  char* buf = nullptr;
  std::size_t cap = 0;
  ssize_t n = 0;
  while (in != nullptr && (n = ::getline(&buf, &cap, in)) > 0) {
    std::string line(buf, static_cast<std::size_t>(n));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    output_.on_out_line(line);
    if (copy.is_open()) copy << line << '\n' << std::flush;
  }
  std::free(buf);
  if (in != nullptr) std::fclose(in);
  std::lock_guard lock(reader_mutex_);
  reader_done_ = true;
}

long proc_status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  return -1;
}

long child_process::status_kib(const char* field) const {
  if (status_) return -1;
  return proc_status_kib(pid_, field);
}

}  // namespace tessera::testing
