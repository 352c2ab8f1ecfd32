#include "tessera/edge/agent.hpp"

#include <cmath>
#include <cstdio>

#include <boost/asio/post.hpp>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/pki.hpp"

namespace tessera::edge {

using core::log_level;

agent::agent(boost::asio::io_context& io, const agent_config& config, core::log_sink log)
    : io_(io), config_(config), log_(std::move(log)) {}

agent::~agent() {
  cancel_job();
}

core::result<std::unique_ptr<agent>> agent::create(boost::asio::io_context& io, const agent_config& config, core::log_sink log) {
  std::unique_ptr<agent> a(new agent(io, config, std::move(log)));
  // The id is the certificate's: the hub checks HELLO against it.
  TESSERA_ASSIGN_OR_RETURN(const auto der, crypto::certificate_der(config.tls.cert));
  auto id = crypto::device_id_from_der(der);
  if (!id) return core::make_error(core::errc::invalid_spec, config.tls.cert.string() + ": " + id.error().message);
  a->id_ = id.value();
  TESSERA_ASSIGN_OR_RETURN(a->tls_, crypto::make_agent_tls(config.tls));
  const std::uint64_t seed = config.data_seed != 0 ? config.data_seed : core::id_order_seed(a->id_);
  TESSERA_ASSIGN_OR_RETURN(a->data_, device_data::open(config.data, seed));
  const std::size_t reader = a->data_->buffer_bytes();
  if (reader >= config.budget_bytes)
    return make_error(errc::data_over_budget, "the data reader's buffers need " + core::mib_text(reader) + ", the memory budget is " +
                                                  core::mib_text(config.budget_bytes) + " (lower data.shuffle_buffer or raise memory_budget_mib)");
  a->arena_budget_ = config.budget_bytes - reader;
  if (config.secure_aggregation != secure_mode::off) {
    // The key that signs this device's secure aggregation keys is its certificate's; the CA checks the others'.
    const auto text = [](const std::vector<std::byte>& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); };
    TESSERA_ASSIGN_OR_RETURN(const auto cert, core::read_file_bounded(config.tls.cert, 1u << 16));
    TESSERA_ASSIGN_OR_RETURN(const auto ca, core::read_file_bounded(config.tls.ca_cert, 1u << 16));
    TESSERA_ASSIGN_OR_RETURN(auto key, crypto::signing_key::load(config.tls.key));
    a->secure_.reset(new secure_identity{.id = a->id_, .certificate_pem = text(cert), .key = std::move(key), .ca_pem = text(ca),
                                         .crl = config.tls.crl});
  }
  if (config.privacy.max_epsilon > 0) {
    TESSERA_ASSIGN_OR_RETURN(a->budget_, privacy_budget::open(config.privacy.ledger, config.privacy.max_epsilon, config.privacy.delta));
    a->log(log_level::info, "privacy: " + std::to_string(a->budget_->rounds()) + " rounds spent ε " + std::to_string(a->budget_->epsilon()) +
                                " against the hub so far, of privacy.max_epsilon " + std::to_string(config.privacy.max_epsilon) + " (" +
                                config.privacy.ledger + ")");
  }
  return a;
}

void agent::log(log_level level, const std::string& text) const {
  if (log_) log_(level, text);
}

void agent::start() {
  client_ = net::client::create(io_, tls_, net::to_session_config(config_.link),
                                {.host = config_.hub.host, .port = config_.hub.port, .backoff_initial = config_.backoff_initial,
                                 .backoff_max = config_.backoff_max, .jitter = config_.jitter, .seed = 0});
  client_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
  client_->on_connect_failed([this](const core::error& why, std::chrono::milliseconds next) { log_link_ended(why, next); });
  log(log_level::info, "device " + id_ + ": " + std::to_string(data_->train_examples()) + " examples, offering " +
                           core::mib_text(arena_budget_) + " (" + std::to_string(arena_budget_) + " bytes) for training (budget " +
                           core::mib_text(config_.budget_bytes) + ")");
  client_->start();
}

