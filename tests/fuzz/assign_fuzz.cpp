// libFuzzer target for what an agent does when an ASSIGN arrives, without a socket: the frames a hub
// sends (the ASSIGN, then the blob's CHUNKs) go through the session's own I/O-free parts (frame_reader,
// transfer_table) as session.cpp drives them, and each event reaches the code agent.cpp runs for it:
//
//   ASSIGN   parse_message → edge::job::start (check_assignment against the device's data, codecs,
//            budget; the arena reserved; secure aggregation's keys) → expect the download
//   CHUNKs   transfer_table routes them into the arena, the digest is checked on the last byte
//   blob     job::downloaded (decode, finiteness) → job::evaluate on the validation split, or
//            job::train on the device's data → the UPDATE (job::trained), or the masking stage
//
// Input: [device profile][chunk size][re-sends][ASSIGN JSON payload] 0x00 [blob bytes]
//   profile bits 0-1  codecs enabled: f32+f16+q8, f32, q8, f16+q8
//            bit  2   the data wants standardized inputs (data.normalization standardize)
//            bits 3-4 secure aggregation: off, on, require, on
//            bits 5-6 memory budget: 1, 2, 3 or 4 MiB (the data reader's buffers come out of it)
//            bit  7   no validation split
//   chunk size: 0 is 64 KiB, n is 7·n bytes, at least a 64th of the blob; re-sends: chunk i is sent
//   again (its second half) when bit i mod 8 is set, as after a broken link.
// JSON cannot hold a raw 0x00, so the first one ends the payload; without one the blob is empty.
//
// The one liberty taken: an ASSIGN's `steps` above max_steps is lowered to it, so an execution stays
// within milliseconds (the step loop is the same for any count). A run whose blob does not complete or
// match the declared SHA-256 is followed by one with the blob cut or padded to the declared size and
// the ASSIGN's digest set to it, so that decoding and training are reached too.
//
// Oracles, besides "no crash, no undefined behaviour, no leak, no allocation beyond the limits run-fuzz
// sets": every refusal carries a typed error code (edge, core, net or crypto) with a message, and a
// wire name REFUSE can carry; an accepted assignment's arena is exactly the memory formula's, and with
// what it holds beside the arena within the budget; an accepted secure part has a ring for the rosters
// it allows (crypto::fixed_point for the fewest summands, never fewer than the threshold); a job reaches
// the stages in order; an evaluation either fails typed or scores a finite loss; the UPDATE or
// EVALUATION it produces is a message the hub parses back to the same bytes, and describes the upload
// exactly (size, codec, SHA-256, transfer id). Inputs that once broke one of these are kept in
// tests/fuzz/regressions/ (README.md there) and replayed by run-fuzz on every run.
//
// Built and run by tests/fuzz/run-fuzz (clang++ -fsanitize=fuzzer,address,undefined).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/job.hpp"
#include "tessera/net/frame.hpp"
#include "tessera/net/frame_reader.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/task.hpp"
#include "tessera/net/transfer_table.hpp"

namespace core = tessera::core;
namespace crypto = tessera::crypto;
namespace edge = tessera::edge;
namespace net = tessera::net;

namespace {

constexpr std::int64_t max_steps = 3;
constexpr std::int64_t data_features = 4;
constexpr std::int64_t data_examples = 48;
constexpr std::int64_t data_max_batch = 16;
constexpr std::size_t max_chunks = 64;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// What the device holds from its start: its data's files and its identity for secure aggregation,
// made once in a directory of their own (removed at exit).
struct device_files {
  std::filesystem::path dir;
  core::data_source source;
  std::optional<edge::secure_identity> identity;

  device_files() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-assign-fuzz-XXXXXX").string();
    check(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    // 48 examples of 4 features, labels 0..2: fit for classification into 3 or more classes and for
    // regression with one output.
    std::vector<float> x(static_cast<std::size_t>(data_examples * data_features));
    std::vector<std::int32_t> y(static_cast<std::size_t>(data_examples));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>((i * 37) % 23) - 11) / 11.0f;
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 3);
    source = {.format = core::data_format::npy, .features = (dir / "x.npy").string(), .labels = (dir / "y.npy").string(),
              .norm = core::normalization::none};
    check(core::write_npy_features(source.features, data_features, x).ok());
    check(core::write_npy_labels(source.labels, y).ok());

