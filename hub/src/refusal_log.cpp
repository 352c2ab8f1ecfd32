#include "refusal_log.hpp"

namespace tessera::hub {

void refusal_log::note(const core::error& why, const core::log_sink& log) {
  const auto say = [&](const std::string& text) {
    if (log) log(core::log_level::warning, text);
  };
  const auto now = std::chrono::steady_clock::now();
  if (now - window_ >= std::chrono::seconds(10)) {
    if (quiet_ > 0)
      say(std::to_string(quiet_) + " more connection(s) refused in the last 10 s, not logged one by one (last: " + last_ + ")");
    window_ = now;
    logged_ = 0;
    quiet_ = 0;
  }
  if (logged_ < 5) {
    ++logged_;
    say("connection refused: " + why.message);
  } else {
    ++quiet_;
    last_ = why.message;
  }
}

}  // namespace tessera::hub
