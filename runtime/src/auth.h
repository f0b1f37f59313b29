/// \file
/// The token handshake: a shared token proves itself without travelling.
///
/// Each side sends a fresh random nonce; each then answers
/// HMAC-SHA256(token, label || side || client nonce || server nonce), where
/// `label` names the service (the rendezvous master, ...) and `side` the
/// direction, so a proof is good for one connection, one service and one
/// direction only: a captured conversation replayed to a listener meets a
/// new nonce and fails, and a listener's proof cannot be reflected back as
/// a client's. Proofs are compared in constant time. With an empty token
/// (loopback without SINKRT_TOKEN) the same exchange runs with an empty
/// key: it then proves nothing but that the peer speaks the protocol.
///
/// The proofs bind only the nonces, not the stream under them, so the
/// handshake runs unchanged inside TLS later (which will add the channel).
/// Like any shared-secret challenge, a peer that collects proofs can test
/// guesses of the token offline: tokens must be long random strings.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

inline constexpr size_t kNonceBytes = 32;  ///< each side's fresh random bytes
inline constexpr size_t kProofBytes = 32;  ///< an HMAC-SHA256

using Nonce = std::array<uint8_t, kNonceBytes>;  ///< one side's fresh random bytes
using Proof = std::array<uint8_t, kProofBytes>;  ///< one side's HMAC over both nonces

/// The label of the proofs a host (or probe) and a sinkd exchange.
inline constexpr const char* kSinkdAuthLabel = "sinkrt sinkd 1";

/// Which end of a connection a proof comes from.
enum class AuthSide : uint8_t {
  kClient = 1,  ///< the side that dialed
  kServer = 2,  ///< the side that listens
};

/// A nonce from OpenSSL's CSPRNG (RAND_bytes); fails only when it has no entropy.
Result<Nonce> FreshNonce();

/// HMAC-SHA256(token, label || 0 || side || client || server): `side`'s proof
/// that it holds `token`, for the connection whose nonces these are.
Proof ProveToken(std::string_view token, std::string_view label, AuthSide side, const Nonce& client,
                 const Nonce& server);

/// Whether `got` (as received: any length) equals `expected`, in time that
/// does not depend on where they differ (CRYPTO_memcmp).
bool ProofMatches(std::span<const uint8_t> got, const Proof& expected);

/// A received nonce field as a Nonce; fails naming `what` when its length is wrong.
Result<Nonce> NonceFrom(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace sinkrt