void agent::stop() {
  if (stopped_) return;
  stopped_ = true;
  cancel_job();
  if (client_) client_->stop();
  if (session_) session_->close();
  session_.reset();
}

void agent::cancel_job() {
  if (worker_.joinable()) {
    cancel_ = true;
    worker_.join();  // stops within one training step
    cancel_ = false;
  }
  if (!job_) return;
  ++generation_;
  // The link lets go of the job's transfers, and the arena goes with the last holder: only then may the
  // next assignment reserve its own (on_job_released), so two arenas are never alive at once.
  if (session_) {
    session_->forget_blob(job_->download_id());
    session_->forget_blob(net::upload_transfer_id(job_->download_id()));
  }
  job_->when_released([this, life = std::weak_ptr<int>(lifeline_)] {
    if (life.expired()) return;
    boost::asio::post(io_, [this, life] {
      if (!life.expired()) on_job_released();
    });
  });
  retiring_ = job_;
  job_.reset();
}

void agent::on_job_released() {
  if (!retiring_.expired() || !waiting_ || stopped_) return;
  const net::msg::assign a = std::move(*waiting_);
  waiting_.reset();
  start_assignment(a);
}

void agent::refuse_job(std::uint64_t round, const core::error& why) {
  ++stats_.refused;
  refuse("the assignment of round " + std::to_string(round), why);
}

void agent::refuse(const std::string& what, const core::error& why) {
  log(log_level::warning, "refusing " + what + ": " + why.message);
  if (session_) session_->refuse(net::errc::refused, what + ": " + why.message, core::error_name(why.code));
}

void agent::on_assign(const net::msg::assign& a) {
  if (leaving_ && !a.evaluate) {
    log(log_level::info, "exiting before round " + std::to_string(a.round) + " (exit_after_rounds)");
    return stop();
  }
  cancel_job();  // a newer assignment supersedes whatever was in progress
  if (!a.evaluate) ++stats_.assignments;
  if (!retiring_.expired()) {
    if (waiting_)
      log(log_level::info, "round " + std::to_string(waiting_->round) + ": superseded by round " + std::to_string(a.round) +
                               " before its memory was reserved");
    log(log_level::info, "round " + std::to_string(a.round) + ": waiting for the superseded assignment's arena to be released");
    waiting_ = a;
    return;
  }
  start_assignment(a);
}

void agent::start_assignment(const net::msg::assign& a) {
  auto started = job::start(a, {.feature_count = data_->feature_count(),
                                .max_batch = config_.data.max_batch,
                                .codecs = config_.codecs,
                                .arena_budget = arena_budget_,
                                .check_targets = [this](core::task_kind task, std::int64_t outputs) {
                                  return data_->check_targets(task, outputs);
                                },
                                .data_name = data_->name(),
                                .requires_normalization = config_.requires_normalization,
                                .secure = secure_.get(),
                                .require_secure = config_.secure_aggregation == secure_mode::require,
                                .policy = config_.privacy,
                                .budget = budget_.get()});
  // An evaluation comes after its round closed: that round's unmasking is over.
  if (unmasking_ && (unmasking_->round() != a.round || a.evaluate)) unmasking_.reset();
  summing_.reset();
  if (!started) {
    if (a.evaluate) return refuse("the evaluation after round " + std::to_string(a.round), started.error());
    return refuse_job(a.round, started.error());
  }
  job_ = std::move(started.value());
  const core::training_task& t = job_->task();
  if (a.evaluate)
    log(log_level::info, "round " + std::to_string(a.round) + ": evaluating the model (" + std::to_string(core::param_count(t.arch)) +
                             " parameters, " + core::mib_text(a.size) + " " + std::string(core::to_string(a.blob_codec)) + ") on " +
                             std::to_string(data_->validation_examples()) + " validation examples, arena " +
                             core::mib_text(job_->arena().size_bytes()));
  else log(log_level::info, "round " + std::to_string(a.round) + ": subnet of " + std::to_string(core::param_count(t.arch)) +
                           " parameters (" + core::mib_text(a.size) + " " + std::string(core::to_string(a.blob_codec)) + "), arena " +
                           core::mib_text(job_->arena().size_bytes()) + " of " + core::mib_text(arena_budget_) + ", " + std::to_string(t.steps) +
                           " steps of " + std::to_string(t.batch) + (job_->secure() ? ", secure aggregation" : ""));
  if (session_) {
    session_->expect_blob(job_->download());
    if (job_->secure()) session_->send(job_->secure()->keys_message());
  }
  if (a.evaluate && a.secure) start_masked_evaluation(a);
}

