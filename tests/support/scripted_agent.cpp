#include "support/scripted_agent.hpp"

#include <algorithm>
#include <span>
#include <utility>

#include "tessera/core/math/memory.hpp"
#include "tessera/crypto/digest.hpp"

namespace tessera::testing {

// An answer as sent: the session holding its transfer keeps the bytes alive.
struct scripted_agent::outgoing {
  reply sent;
  std::optional<net::outgoing_transfer> transfer;
  explicit outgoing(reply r) : sent(std::move(r)) {
    if (sent.blob) transfer.emplace(sent.update.transfer, std::span<const std::byte>(*sent.blob), sent.update.sha256);
  }
};

struct scripted_agent::job : assignment {
  net::incoming_transfer download;
  stage at = stage::downloading;
  std::shared_ptr<outgoing> answer;  // the last one, announced again after a reconnect
  job(const net::msg::assign& a, const net::training_task& t)
      : assignment{a, t, std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(a.size)), 0},
        download(a.transfer, std::span<std::byte>(*subnet), a.sha256) {}
};

net::msg::update honest_update(const assignment& a, std::uint64_t size, const net::digest& sha256) {
  return {.round = a.assign.round,
          .examples = static_cast<std::uint64_t>(a.task.steps) * static_cast<std::uint64_t>(a.task.batch),
          .steps = static_cast<std::uint64_t>(a.task.steps),
          .loss = 0.5,
          .transfer = net::upload_transfer_id(a.assign.transfer),
          .size = size,
          .blob_codec = a.assign.blob_codec,
          .sha256 = sha256};
}

reply reply::echo(const assignment& a) { return {honest_update(a, a.assign.size, a.assign.sha256), a.subnet}; }

reply reply::upload(const assignment& a, std::vector<std::byte> bytes) {
  auto blob = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  return {honest_update(a, blob->size(), crypto::sha256_of(*blob)), blob};
}

reply reply::update_only(const net::msg::update& u) { return {u, nullptr}; }

scripted_agent::scripted_agent(net::asio::io_context& io, const crypto::tls_context& tls, scripted_agent_config config)
    : config_(std::move(config)) {
  client_ = net::client::create(io, tls, config_.session, config_.client);
  client_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
  client_->on_connect_failed([this](const core::error& why, std::chrono::milliseconds) {
    if (!stopped_ && hooks_.on_connect_failed) hooks_.on_connect_failed(why);
  });
}

scripted_agent::~scripted_agent() { stop(); }

void scripted_agent::start() { client_->start(); }

void scripted_agent::stop() {
  stopped_ = true;
  client_->stop();
}

void scripted_agent::hold_after(std::uint64_t round) {
  hold_after_ = round;
  auto s = session_.lock();
  if (s && job_ && job_->at == stage::held && job_->assign.round <= hold_after_) answer(*s, script());
}

void scripted_agent::drop_link(bool forget) {
  if (forget) job_.reset();
  if (auto s = session_.lock()) s->close();
}

void scripted_agent::attach(const std::shared_ptr<net::session>& s) {
  std::weak_ptr<net::session> weak = s;
  session_ = s;
  s->on_ready([this, weak] {
    if (auto self = weak.lock()) on_ready(*self);
  });
  s->on_message([this, weak](const net::message& m) {
    auto self = weak.lock();
    if (!self) return;
    if (std::holds_alternative<net::msg::welcome>(m)) {
      on_welcome(*self);
    } else if (const auto* a = std::get_if<net::msg::assign>(&m)) {
      on_assign(*self, *a);
    } else if (const auto* r = std::get_if<net::msg::result>(&m)) {
      on_result(*self, *r);
    } else if (const auto* f = std::get_if<net::msg::refuse>(&m); f != nullptr && f->code != net::msg::k_run_finished) {
      ++hub_refusals_;  // the run's end, said to every device, is not a refusal of this one
      problem("REFUSE from the hub: " + f->reason);
    }
  });
  s->on_blob_received([this, weak](const std::shared_ptr<net::incoming_transfer>& in) {
    if (auto self = weak.lock()) on_downloaded(*self, in);
  });
  s->on_closed([this](const core::error& why) {
    if (!stopped_ && hooks_.on_link_lost) hooks_.on_link_lost(why);
  });
}

