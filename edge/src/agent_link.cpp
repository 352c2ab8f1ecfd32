// The agent's link to the hub (agent.hpp): the session's handlers, HELLO and what a reconnection
// resumes, and why a link ended.
#include <cstdio>

#include <boost/asio/post.hpp>

#include "tessera/core/math/layers.hpp"
#include "tessera/edge/agent.hpp"

namespace tessera::edge {

using core::log_level;

namespace {

constexpr std::string_view k_refused = "peer refused: ";  // the session's words for the hub's REFUSE

// What the hub said in its REFUSE, without the session's prefix; any other reason as it is.
std::string hub_words(const core::error& why) {
  return why.message.starts_with(k_refused) ? why.message.substr(k_refused.size()) : why.message;
}

}  // namespace

// Why the link to the hub ended or never came up, and when the next attempt is, in one line: the hub's
// refusal in its own words (one that reconnecting will not cure says so), this device's own refusal,
// an unreachable hub, or a link that broke.
void agent::log_link_ended(const core::error& why, std::chrono::milliseconds next) {
  const std::string hub = config_.hub.host + ":" + std::to_string(config_.hub.port);
  const bool from_hub = why.message.starts_with(k_refused);
  const std::string said = hub_words(why);
  char in[32];
  std::snprintf(in, sizeof in, "%.1f s", static_cast<double>(next.count()) / 1000.0);
  const std::string when = std::string("; next attempt in ") + in;
  if (run_over_ != run_end::none) {
    if (config_.after_run == after_run_mode::exit) return;  // exiting: the link's close says so
    if (run_over_ == run_end::told) {  // the run's end itself: one line says the agent waits for the next
      run_over_ = run_end::said;
      std::snprintf(in, sizeof in, "%.1f s", static_cast<double>(config_.backoff_max.count()) / 1000.0);
      log(log_level::info, "the hub at " + hub + " finished its run: " + said + "; waiting for its next run (after_run wait), asking every " + in);
      return;
    }
    // Between runs the hub is down: quiet while it is unreachable; anything else is said as always.
    if (why.code == net::errc::connect_failed || why.code == net::errc::resolve_failed || why.code == net::errc::handshake_timeout) return;
  }
  if (why.code == net::errc::refused_lasting) {
    log(log_level::error, "the hub at " + hub + " turned this device away: " + said +
                              " (reconnecting will not change that: it tries again after its longest backoff" + when + ")");
  } else if (why.code == net::errc::refused && from_hub) {
    log(log_level::warning, "the hub at " + hub + " ended the link: " + said + when);
  } else if (why.code == net::errc::refused) {  // this device's own REFUSE (agent::refuse)
    log(log_level::warning, "this device ended its link to the hub at " + hub + ": " + said + when);
  } else if (why.code == net::errc::tls_handshake) {  // reachable, but the certificates do not agree
    log(log_level::warning, "no secure link to the hub at " + hub + ": " + why.message + when);
  } else if (why.code == net::errc::connect_failed || why.code == net::errc::resolve_failed || why.code == net::errc::handshake_timeout) {
    log(log_level::warning, "cannot reach the hub at " + hub + ": " + why.message + when);
  } else {
    log(log_level::warning, "link to the hub lost (" + hub + "): " + why.message + when);
  }
}

void agent::attach(const std::shared_ptr<net::session>& s) {
  std::weak_ptr<net::session> weak = s;
  s->on_ready([this, weak] {
    if (auto self = weak.lock()) on_ready(self);
  });
  s->on_message([this, weak](const net::message& m) {
    auto self = weak.lock();
    if (!self || stopped_) return;
    if (const auto* r = std::get_if<net::msg::refuse>(&m); r != nullptr && r->code == net::msg::k_run_finished) run_over_ = run_end::told;
    if (std::holds_alternative<net::msg::welcome>(m)) on_welcome(self);
    else if (const auto* a = std::get_if<net::msg::assign>(&m)) on_assign(*a);
    else if (const auto* r = std::get_if<net::msg::result>(&m)) on_result(*r);
    else if (const auto* q = std::get_if<net::msg::stats>(&m)) on_stats(*q);
    else if (std::holds_alternative<net::msg::secagg_roster>(m) || std::holds_alternative<net::msg::secagg_inbox>(m) ||
             std::holds_alternative<net::msg::secagg_check>(m) || std::holds_alternative<net::msg::secagg_unmask>(m))
      on_secure(m);
  });
  s->on_blob_received([this](const std::shared_ptr<net::incoming_transfer>& in) { on_downloaded(in); });
  s->on_blob_sent([this](const std::shared_ptr<net::outgoing_transfer>& out) {
    if (job_ && job_->owns(out.get())) {
      job_->upload_sent();
      stats_.bytes_up += out->bytes_sent_total();
    }
  });
  s->on_closed([this, weak](const core::error& why) {
    auto self = weak.lock();
    if (self && session_ == self) {
      session_.reset();
      if (leaving_ && !stopped_) {
        log(log_level::info, "the hub closed the link: exiting (exit_after_rounds)");
        boost::asio::post(io_, [this] { stop(); });
        return;
      }
      if (run_over_ != run_end::none && config_.after_run == after_run_mode::exit && !stopped_) {
        log(log_level::info, "the hub says " + hub_words(why) + ": exiting (after_run exit; after_run wait stays for its next run)");
        boost::asio::post(io_, [this] { stop(); });
        return;
      }
      // Why, and when the next attempt is: log_link_ended, once the client has chosen the delay.
    }
  });
}

void agent::on_ready(const std::shared_ptr<net::session>& s) {
  session_ = s;
  net::msg::hello h{.device_id = id_,
                    .version = net::protocol_version,
                    .memory_budget_bytes = arena_budget_,
                    .examples = static_cast<std::uint64_t>(data_->train_examples()),
                    .codecs = config_.codecs,
                    .resume = {},
                    .data_digest = data_->digest(),
                    .validation_examples = static_cast<std::uint64_t>(data_->validation_examples()),
                    .layer_kinds = core::layer_kind_names(),
                    .features = {net::k_feature_frozen_layers, net::k_feature_compact_frozen}};
  // What we hold of the current assignment, so the hub resumes it rather than starting over.
  if (job_) h.resume.push_back({job_->download_id(), job_->download()->received()});
  s->send(h);
}

void agent::on_welcome(const std::shared_ptr<net::session>& s) {
  run_over_ = run_end::none;  // a hub up again: a new run, or the same one raised to more rounds
  log(log_level::info, "connected to the hub" + std::string(job_ ? " (resuming round " + std::to_string(job_->round()) + ")" : ""));
  if (summing_) {  // a masked sum in progress: its keys or its masked vector, which the link may have lost
    const secure_round& r = *summing_->round;
    if (r.at() == secure_round::stage::keys) s->send(r.keys_message());
    if (r.at() == secure_round::stage::masked) {
      s->send(r.masked_with());
      s->send(summing_->reply(std::vector<std::byte>(r.upload().begin(), r.upload().end())));
    }
  }
  if (!job_) return;
  // Keys the hub may not have received; later steps the hub repeats itself, and get the same answers.
  if (job_->secure() && job_->secure()->at() == secure_round::stage::keys) s->send(job_->secure()->keys_message());
  switch (job_->on_reconnect()) {
    case job::resume_action::expect_download: s->expect_blob(job_->download()); break;
    case job::resume_action::resend_upload:
      if (job_->secure()) s->send(job_->secure()->masked_with());  // the hub takes the first, ignores repeats
      s->send(job_->update());
      s->send_blob(job_->upload());
      break;
    case job::resume_action::wait: break;  // on_trained sends the update over this link
  }
}

}  // namespace tessera::edge