    const auto ca = crypto::ca_files::in(dir / "ca");
    std::filesystem::create_directories(dir / "ca");
    check(crypto::init_ca(ca, {}, false).ok());
    const crypto::cert_files me{dir / "fuzz-07.pem", dir / "fuzz-07.key"};
    check(crypto::issue(ca, {.device_id = "fuzz-07"}, me, false).ok());
    auto key = crypto::signing_key::load(me.key);
    check(key.ok());
    identity.emplace(edge::secure_identity{.id = "fuzz-07", .certificate_pem = text_of(me.cert),
                                           .key = std::move(key).value(), .ca_pem = text_of(ca.cert), .crl = {}});
  }
  ~device_files() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  device_files(const device_files&) = delete;
  device_files& operator=(const device_files&) = delete;

  static std::string text_of(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
};

device_files& files() {
  static device_files f;
  return f;
}

struct profile {
  std::vector<core::codec_kind> codecs;
  bool requires_normalization = false;
  bool secure = false;
  bool require_secure = false;
  std::size_t budget_bytes = 0;
  double validation_fraction = 0.25;
};

profile profile_of(std::uint8_t b) {
  using core::codec_kind;
  static const std::vector<codec_kind> codec_sets[] = {
      {codec_kind::f32, codec_kind::f16, codec_kind::q8}, {codec_kind::f32}, {codec_kind::q8}, {codec_kind::f16, codec_kind::q8}};
  const unsigned secure = (b >> 3) & 3;
  return {.codecs = codec_sets[b & 3],
          .requires_normalization = (b & 4) != 0,
          .secure = secure != 0,
          .require_secure = secure == 2,
          .budget_bytes = (std::size_t{1} + ((b >> 5) & 3)) << 20,
          .validation_fraction = (b & 0x80) != 0 ? 0.0 : 0.25};
}

// How the blob is cut into CHUNKs: sizes and which are sent again.
struct chunking {
  std::size_t size = 0;
  std::uint8_t resend = 0;
};

void check_typed(const core::error& e) {
  const std::string category = e.code.category().name();
  check(e.code.value() != 0 && !e.message.empty());
  check(category == "tessera.edge" || category == "tessera.core" || category == "tessera.net" || category == "tessera.crypto");
}

// What the agent does with a refused assignment: REFUSE, whose code names the error ("edge.size_mismatch").
void check_refusal(const core::error& e) {
  check_typed(e);
  const std::string code = core::error_name(e.code);
  check(!code.empty() && code.size() <= net::max_code_chars && code.find('.') != std::string::npos);
}

// A message this device sends must be one the hub parses, to the same bytes.
void check_sendable(const net::message& m) {
  const auto frame = net::encode_message(m);
  auto f = net::decode_frame(frame, net::default_max_payload);
  check(f.ok() && f.value().header.type == net::type_of(m));
  auto back = net::parse_message(f.value().header.type, f.value().payload);
  check(back.ok());
  check(net::encode_message(back.value()) == frame);
}

// The ASSIGN with `steps` lowered to max_steps (left alone when it is not a number in range: the task's
// own checks refuse it).
void lower_steps(net::msg::assign& a) {
  auto hyper = nlohmann::json::parse(a.hyper_json, nullptr, false);
  if (!hyper.is_object()) return;
  auto steps = hyper.find("steps");
  if (steps == hyper.end() || !steps->is_number_integer() || steps->get<std::int64_t>() <= max_steps) return;
  *steps = max_steps;
  a.hyper_json = hyper.dump();
}

