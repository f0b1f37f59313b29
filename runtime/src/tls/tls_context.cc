#include <openssl/err.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/src/tls/tls_internal.h"

namespace sinkrt {
namespace {

// A named PEM file must be a readable regular file: OpenSSL's own messages
// for a missing one ("system lib") do not say which.
Status CheckPemFile(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound(std::string(what) + " '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(std::string(what) + " '" + path + "' is not a regular file");
  return Status::Ok();
}

Status LoadOwnCertificate(SSL_CTX* ctx, const TlsConfig& c) {
  if (c.cert_file.empty() != c.key_file.empty())
    return InvalidArgument(c.cert_file.empty() ? "a TLS key without its certificate (give both)"
                                               : "a TLS certificate without its key (give both)");
  if (c.cert_file.empty()) return Status::Ok();
  SINKRT_RETURN_IF_ERROR(CheckPemFile(c.cert_file, "TLS certificate"));
  SINKRT_RETURN_IF_ERROR(CheckPemFile(c.key_file, "TLS key"));
  if (SSL_CTX_use_certificate_chain_file(ctx, c.cert_file.c_str()) != 1)
    return InvalidArgument("TLS certificate '" + c.cert_file + "': " + TakeOpenSslError("not a PEM certificate"));
  const std::string mismatch = "TLS key '" + c.key_file + "' does not belong to the certificate '" + c.cert_file + "'";
  if (SSL_CTX_use_PrivateKey_file(ctx, c.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = TakeOpenSslError("not a PEM private key");
    if (why.find("key values mismatch") != std::string::npos) return InvalidArgument(mismatch);
    return InvalidArgument("TLS key '" + c.key_file + "': " + why);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return InvalidArgument(mismatch);
  return Status::Ok();
}

Status LoadCa(SSL_CTX* ctx, const TlsConfig& c, TlsRole role) {
  if (c.ca_file.empty()) return Status::Ok();
  SINKRT_RETURN_IF_ERROR(CheckPemFile(c.ca_file, "TLS CA"));
  if (SSL_CTX_load_verify_locations(ctx, c.ca_file.c_str(), nullptr) != 1)
    return InvalidArgument("TLS CA '" + c.ca_file + "': " + TakeOpenSslError("no PEM certificate in it"));
  // A self-signed certificate named as its own CA is a trust anchor too.
  X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
  int mode = SSL_VERIFY_PEER;
  if (role == TlsRole::kServer) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(ctx, mode, nullptr);
  return Status::Ok();
}

}  // namespace

std::string TakeOpenSslError(const std::string& fallback) {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    std::string r = reason ? reason : ("OpenSSL error " + std::to_string(e));
    if (out.find(r) != std::string::npos) continue;
    if (!out.empty()) out += "; ";
    out += r;
  }
  return out.empty() ? fallback : out;
}

TlsConfig TlsConfig::FromEnvironment() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  return {env("SINKRT_TLS_CERT"), env("SINKRT_TLS_KEY"), env("SINKRT_TLS_CA")};
}

TlsRole ContextRole(const TlsContext& context) { return context.role; }

Result<std::shared_ptr<const TlsContext>> MakeTlsContext(const TlsConfig& config, TlsRole role) {
  if (role == TlsRole::kServer && config.cert_file.empty())
    return InvalidArgument("a TLS server needs a certificate and its key");
  if (role == TlsRole::kClient && config.ca_file.empty())
    return InvalidArgument("a TLS client needs the CA that signed the server's certificate");
  ERR_clear_error();
  auto context = std::make_shared<TlsContext>();
  context->role = role;
  context->ctx = SSL_CTX_new(role == TlsRole::kServer ? TLS_server_method() : TLS_client_method());
  if (!context->ctx) return Internal("SSL_CTX_new: " + TakeOpenSslError("out of memory"));
  SSL_CTX* ctx = context->ctx;
  // sinkrt speaks only to itself: the newest protocol, no renegotiation, no
  // resumption tickets arriving after the handshake.
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_num_tickets(ctx, 0);
  // FrameSocket retries a write with what is left, from wherever it is.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read ahead into a buffer of several records: a batch then arrives in a
  // few large reads instead of two system calls per 16 KiB record.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 256 * 1024);
  SINKRT_RETURN_IF_ERROR(LoadOwnCertificate(ctx, config));
  SINKRT_RETURN_IF_ERROR(LoadCa(ctx, config, role));
  return std::shared_ptr<const TlsContext>(std::move(context));
}

}  // namespace sinkrt