void agent::on_downloaded(const std::shared_ptr<net::incoming_transfer>& in) {
  if (!job_ || !job_->owns(in.get()) || job_->at() != job::stage::downloading) return;
  stats_.bytes_down += in->bytes_received_total();
  // The digest matched what ASSIGN declared; the values must still be usable before training on them.
  if (auto ok = job_->downloaded(); !ok) {
    const auto round = job_->round();
    job_.reset();
    return refuse_job(round, ok.error());
  }
  const std::uint64_t generation = generation_;
  if (job_->evaluates()) {  // the whole model, scored on the validation split: no upload
    worker_ = std::thread([this, generation, keep = job_] {
      auto score = keep->evaluate(*data_);
      boost::asio::post(io_, [this, generation, score = std::move(score)]() mutable { on_evaluated(generation, std::move(score)); });
    });
    return;
  }
  // The worker owns the arena and the data until it posts its report back to the I/O thread.
  worker_ = std::thread([this, generation, keep = job_] {
    auto report = keep->train(data_->train(), &cancel_);
    net::digest sha{};
    if (report) sha = crypto::sha256_of(keep->update_blob());
    boost::asio::post(io_, [this, generation, report = std::move(report), sha]() mutable {
      on_trained(generation, std::move(report), sha);
    });
  });
}

void agent::on_trained(std::uint64_t generation, core::result<core::local_training_report> report, const net::digest& sha) {
  if (worker_.joinable()) worker_.join();
  if (generation != generation_ || !job_ || stopped_) return;  // superseded meanwhile
  if (!report && job_->secure() != nullptr && job_->secure()->noise() > 0 && report.error().code == errc::training_failed) {
    // A refusal would leave in the clear, outside this device's ledger: the hub, which chose the
    // model, would learn that training diverged on this data. It gets this device's noise alone.
    log(log_level::error, "round " + std::to_string(job_->round()) + ": training failed (" + report.error().message +
                              "); this private round gets this device's noise alone, as if it had not drawn itself in");
    job_->training_failed_privately();
    if (job_->secure()->has_inbox()) send_masked();
    return;
  }
  if (!report) {
    log(log_level::error, "round " + std::to_string(job_->round()) + ": training failed: " + report.error().message);
    const auto round = job_->round();
    job_.reset();
    return refuse_job(round, report.error());
  }
  const auto& r = report.value();
  if (job_->secure()) {
    job_->trained_secure(r);
    char line[160];
    std::snprintf(line, sizeof line, "round %llu: trained %lld steps in %.2f s, loss %.4f; masking", static_cast<unsigned long long>(job_->round()),
                  static_cast<long long>(r.steps), r.seconds, r.mean_loss);
    log(log_level::info, line);
    if (job_->secure()->has_inbox()) send_masked();
    return;
  }
  job_->trained(r, sha);
  char line[160];
  std::snprintf(line, sizeof line, "round %llu: trained %lld steps in %.2f s, loss %.4f; uploading",
                static_cast<unsigned long long>(job_->round()), static_cast<long long>(r.steps), r.seconds, r.mean_loss);
  log(log_level::info, line);
  if (session_) {  // otherwise on_welcome sends it after the reconnect
    session_->send(job_->update());
    session_->send_blob(job_->upload());
  }
}

