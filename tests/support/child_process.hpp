// One child process for tests and benchmarks: started with its output captured, SIGKILLed and reaped
// when its guard goes, so a failing check or a stopped benchmark never leaves processes behind.
//
// The child gets /dev/null as its standard input, its standard output and error in files, and none of
// the parent's other descriptors (an in-process agent's socket kept open in a child would never close).
// It also dies with the thread that started it (PR_SET_PDEATHSIG), even if the parent is killed before
// its guards run. With `on_out_line`, standard output goes through a pipe instead and each line is
// handed over as it arrives (and still appended to the `out` file, when one is named): a benchmark
// timestamps the hub's progress lines that way.
//
//   auto hub = testing::child_process::start("hub", {hub_binary, "--config", path},
//                                            {.out = dir / "hub.out", .err = dir / "hub.err"});
//   if (!hub) fail(hub.error().message);
//   ...
//   const auto code = hub.value()->wait_exit(60s);        // std::nullopt: still running
//   const std::string log = hub.value()->err();
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::testing {

struct child_output {
  std::filesystem::path out{};  // standard output to this file (truncated); empty: /dev/null
  std::filesystem::path err{};  // standard error to this file (truncated); empty: /dev/null
  // When set, standard output goes through a pipe: each line, without its newline, is passed here on a
  // reader thread as soon as it arrives, then appended to `out` if that is named.
  std::function<void(const std::string& line)> on_out_line{};
};

class child_process {
 public:
  // Starts argv[0] (a path; no PATH search) with `argv`. Fails if it cannot be executed.
  [[nodiscard]] static core::result<std::unique_ptr<child_process>> start(std::string name, std::vector<std::string> argv,
                                                                           child_output output);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] const std::filesystem::path& out_path() const noexcept { return output_.out; }
  [[nodiscard]] const std::filesystem::path& err_path() const noexcept { return output_.err; }
  // What it wrote so far, read from the files.
  [[nodiscard]] std::string out() const;
  [[nodiscard]] std::string err() const;

  // True until the process has exited (reaps it then).
  [[nodiscard]] bool running();
  // The exit status (128 + signal if killed by one), once it has exited.
  [[nodiscard]] std::optional<int> exit_code();
  // Waits up to `limit` for it to exit; its exit code, or std::nullopt if it is still running.
  [[nodiscard]] std::optional<int> wait_exit(std::chrono::milliseconds limit);
  // SIGKILL and reap; a no-op once the process has exited.
  void kill();
  // SIGTERM, up to `grace` to exit, then SIGKILL; reaps it either way.
  void terminate(std::chrono::milliseconds grace);
  // "status N" or "signal N" once it has exited, else "running".
  [[nodiscard]] std::string exit_text();
  // Its resource usage (CPU time, ru_maxrss in KiB) from wait4(), once reaped; zeros before.
  [[nodiscard]] const rusage& usage() const noexcept { return usage_; }
  // A field of /proc/<pid>/status in KiB while it runs ("VmRSS", "VmHWM"); -1 once it has gone.
  [[nodiscard]] long status_kib(const char* field) const;
  // With on_out_line: waits up to `limit` until its standard output is closed and every line was
  // handed over; true then. Without it: true.
  [[nodiscard]] bool wait_output_closed(std::chrono::milliseconds limit);

 private:
  child_process(std::string name, child_output output) : name_(std::move(name)), output_(std::move(output)) {}
  core::result<void> launch(std::vector<std::string> argv);
  void read_lines(int fd);
  void record(int status, const rusage& ru);

  std::string name_;
  child_output output_;
  pid_t pid_ = -1;
  std::optional<int> status_;  // the raw wait status, once reaped
  rusage usage_{};
  std::thread reader_;
  std::mutex reader_mutex_;
  bool reader_done_ = true;  // no reader thread, or it saw end of file
};

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM"); -1 if the process or the field is not there.
[[nodiscard]] long proc_status_kib(pid_t pid, const char* field);

}  // namespace tessera::testing