void scripted_agent::on_ready(net::session& s) {
  net::msg::hello h{.device_id = config_.id,
                    .version = net::protocol_version,
                    .memory_budget_bytes = config_.budget_bytes,
                    .examples = config_.examples,
                    .codecs = config_.codecs,
                    .resume = {},
                    .data_digest = {},
                    .validation_examples = config_.validation_examples};
  // The assignment held, even fully downloaded, so the hub resumes it rather than starting over.
  if (job_) h.resume.push_back({job_->assign.transfer, job_->download.received()});
  s.send(h);
}

void scripted_agent::on_welcome(net::session& s) {
  ++welcomes_;
  if (hooks_.on_welcome) hooks_.on_welcome(welcomes_ == 1);
  if (!job_) return;
  switch (job_->at) {
    case stage::downloading: s.expect_blob(std::shared_ptr<net::incoming_transfer>(job_, &job_->download)); break;
    case stage::held:
      if (job_->assign.round <= hold_after_) answer(s, script());
      break;
    case stage::answered: resend(s); break;
  }
}

void scripted_agent::on_assign(net::session& s, const net::msg::assign& a) {
  ++assignments_;
  if (hooks_.on_assign) hooks_.on_assign(a);
  auto task = net::task_from_assign(a);
  std::string why;
  if (!task) why = task.error().message;
  else if (std::find(config_.codecs.begin(), config_.codecs.end(), a.blob_codec) == config_.codecs.end())
    why = "codec " + std::string(core::to_string(a.blob_codec)) + " was not offered";
  else if (a.size != core::encoded_bytes(task.value().arch, a.blob_codec))
    why = "declared size " + std::to_string(a.size) + " does not match the subnet";
  else if (a.size > config_.budget_bytes)
    why = "a subnet of " + std::to_string(a.size) + " bytes exceeds the budget";
  if (!why.empty()) {
    ++refused_;
    job_.reset();
    problem("refusing round " + std::to_string(a.round) + ": " + why);
    s.refuse(net::errc::refused, "assignment of round " + std::to_string(a.round) + ": " + why);
    return;
  }
  // A newer assignment supersedes whatever was in progress; the old job lives on while a session holds it.
  job_ = std::make_shared<job>(a, task.value());
  s.expect_blob(std::shared_ptr<net::incoming_transfer>(job_, &job_->download));
}

void scripted_agent::on_downloaded(net::session& s, const std::shared_ptr<net::incoming_transfer>& in) {
  if (!job_ || job_->at != stage::downloading || &job_->download != in.get()) return;
  if (job_->assign.evaluate) {  // the whole model to score: answered with EVALUATION, no upload
    const auto n = config_.validation_examples;
    const std::optional<net::msg::evaluation> e =
        hooks_.evaluate ? hooks_.evaluate(*job_)
                        : net::msg::evaluation{.round = job_->assign.round, .transfer = job_->assign.transfer, .examples = n,
                                               .loss_sum = 0.5 * static_cast<double>(n), .correct = n / 2};
    job_.reset();
    if (e) {
      ++evaluations_;
      s.send(*e);
    }
    return;
  }
  if (job_->assign.round > hold_after_) {
    job_->at = stage::held;
    return;
  }
  answer(s, script());
}

void scripted_agent::on_result(net::session& s, const net::msg::result& r) {
  if (!job_ || job_->at != stage::answered) {
    problem(std::string("RESULT with no update outstanding") + (r.accepted ? "" : ": " + r.reason));
    return;
  }
  ++job_->results;
  verdicts_.push_back({job_->assign.round, r.accepted, r.code, r.reason});
  std::optional<reply> again = hooks_.after_result ? hooks_.after_result(*job_, r) : std::nullopt;
  if (again) answer(s, *again);
  else job_.reset();
}

reply scripted_agent::script() const { return hooks_.answer ? hooks_.answer(*job_) : reply::echo(*job_); }

void scripted_agent::answer(net::session& s, const reply& r) {
  job_->answer = std::make_shared<outgoing>(r);
  job_->at = stage::answered;
  resend(s);
}

void scripted_agent::resend(net::session& s) {
  const auto& a = job_->answer;
  s.send(a->sent.update);
  if (a->transfer) s.send_blob(std::shared_ptr<net::outgoing_transfer>(a, &*a->transfer));
}

void scripted_agent::problem(std::string what) {
  problems_.push_back(std::move(what));
  if (hooks_.on_problem) hooks_.on_problem(problems_.back());
}

}  // namespace tessera::testing