void agent::on_evaluated(std::uint64_t generation, core::result<net::msg::evaluation> score) {
  if (worker_.joinable()) worker_.join();
  if (generation != generation_ || !job_ || stopped_) return;  // superseded meanwhile
  const auto round = job_->round();
  job_.reset();  // the arena goes back
  if (!score && summing_ && summing_->round->round() == round && summing_->request.pass == 0) {
    // A masked evaluation: a refusal in the clear would tell the hub, which chose the model, something
    // of this device's data. The score goes in at the loss bound, none correct; the reason stays here.
    log(log_level::warning, summing_->label + ": " + score.error().message + "; scored at the loss bound, none correct");
    const auto n = static_cast<std::uint64_t>(data_->validation_examples());
    score = net::msg::evaluation{.round = round, .examples = n, .loss_sum = summing_->request.bounds.at(0) * static_cast<double>(n), .correct = 0};
  }
  if (!score) {
    refuse("the evaluation after round " + std::to_string(round), score.error());
    if (leaving_) boost::asio::post(io_, [this] { stop(); });
    return;
  }
  ++stats_.evaluations;
  const auto& s = score.value();
  char line[160];
  std::snprintf(line, sizeof line, "round %llu: the model scores %.2f%% on %llu validation examples (loss %.4f)",
                static_cast<unsigned long long>(round),
                s.examples > 0 ? 100.0 * static_cast<double>(s.correct) / static_cast<double>(s.examples) : 0.0,
                static_cast<unsigned long long>(s.examples), s.examples > 0 ? s.loss_sum / static_cast<double>(s.examples) : 0.0);
  log(log_level::info, line);
  if (summing_ && summing_->round->round() == round && summing_->request.pass == 0) {  // masked: the score stays in this log, the hub gets its share of a sum
    bool clipped = false;
    auto values = core::score_vector({.examples = static_cast<std::int64_t>(s.examples), .loss_sum = s.loss_sum, .correct = static_cast<std::int64_t>(s.correct)},
                                     static_cast<std::int64_t>(summing_->request.max_examples), summing_->request.bounds.at(0), &clipped);
    if (!values) return refuse(summing_->label, make_error(errc::secure_step, values.error().message));
    if (clipped) log(log_level::warning, summing_->label + ": the loss passes the evaluation's bound per example and is clipped to it");
    summing_->values = std::move(values).value();
    if (summing_->round->has_inbox()) send_masked_sum();
    return;  // it leaves after the unmasking (exit_after_rounds)
  }
  if (session_) session_->send(s);
  if (leaving_) {
    log(log_level::info, "exiting after the evaluation of round " + std::to_string(round) + " (exit_after_rounds)");
    boost::asio::post(io_, [this] { stop(); });  // the close sends what is queued first
  }
}

void agent::on_result(const net::msg::result& r) {
  if (!job_ || job_->at() == job::stage::downloading || job_->at() == job::stage::training) {
    if (!r.accepted) log(log_level::warning, "the hub refused an earlier update: " + r.reason);
    return;
  }
  const auto round = job_->round();
  if (job_->secure()) unmasking_ = job_->release_secure();  // SECAGG_UNMASK comes after RESULT
  job_.reset();  // the arena goes back until the next assignment
  if (r.accepted) {
    ++stats_.accepted;
    log(log_level::info, "round " + std::to_string(round) + ": update accepted");
    if (config_.exit_after_rounds > 0 && stats_.accepted >= config_.exit_after_rounds) {
      if (data_->validation_examples() == 0) {
        log(log_level::info, "exiting after " + std::to_string(stats_.accepted) + " accepted updates (exit_after_rounds)");
        boost::asio::post(io_, [this] { stop(); });
      } else {
        // The hub may still ask this device to score the model of this round: stay for that, or until
        // the hub ends the link (its run is over) or assigns another round.
        leaving_ = true;
        log(log_level::info, "leaving after " + std::to_string(stats_.accepted) +
                                 " accepted updates (exit_after_rounds), once the hub's evaluation of this round or its run is over");
      }
    }
  } else {
    ++stats_.rejected;
    log(log_level::warning, "round " + std::to_string(round) + ": update rejected" + (r.code.empty() ? "" : " (" + r.code + ")") +
                                ": " + r.reason);
  }
}

}  // namespace tessera::edge
