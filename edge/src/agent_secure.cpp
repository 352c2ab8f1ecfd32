// The agent's secure aggregation steps (edge/secure_round.hpp) as the hub drives them: the roster, the
// inbox, the masked upload and the unmasking, each refused with its reason when it does not fit. The
// rest of the agent is in agent.cpp.
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/edge/agent.hpp"

namespace tessera::edge {

using core::log_level;

void agent::send_masked() {
  if (auto ok = job_->masked(); !ok) {
    const auto round = job_->round();
    job_.reset();
    return refuse_job(round, ok.error());
  }
  const double noise = job_->secure()->noise();
  const std::uint64_t clipped = job_->secure()->clipped();
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", job_->trained_loss());
  // The loss and the clipped count stay in this log: the hub sees the masked values only.
  log(log_level::info, "round " + std::to_string(job_->round()) + ": masked update of " + core::mib_text(job_->update().size) + " uploading" +
                           " (loss " + loss + (clipped > 0 ? ", " + std::to_string(clipped) + " values clipped" : "") + ")" +
                           (job_->secure()->drawn() ? std::string()
                                                    : "; this device did not draw itself into the round's sample, so it carries its noise alone") +
                           (noise > 0 ? "; it carries this device's share of the privacy noise (Skellam, deviation " +
                                            std::to_string(static_cast<long long>(std::sqrt(noise))) + " ring steps)"
                                      : ""));
  if (session_) {
    session_->send(job_->secure()->masked_with());
    session_->send(job_->update());
    session_->send_blob(job_->upload());
  }
}

void agent::on_secure(const net::message& m) {
  const std::uint64_t round = net::round_of(m);
  secure_round* s = job_ && job_->secure() && job_->secure()->round() == round ? job_->secure()
                    : unmasking_ && unmasking_->round() == round         ? unmasking_.get()
                    : summing_ && summing_->round->round() == round      ? summing_->round.get()
                                                                          : nullptr;
  const bool sum = summing_ && s == summing_->round.get();
  const std::string label = sum ? summing_->label : "round " + std::to_string(round);
  const std::string what = "the secure aggregation of " + label;
  if (s == nullptr) return log(log_level::warning, what + ": no such round in progress here (ignored)");
  if (const auto* r = std::get_if<net::msg::secagg_roster>(&m)) {
    auto shares = s->on_roster(*r);
    if (!shares) return refuse(what, shares.error());
    log(log_level::info, label + ": a roster of " + std::to_string(r->roster.size()) + " devices; keys of " +
                             std::to_string(shares.value().boxes.size()) + " neighbours checked and shares sent to them");
    if (session_) session_->send(shares.value());
  } else if (const auto* in = std::get_if<net::msg::secagg_inbox>(&m)) {
    if (auto ok = s->on_inbox(*in); !ok) return refuse(what, ok.error());
    if (job_ && job_->secure() == s && job_->at() == job::stage::masking) send_masked();
    if (summing_ && summing_->round.get() == s && summing_->values) send_masked_sum();
  } else if (const auto* c = std::get_if<net::msg::secagg_check>(&m)) {
    auto signature = s->on_check(*c);
    if (!signature) return refuse(what, signature.error());
    if (session_) session_->send(signature.value());
  } else if (const auto* u = std::get_if<net::msg::secagg_unmask>(&m)) {
    auto reply = s->on_unmask(*u);
    if (!reply) return refuse(what, reply.error());
    std::string released;
    for (auto seg : u->request.released) released += (released.empty() ? "" : ",") + std::to_string(seg);
    log(log_level::info, label + ": unmasking shares sent (" + std::to_string(u->request.survivors.size()) +
                             " survivors, " + std::to_string(u->request.dropped.size()) + " dropped; sums released: segments " +
                             (released.empty() ? "none" : released) + "), the survivor set signed by " +
                             std::to_string(u->request.signatures.size()) + " of them");
    if (session_) session_->send(reply.value());
    if (sum && leaving_) {  // its masked evaluation of the last round is unmasked: nothing more to do
      log(log_level::info, "exiting after the evaluation of round " + std::to_string(round) + " (exit_after_rounds)");
      boost::asio::post(io_, [this] { stop(); });
    }
  }
}

}  // namespace tessera::edge
