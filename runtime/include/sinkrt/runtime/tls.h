/// \file
/// TLS for sinkrt's control connections: certificates, keys and the CA that
/// a side presents and trusts (TlsConfig), and the OpenSSL context built from
/// them once per daemon or client (TlsContext). FrameSocket::StartTls runs
/// the handshake on a connected socket; frames then travel encrypted.
///
/// Trust is a private CA, as clusters deploy it (MindSpore's cluster SSL,
/// HCCL's TLS): a client verifies that the server's certificate chains to
/// its CA; a server given a CA also asks every client for a certificate that
/// chains to it (mutual authentication). Host names are not compared with the
/// certificate: daemons are addressed by IP and rank, and the CA is the
/// cluster's own.
#pragma once

#include <memory>
#include <string>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// PEM files one side of a connection uses. All empty: no TLS.
struct TlsConfig {
  std::string cert_file;  ///< this side's certificate (chain), PEM
  std::string key_file;   ///< its private key, PEM
  /// The CA(s) the other side's certificate must chain to. A client needs
  /// it (the server is verified); a server with it requires client
  /// certificates (mutual authentication).
  std::string ca_file;

  /// True when any file is named.
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
  /// SINKRT_TLS_CERT, SINKRT_TLS_KEY and SINKRT_TLS_CA.
  static TlsConfig FromEnvironment();
};

/// Which end of the handshake a context is for.
enum class TlsRole { kClient, kServer };

/// An OpenSSL context (SSL_CTX) with the certificates loaded and checked:
/// made once, shared by every connection of a daemon or client. Opaque so
/// that the public headers do not include OpenSSL.
struct TlsContext;

/// Loads and checks `config` for `role`: a server needs a certificate and
/// its key, a client a CA; the key must match the certificate. Errors name
/// the flag's file and OpenSSL's reason.
Result<std::shared_ptr<const TlsContext>> MakeTlsContext(const TlsConfig& config, TlsRole role);

/// The role a context was made for.
TlsRole ContextRole(const TlsContext& context);

}  // namespace sinkrt