// One connection's worth of the agent: the frames a hub sent, and what the agent does with each.
class agent_run {
 public:
  agent_run(const profile& p, std::unique_ptr<edge::device_data> data)
      : data_(std::move(data)), transfers_(64u << 10, 1u << 20) {
    const std::size_t reader = data_->buffer_bytes();
    check(reader < p.budget_bytes);
    arena_budget_ = p.budget_bytes - reader;
    secure_ = p.secure ? &*files().identity : nullptr;
    limits_ = {.feature_count = data_->feature_count(),
               .max_batch = data_max_batch,
               .codecs = p.codecs,
               .arena_budget = arena_budget_,
               .check_targets = [d = data_.get()](core::task_kind task, std::int64_t outputs) { return d->check_targets(task, outputs); },
               .data_name = data_->name(),
               .requires_normalization = p.requires_normalization,
               .secure = secure_,
               .require_secure = p.require_secure};
  }

  // Feeds the stream as one read; stops where the session would close the link.
  void receive(std::span<const std::byte> stream) {
    net::frame_reader reader(net::default_max_payload);
    std::size_t at = 0;
    while (at < stream.size() && !stopped_) {
      const std::span<std::byte> into = reader.buffer();
      const std::size_t n = std::min(into.size(), stream.size() - at);
      std::memcpy(into.data(), stream.data() + at, n);
      at += n;
      switch (reader.commit(n)) {
        case net::frame_event::need_more: break;
        case net::frame_event::control: on_control(reader); break;
        case net::frame_event::chunk_begin: on_chunk_begin(reader); break;
        case net::frame_event::chunk_end: on_chunk_end(); break;
        case net::frame_event::failed: return close(reader.error());
      }
    }
    transfers_.detach_all();
  }

  [[nodiscard]] const std::shared_ptr<edge::job>& job() const noexcept { return job_; }
  [[nodiscard]] bool downloaded() const noexcept { return downloaded_; }
  [[nodiscard]] bool digest_mismatch() const noexcept { return digest_mismatch_; }

 private:
  void close(const core::error& why) {
    check_typed(why);
    stopped_ = true;
  }
  void refuse(const core::error& why) {
    check_refusal(why);
    job_.reset();
    stopped_ = true;
  }

  void on_control(const net::frame_reader& reader) {
    auto m = net::parse_message(reader.header().type, reader.payload());
    if (!m) return close(m.error());
    if (auto* a = std::get_if<net::msg::assign>(&m.value())) on_assign(*a);
  }

  void on_assign(net::msg::assign a) {
    job_.reset();  // a newer assignment supersedes the previous one
    lower_steps(a);
    auto started = edge::job::start(a, limits_);
    if (!started) return refuse(started.error());
    job_ = std::move(started).value();
    check_reservation(a);
    check(transfers_.attach(job_->download()).offset == 0);
  }

  // The arena and its products' stack are the memory formula's, and with what lives beside them,
  // within the budget.
  void check_reservation(const net::msg::assign& a) const {
    const core::training_task& t = job_->task();
    check(job_->at() == edge::job::stage::downloading && job_->round() == a.round && job_->download_id() == a.transfer);
    check(job_->codec() == a.blob_codec && job_->evaluates() == a.evaluate);
    const std::size_t arena = a.evaluate ? core::inference_bytes(t.arch, t.batch, a.blob_codec)
                                         : core::bytes_needed(t.arch, t.batch, t.sgd.momentum != 0.0f, a.blob_codec);
    check(job_->arena().layout().needed() == arena);
    check(job_->arena().size_bytes() + job_->arena().layout().stack_bytes == arena);
    const bool secure = a.secure.has_value() && !a.evaluate;
    const std::size_t beside =
        core::beside_arena(t.arch, secure ? a.secure->segments.size() : 0, t.clip_norm > 0 && !a.evaluate);
    check(arena <= arena_budget_ && beside <= arena_budget_ - arena);
    check((job_->secure() != nullptr) == secure);
    if (secure) {
      // Masking, after the training, makes the ring for the roster: the ASSIGN was refused up front
      // unless every roster it allows (threshold ≤ size ≤ summands, when set) has one.
      const crypto::secagg_params& p = a.secure->params;
      check(p.summands == 0 || p.summands >= p.threshold);
      check(crypto::fixed_point::create(p.clip, p.bits, crypto::secagg_summands(p, p.threshold)).ok());
    }
    check(job_->blob().size() == a.size && job_->download()->size() == a.size);
    check(core::encoded_bytes(t.arch, a.blob_codec) == a.size);
  }

