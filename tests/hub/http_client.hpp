// A small HTTP(S) client for tests of the hub's operator endpoint: one request per call, on its own
// io_context (so a test thread can ask while the hub's io_context runs on the main thread), every step
// within `timeout`. Over HTTPS it trusts the given CA only and presents the given certificate, if any.
//
//   auto r = hub_testing::http_fetch({.port = port, .target = "/metrics"});
//   CHECK(r.status == 200);
//   auto a = hub_testing::http_fetch({.port = port, .method = "POST", .target = "/api/pause", .body = "{}",
//                                     .tls = hub_testing::client_tls{pki.ca.cert, pki.operator_cert}});
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "tessera/crypto/pki.hpp"

namespace tessera::hub_testing {

struct client_tls {
  std::filesystem::path ca;                 // the CA the client trusts for the hub's certificate
  std::optional<crypto::cert_files> cert;   // what it presents (none: no client certificate)
};

struct http_call {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string method = "GET";
  std::string target = "/";
  std::string body{};
  std::string content_type = "application/json";
  std::optional<client_tls> tls{};
  std::chrono::milliseconds timeout{5000};
};

struct http_result {
  unsigned status = 0;     // 0: no response (error says why)
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;
  std::string error;       // the failure before a response (TLS alert, reset, timeout)
};

namespace detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

template <class Stream>
asio::awaitable<void> exchange(Stream& stream, const http_call& call, http_result& out) {
  http::request<http::string_body> req{call.method == "POST"  ? http::verb::post
                                       : call.method == "HEAD" ? http::verb::head
                                       : call.method == "GET"  ? http::verb::get
                                                               : http::verb::put,
                                       call.target, 11};
  req.set(http::field::host, call.host);
  req.set(http::field::connection, "close");
  if (!call.body.empty() || call.method == "POST") {
    req.set(http::field::content_type, call.content_type);
    req.body() = call.body;
    req.prepare_payload();
  }
  co_await http::async_write(stream, req, asio::use_awaitable);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  if (call.method == "HEAD") parser.skip(true);
  co_await http::async_read(stream, buffer, parser, asio::use_awaitable);
  const auto& res = parser.get();
  out.status = res.result_int();
  out.body = res.body();
  out.content_type = std::string(res[http::field::content_type]);
  for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
}

}  // namespace detail

inline http_result http_fetch(const http_call& call) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  asio::io_context io;
  http_result out;
  std::optional<asio::ssl::context> ctx;
  if (call.tls) {
    ctx.emplace(asio::ssl::context::tls_client);
    ctx->set_options(asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    ctx->load_verify_file(call.tls->ca.string());
    ctx->set_verify_mode(asio::ssl::verify_peer);
    if (call.tls->cert) {
      ctx->use_certificate_chain_file(call.tls->cert->cert.string());
      ctx->use_private_key_file(call.tls->cert->key.string(), asio::ssl::context::pem);
    }
  }
  auto run = [&]() -> asio::awaitable<void> {
    try {
      const asio::ip::tcp::endpoint at(asio::ip::make_address(call.host), call.port);
      if (ctx) {
        beast::ssl_stream<beast::tcp_stream> stream(io, *ctx);
        co_await beast::get_lowest_layer(stream).async_connect(at, asio::use_awaitable);
        co_await stream.async_handshake(asio::ssl::stream_base::client, asio::use_awaitable);
        co_await detail::exchange(stream, call, out);
      } else {
        beast::tcp_stream stream(io);
        co_await stream.async_connect(at, asio::use_awaitable);
        co_await detail::exchange(stream, call, out);
      }
    } catch (const boost::system::system_error& e) {
      out.error = e.code().message();
    }
  };
  asio::co_spawn(io, run(), asio::detached);
  if (io.run_for(call.timeout) == 0 || !io.stopped()) {
    if (out.status == 0 && out.error.empty()) out.error = "timed out";
  }
  return out;
}

}  // namespace tessera::hub_testing
