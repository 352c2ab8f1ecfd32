#include "tessera/edge/agent.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <boost/asio/post.hpp>

#include "tessera/core/codec.hpp"
#include "tessera/core/device_round.hpp"
#include "tessera/core/json_config.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/seeds.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/pki.hpp"

namespace tessera::edge {
namespace {

using core::errc;
using core::log_level;
using core::make_error;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

core::result<agent_config> parse_agent_config(const nlohmann::json& json, const std::string& source) {
  core::config_reader r(json, source);
  agent_config c;
  const std::string hub = r.string("hub", "127.0.0.1:7443");
  const auto colon = hub.rfind(':');
  unsigned port = 0;
  const char* end = hub.data() + hub.size();
  if (colon == std::string::npos || colon == 0 || std::from_chars(hub.data() + colon + 1, end, port).ptr != end ||
      port == 0 || port > 65535) {
    r.fail("hub", "'" + hub + "' is not HOST:PORT");
  } else {
    c.hub_host = hub.substr(0, colon);
    c.hub_port = static_cast<std::uint16_t>(port);
  }
  c.tls.hub_name = r.string("hub_name", c.hub_host);
  if (const auto* t = r.object("tls")) {
    core::config_reader tr = r.child("tls", *t);
    c.tls.ca_cert = tr.string("ca", c.tls.ca_cert.string());
    c.tls.cert = tr.string("cert", c.tls.cert.string());
    c.tls.key = tr.string("key", c.tls.key.string());
    TESSERA_TRY(tr.finish());
  }
  if (const auto* d = r.object("data")) {
    core::config_reader dr = r.child("data", *d);
    data_config& data = c.data;
    data.format = dr.choice("format", "idx", {"idx", "npy", "csv"});
    data.features = dr.string("features", "");
    data.labels = dr.string("labels", "");
    const std::string norm = dr.choice("normalization", data.format == "csv" ? "none" : "scale_unit", {"none", "scale_unit"});
    data.norm = norm == "none" ? core::normalization::none : core::normalization::scale_unit;
    data.label_column = static_cast<std::size_t>(dr.integer("label_column", 0, 0, 1 << 20));
    data.header = dr.boolean("header", false);
    data.shuffle_buffer = dr.integer("shuffle_buffer", 1024, 1, 1 << 24);
    data.max_batch = dr.integer("max_batch", 256, 1, net::max_task_batch);
    c.data_seed = dr.seed("seed", 0);
    if (data.features.empty()) dr.fail("features", "required: the file of this device's examples");
    if (data.format != "csv" && data.labels.empty()) dr.fail("labels", "required for " + data.format);
    TESSERA_TRY(dr.finish());
  } else {
    r.fail("data", "required: this device's examples ({\"format\", \"features\", \"labels\"})");
  }
  c.budget_bytes = static_cast<std::size_t>(r.number("memory_budget_mib", 16, 0.25, 1 << 20) * 1024 * 1024);
  c.codecs.clear();
  for (const auto& name : r.choices("codecs", {"f32", "f16", "q8"}, {"f32", "f16", "q8"})) {
    const auto k = core::parse_codec(name);
    if (k && std::find(c.codecs.begin(), c.codecs.end(), k.value()) == c.codecs.end()) c.codecs.push_back(k.value());
  }
  if (std::find(c.codecs.begin(), c.codecs.end(), core::codec_kind::f32) == c.codecs.end()) c.codecs.push_back(core::codec_kind::f32);
  if (const auto* rc = r.object("reconnect")) {
    core::config_reader rr = r.child("reconnect", *rc);
    c.backoff_initial = std::chrono::milliseconds(rr.integer("initial_ms", 250, 1, 3'600'000));
    c.backoff_max = std::chrono::milliseconds(rr.integer("max_ms", 30'000, 1, 86'400'000));
    c.jitter = rr.number("jitter", 0.5, 0.0, 1.0);
    if (c.backoff_max < c.backoff_initial) rr.fail("max_ms", "is below initial_ms");
    TESSERA_TRY(rr.finish());
  }
  if (const auto* rl = r.object("rate_limit")) {
    core::config_reader lr = r.child("rate_limit", *rl);
    c.upload_bytes_per_s = static_cast<std::uint64_t>(lr.integer("upload_bytes_per_s", 0, 0, INT64_MAX));
    c.download_bytes_per_s = static_cast<std::uint64_t>(lr.integer("download_bytes_per_s", 0, 0, INT64_MAX));
    // A cap below a few hundred bytes per second could not even carry the heartbeats.
    if (c.upload_bytes_per_s != 0 && c.upload_bytes_per_s < 512) lr.fail("upload_bytes_per_s", "below 512 (0 means no cap)");
    if (c.download_bytes_per_s != 0 && c.download_bytes_per_s < 512) lr.fail("download_bytes_per_s", "below 512 (0 means no cap)");
    TESSERA_TRY(lr.finish());
  }
  c.chunk_kib = static_cast<std::uint32_t>(r.integer("chunk_kib", 256, 1, 1000));
  c.window_kib = static_cast<std::uint32_t>(r.integer("window_kib", 2048, 1, 1 << 20));
  if (c.window_kib < c.chunk_kib) r.fail("window_kib", "is below chunk_kib");
  c.heartbeat_s = r.number("heartbeat_s", 10, 0.05, 3600);
  c.idle_timeout_s = r.number("idle_timeout_s", 60, 0.2, 86400);
  if (c.idle_timeout_s <= c.heartbeat_s) r.fail("idle_timeout_s", "must exceed heartbeat_s");
  c.exit_after_rounds = r.integer("exit_after_rounds", 0, 0, INT64_MAX);
  TESSERA_TRY(r.finish());
  return c;
}

core::result<agent_config> load_agent_config(const std::string& path, const std::vector<std::string>& overrides) {
  auto json = core::load_config(path, overrides);
  TESSERA_TRY(json);
  return parse_agent_config(json.value(), path.empty() ? "command line" : path);
}

// One assignment, from ASSIGN to RESULT. Shared: a session holding one of its transfers (handed out
// as aliasing pointers) keeps the job, and so the arena its bytes live in, alive until it lets go.
struct agent::job : std::enable_shared_from_this<job> {
  enum class stage { downloading, training, uploading, waiting_result };
  std::uint64_t round = 0;
  std::uint64_t download_id = 0;
  core::training_task task;
  core::codec_kind codec = core::codec_kind::f32;
  std::unique_ptr<training_arena> arena;
  std::optional<net::incoming_transfer> download_state;
  std::optional<net::outgoing_transfer> upload_state;
  net::msg::update update{};
  stage at = stage::downloading;
  std::span<std::byte> blob;  // where the blob lives in the arena: params (f32) or staging

  std::shared_ptr<net::incoming_transfer> download() { return {shared_from_this(), &*download_state}; }
  std::shared_ptr<net::outgoing_transfer> upload() { return {shared_from_this(), &*upload_state}; }
};

agent::agent(boost::asio::io_context& io, const agent_config& config, core::log_sink log)
    : io_(io), config_(config), log_(std::move(log)) {}

agent::~agent() {
  cancel_job();
}

core::result<std::unique_ptr<agent>> agent::create(boost::asio::io_context& io, const agent_config& config, core::log_sink log) {
  std::unique_ptr<agent> a(new agent(io, config, std::move(log)));
  // The id is the certificate's: the hub checks HELLO against it.
  auto der = crypto::certificate_der(config.tls.cert);
  TESSERA_TRY(der);
  auto id = crypto::device_id_from_der(der.value());
  if (!id) return make_error(errc::invalid_spec, config.tls.cert.string() + ": " + id.error().message);
  a->id_ = id.value();
  auto tls = crypto::make_agent_tls(config.tls);
  TESSERA_TRY(tls);
  a->tls_ = tls.value();
  const std::uint64_t seed = config.data_seed != 0 ? config.data_seed : core::id_order_seed(a->id_);
  auto data = device_data::open(config.data, seed);
  TESSERA_TRY(data);
  a->data_ = std::move(data.value());
  const std::size_t reader = a->data_->buffer_bytes();
  if (reader >= config.budget_bytes)
    return make_error(errc::over_budget, "the data reader's buffers need " + mib(reader) + ", the memory budget is " +
                                             mib(config.budget_bytes) + " (lower data.shuffle_buffer or raise memory_budget_mib)");
  a->arena_budget_ = config.budget_bytes - reader;
  return a;
}

void agent::log(core::log_level level, const std::string& text) const {
  if (log_) log_(level, text);
}

void agent::start() {
  net::session_config sc;
  sc.heartbeat_interval = ms(config_.heartbeat_s);
  sc.idle_timeout = ms(config_.idle_timeout_s);
  sc.write_timeout = ms(config_.idle_timeout_s);
  sc.chunk_bytes = config_.chunk_kib << 10;
  sc.transfer_window_bytes = std::uint64_t{config_.window_kib} << 10;
  sc.send_rate = config_.upload_bytes_per_s;
  sc.receive_rate = config_.download_bytes_per_s;
  client_ = net::client::create(io_, tls_, sc,
                                {.host = config_.hub_host, .port = config_.hub_port, .backoff_initial = config_.backoff_initial,
                                 .backoff_max = config_.backoff_max, .jitter = config_.jitter, .seed = 0});
  client_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
  client_->on_connect_failed([this](const core::error& why, std::chrono::milliseconds next) {
    log(log_level::warning, "cannot reach the hub at " + config_.hub_host + ":" + std::to_string(config_.hub_port) + ": " +
                                why.message + "; next attempt in " + std::to_string(next.count()) + " ms");
  });
  log(log_level::info, "device " + id_ + ": " + std::to_string(data_->train_examples()) + " examples, offering " +
                           mib(arena_budget_) + " for training (budget " + mib(config_.budget_bytes) + ")");
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
  if (job_) ++generation_;
  job_.reset();
}

void agent::attach(const std::shared_ptr<net::session>& s) {
  std::weak_ptr<net::session> weak = s;
  s->on_ready([this, weak] {
    if (auto self = weak.lock()) on_ready(self);
  });
  s->on_message([this, weak](const net::message& m) {
    auto self = weak.lock();
    if (!self || stopped_) return;
    if (std::holds_alternative<net::msg::welcome>(m)) on_welcome(self);
    else if (const auto* a = std::get_if<net::msg::assign>(&m)) on_assign(self, *a);
    else if (const auto* r = std::get_if<net::msg::result>(&m)) on_result(*r);
    else if (const auto* f = std::get_if<net::msg::refuse>(&m)) log(log_level::warning, "the hub closed the link: " + f->reason);
  });
  s->on_blob_received([this](const std::shared_ptr<net::incoming_transfer>& in) { on_downloaded(in); });
  s->on_blob_sent([this](const std::shared_ptr<net::outgoing_transfer>& out) {
    if (job_ && job_->upload_state && &*job_->upload_state == out.get()) {
      job_->at = job::stage::waiting_result;
      stats_.bytes_up += out->bytes_sent_total();
    }
  });
  s->on_closed([this, weak](const core::error& why) {
    auto self = weak.lock();
    if (self && session_ == self) {
      session_.reset();
      if (!stopped_) log(log_level::warning, "link to the hub lost: " + why.message + " (reconnecting)");
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
                    .resume = {}};
  // What we hold of the current assignment, so the hub resumes it rather than starting over.
  if (job_) h.resume.push_back({job_->download_id, job_->download_state->received()});
  s->send(h);
}

void agent::on_welcome(const std::shared_ptr<net::session>& s) {
  log(log_level::info, "connected to the hub" + std::string(job_ ? " (resuming round " + std::to_string(job_->round) + ")" : ""));
  if (!job_) return;
  if (job_->at == job::stage::downloading) {
    s->expect_blob(job_->download());
  } else if (job_->at == job::stage::uploading || job_->at == job::stage::waiting_result) {
    s->send(job_->update);
    s->send_blob(job_->upload());
  }
}

void agent::on_assign(const std::shared_ptr<net::session>& s, const net::msg::assign& a) {
  cancel_job();  // a newer assignment supersedes whatever was in progress
  ++stats_.assignments;
  auto refuse = [&](const std::string& reason) {
    ++stats_.refused;
    log(log_level::warning, "refusing the assignment of round " + std::to_string(a.round) + ": " + reason);
    s->refuse(net::errc::refused, "assignment of round " + std::to_string(a.round) + ": " + reason);
  };
  auto task = net::task_from_assign(a);
  if (!task) return refuse(task.error().message);
  const core::training_task& t = task.value();
  if (t.arch.inputs() != data_->feature_count())
    return refuse("the subnet takes " + std::to_string(t.arch.inputs()) + " inputs, this device's data has " +
                  std::to_string(data_->feature_count()) + " features");
  if (t.batch > config_.data.max_batch)
    return refuse("batch " + std::to_string(t.batch) + " exceeds this device's data.max_batch " + std::to_string(config_.data.max_batch));
  if (std::find(config_.codecs.begin(), config_.codecs.end(), a.blob_codec) == config_.codecs.end())
    return refuse("codec " + std::string(core::to_string(a.blob_codec)) + " is not enabled on this device");
  const core::codec_kind codec = a.blob_codec;
  if (a.size != core::encoded_bytes(t.arch, codec))
    return refuse("declared size " + std::to_string(a.size) + " bytes, the subnet in " + std::string(core::to_string(a.blob_codec)) +
                  " is " + std::to_string(core::encoded_bytes(t.arch, codec)) + " bytes");
  auto arena = training_arena::reserve(t.arch, t.batch, t.sgd.momentum != 0.0f, codec, arena_budget_);
  if (!arena) return refuse(arena.error().message);

  auto j = std::make_shared<job>();
  j->round = a.round;
  j->download_id = a.transfer;
  j->task = t;
  j->codec = codec;
  j->arena = std::move(arena.value());
  j->blob = core::blob_region(j->arena->block(), codec, static_cast<std::size_t>(a.size));
  j->download_state.emplace(a.transfer, j->blob, a.sha256);
  job_ = std::move(j);
  log(log_level::info, "round " + std::to_string(a.round) + ": subnet of " + std::to_string(core::param_count(t.arch)) +
                           " parameters (" + mib(a.size) + " " + std::string(core::to_string(a.blob_codec)) + "), arena " +
                           mib(job_->arena->size_bytes()) + " of " + mib(arena_budget_) + ", " + std::to_string(t.steps) +
                           " steps of " + std::to_string(t.batch));
  s->expect_blob(job_->download());
}

void agent::on_downloaded(const std::shared_ptr<net::incoming_transfer>& in) {
  if (!job_ || &*job_->download_state != in.get() || job_->at != job::stage::downloading) return;
  stats_.bytes_down += in->bytes_received_total();
  job& j = *job_;
  // The digest matched what ASSIGN declared; the values must still be finite before training on them.
  if (auto ok = core::take_download(j.arena->block(), j.task.arch, j.codec, j.blob); !ok) {
    const auto round = j.round;
    job_.reset();
    ++stats_.refused;
    if (session_) session_->refuse(net::errc::refused, "assignment of round " + std::to_string(round) + ": " + ok.error().message);
    return;
  }
  j.at = job::stage::training;
  const std::uint64_t generation = generation_;
  // The worker owns the arena and the data until it posts its report back to the I/O thread.
  worker_ = std::thread([this, generation, keep = job_] {
    job& w = *keep;
    auto report = core::train_for_upload(w.arena->block(), w.task, w.codec, w.blob, data_->train(), &cancel_);
    net::digest sha{};
    if (report) sha = crypto::sha256_of(w.blob);
    boost::asio::post(io_, [this, generation, report = std::move(report), sha]() mutable {
      if (generation == generation_ && job_) job_->update.sha256 = sha;
      on_trained(generation, std::move(report));
    });
  });
}

void agent::on_trained(std::uint64_t generation, core::result<core::local_training_report> report) {
  if (worker_.joinable()) worker_.join();
  if (generation != generation_ || !job_ || stopped_) return;  // superseded meanwhile
  job& j = *job_;
  if (!report) {
    log(log_level::error, "round " + std::to_string(j.round) + ": training failed: " + report.error().message);
    const auto round = j.round;
    job_.reset();
    ++stats_.refused;
    if (session_) session_->refuse(net::errc::refused, "assignment of round " + std::to_string(round) + ": " + report.error().message);
    return;
  }
  const auto& r = report.value();
  j.update.round = j.round;
  j.update.examples = static_cast<std::uint64_t>(r.examples);
  j.update.steps = static_cast<std::uint64_t>(r.steps);
  j.update.loss = r.mean_loss;
  j.update.transfer = net::upload_transfer_id(j.download_id);
  j.update.size = j.blob.size();
  j.update.blob_codec = j.codec;
  j.upload_state.emplace(j.update.transfer, std::span<const std::byte>(j.blob), j.update.sha256);
  j.at = job::stage::uploading;
  char line[160];
  std::snprintf(line, sizeof line, "round %llu: trained %lld steps in %.2f s, loss %.4f; uploading",
                static_cast<unsigned long long>(j.round), static_cast<long long>(r.steps), r.seconds, r.mean_loss);
  log(log_level::info, line);
  if (session_) {  // otherwise on_welcome sends it after the reconnect
    session_->send(j.update);
    session_->send_blob(j.upload());
  }
}

void agent::on_result(const net::msg::result& r) {
  if (!job_ || job_->at == job::stage::downloading || job_->at == job::stage::training) {
    if (!r.accepted) log(log_level::warning, "the hub refused an earlier update: " + r.reason);
    return;
  }
  const auto round = job_->round;
  job_.reset();  // the arena goes back until the next assignment
  if (r.accepted) {
    ++stats_.accepted;
    log(log_level::info, "round " + std::to_string(round) + ": update accepted");
    if (config_.exit_after_rounds > 0 && stats_.accepted >= config_.exit_after_rounds) {
      log(log_level::info, "exiting after " + std::to_string(stats_.accepted) + " accepted updates (exit_after_rounds)");
      boost::asio::post(io_, [this] { stop(); });
    }
  } else {
    ++stats_.rejected;
    log(log_level::warning, "round " + std::to_string(round) + ": update rejected" + (r.code.empty() ? "" : " (" + r.code + ")") +
                                ": " + r.reason);
  }
}

}  // namespace tessera::edge
