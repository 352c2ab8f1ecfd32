#include "process_figures.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace tessera::hub {

process_figures read_process_figures() {
  process_figures p;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (std::ifstream stat("/proc/self/stat"); stat && tick > 0) {
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    const auto close = text.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(text.substr(close + 2));
      std::string field;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::strtod(field.c_str(), nullptr);
        if (i == 15) stime = std::strtod(field.c_str(), nullptr);
      }
      p.cpu_seconds = (utime + stime) / tick;
    }
  }
  if (std::ifstream statm("/proc/self/statm"); statm) {
    double size = 0, resident = 0;
    if (statm >> size >> resident) p.resident_bytes = resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
  }
  if (DIR* d = ::opendir("/proc/self/fd"); d != nullptr) {
    double n = 0;
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] == '.' ? 0 : 1;
    ::closedir(d);
    p.open_fds = n - 1;  // the directory being read is one of them
  }
  return p;
}

}  // namespace tessera::hub