  void on_chunk_begin(net::frame_reader& reader) {
    auto route = transfers_.route_chunk(reader.chunk(), reader.chunk_data_bytes());
    if (!route) return close(route.error());
    chunk_ = std::move(route).value();
    if (chunk_.transfer) reader.accept_chunk(chunk_.skip, chunk_.dest);
    else reader.discard_chunk();
  }

  void on_chunk_end() {
    const auto route = std::exchange(chunk_, {});
    if (!route.transfer) return;
    auto done = transfers_.chunk_done(route);
    if (!done) {
      digest_mismatch_ = done.error().code == net::errc::digest_mismatch;
      return close(done.error());
    }
    check(done.value().ack.offset <= route.transfer->size());
    check_sendable(done.value().ack);
    if (done.value().completed) on_downloaded(route.transfer);
  }

  void on_downloaded(const std::shared_ptr<net::incoming_transfer>& in) {
    if (!job_ || !job_->owns(in.get()) || job_->at() != edge::job::stage::downloading) return;
    check(in->complete() && crypto::sha256_of(in->data()) == crypto::sha256_of(job_->blob()));
    downloaded_ = true;
    if (auto ok = job_->downloaded(); !ok) {
      check(ok.error().code == edge::errc::bad_download);
      check(job_->at() == edge::job::stage::downloading);
      return refuse(ok.error());
    }
    check(job_->at() == edge::job::stage::training);
    if (job_->evaluates()) {
      auto score = job_->evaluate(*data_);
      if (!score) {
        check(score.error().code == edge::errc::training_failed);
        return refuse(score.error());
      }
      const net::msg::evaluation& s = score.value();
      check(s.round == job_->round() && s.transfer == job_->download_id());
      check(s.examples == static_cast<std::uint64_t>(data_->validation_examples()));
      // A loss that is not finite (a model whose outputs overflow) is the job's typed refusal above,
      // never an EVALUATION: the hub could not read it back.
      check(std::isfinite(s.loss_sum) && s.loss_sum >= 0 && s.correct <= s.examples);
      check_sendable(s);
      job_.reset();
      return;
    }
    const std::atomic<bool> cancel{false};
    auto report = job_->train(data_->train(), &cancel);
    if (!report) {
      check(report.error().code == edge::errc::training_failed);
      return refuse(report.error());
    }
    const core::local_training_report& r = report.value();
    check(r.steps == job_->task().steps && r.examples == r.steps * job_->task().batch);
    if (job_->secure() != nullptr) {
      // The masked upload needs the other devices' shares: the job waits for them.
      job_->trained_secure(r);
      check(job_->at() == edge::job::stage::masking);
      return;
    }
    // The update: the trained layers' part of the blob (all of it without frozen layers), as the agent sends it.
    const net::digest sha = crypto::sha256_of(job_->update_blob());
    job_->trained(r, sha);
    check(job_->at() == edge::job::stage::uploading);
    const net::msg::update& u = job_->update();
    check(u.round == job_->round() && u.transfer == net::upload_transfer_id(job_->download_id()));
    check(u.size == core::update_bytes(job_->task().arch, job_->codec()) && u.size == job_->update_blob().size());
    check(u.size <= job_->blob().size() && u.blob_codec == job_->codec() && u.sha256 == sha);
    check(u.steps == static_cast<std::uint64_t>(r.steps) && u.examples == static_cast<std::uint64_t>(r.examples));
    check_sendable(u);
    const auto out = job_->upload();
    check(job_->owns(out.get()) && out->size() == u.size && out->sha256() == sha && out->id() == u.transfer);
    job_->upload_sent();
    check(job_->at() == edge::job::stage::waiting_result);
  }

