#include "runtime/src/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>

namespace sinkrt {

Result<Nonce> FreshNonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    return Internal("OpenSSL's RAND_bytes has no entropy for a handshake nonce");
  return n;
}

Proof ProveToken(std::string_view token, std::string_view label, AuthSide side, const Nonce& client,
                 const Nonce& server) {
  // The label ends at a zero byte, so no label is a prefix of another's input.
  std::string message(label);
  message.push_back('\0');
  message.push_back(static_cast<char>(side));
  message.append(reinterpret_cast<const char*>(client.data()), client.size());
  message.append(reinterpret_cast<const char*>(server.data()), server.size());
  Proof out{};
  unsigned int length = 0;
  // HMAC with a zero-length key is well defined (the key is zero-padded);
  // OpenSSL wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kNoKey) : token.data();
  HMAC(EVP_sha256(), key, static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), out.data(), &length);
  return out;
}

bool ProofMatches(std::span<const uint8_t> got, const Proof& expected) {
  // The length is no secret; the bytes are compared in constant time.
  if (got.size() != expected.size()) return false;
  return CRYPTO_memcmp(got.data(), expected.data(), expected.size()) == 0;
}

Result<Nonce> NonceFrom(std::span<const uint8_t> bytes, const std::string& what) {
  if (bytes.size() != kNonceBytes)
    return InvalidArgument(what + " has a nonce of " + std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(kNonceBytes));
  Nonce n;
  std::copy(bytes.begin(), bytes.end(), n.begin());
  return n;
}

}  // namespace sinkrt