  std::unique_ptr<edge::device_data> data_;
  net::transfer_table transfers_;
  std::size_t arena_budget_ = 0;
  const edge::secure_identity* secure_ = nullptr;
  edge::device_limits limits_;
  std::shared_ptr<edge::job> job_;
  net::transfer_table::chunk_route chunk_{};
  bool stopped_ = false;
  bool downloaded_ = false;
  bool digest_mismatch_ = false;
};

void append(std::vector<std::byte>& out, std::span<const std::byte> bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); }

// The CHUNK frames of `blob` for `transfer`, cut and re-sent as `c` says.
void append_chunks(std::vector<std::byte>& out, std::uint64_t transfer, std::span<const std::byte> blob, const chunking& c) {
  const std::size_t size = std::max({c.size, (blob.size() + max_chunks - 1) / max_chunks, std::size_t{1}});
  auto chunk = [&](std::size_t offset, std::size_t n) {
    std::array<std::byte, net::header_bytes> h;
    net::encode_header({net::frame_type::chunk, 0, static_cast<std::uint32_t>(net::chunk_header_bytes + n)}, h);
    std::array<std::byte, net::chunk_header_bytes> ch;
    net::encode_chunk_header({transfer, offset}, ch);
    append(out, h);
    append(out, ch);
    append(out, blob.subspan(offset, n));
  };
  std::size_t i = 0;
  for (std::size_t offset = 0; offset < blob.size(); offset += size, ++i) {
    const std::size_t n = std::min(size, blob.size() - offset);
    chunk(offset, n);
    if ((c.resend >> (i % 8)) & 1) chunk(offset + n / 2, n - n / 2);
  }
}

std::unique_ptr<edge::device_data> open_data(const profile& p) {
  // Opened afresh for every run, as a restarted agent would: its batch order starts over, so an input
  // means the same whenever it runs.
  auto data = edge::device_data::open({.source = files().source, .validation_fraction = p.validation_fraction, .max_batch = data_max_batch},
                                      /*seed=*/7);
  check(data.ok());
  return std::move(data).value();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)files();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const profile p = profile_of(data[0]);
  const chunking c{.size = data[1] == 0 ? std::size_t{64} << 10 : std::size_t{7} * data[1], .resend = data[2]};
  const auto* body = reinterpret_cast<const std::byte*>(data) + 3;
  const std::span<const std::byte> rest(body, size - 3);
  const auto nul = std::find(rest.begin(), rest.end(), std::byte{0});
  const std::span<const std::byte> payload(rest.begin(), nul);
  const std::span<const std::byte> blob = nul == rest.end() ? std::span<const std::byte>{} : std::span(nul + 1, rest.end());

  // As the hub sent it.
  std::optional<net::msg::assign> assign;
  {
    std::vector<std::byte> stream = net::encode_frame(net::frame_type::assign, payload);
    auto m = net::parse_message(net::frame_type::assign, payload);
    if (m) assign = std::get<net::msg::assign>(m.value());
    append_chunks(stream, assign ? assign->transfer : 0, blob, c);
    agent_run run(p, open_data(p));
    run.receive(stream);
    if (!assign || !run.job() || run.downloaded()) return 0;
    check(run.digest_mismatch() || blob.size() != assign->size || crypto::sha256_of(blob) != assign->sha256);
  }

  // Accepted, but the blob did not arrive whole and intact: again with the blob cut or padded to the
  // declared size and the digest set to it.
  std::vector<std::byte> fixed(static_cast<std::size_t>(assign->size));
  for (std::size_t i = 0; i < fixed.size() && !blob.empty(); ++i) fixed[i] = blob[i % blob.size()];
  assign->sha256 = crypto::sha256_of(fixed);
  std::vector<std::byte> stream = net::encode_message(*assign);
  append_chunks(stream, assign->transfer, fixed, c);
  agent_run run(p, open_data(p));
  run.receive(stream);
  check(run.downloaded());
  return 0;
}
