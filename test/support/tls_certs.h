// Certificates for TLS tests, made with OpenSSL at test time (nothing
// committed expires): a CA, a server and a client certificate it signs, and
// a second, unrelated CA with a client of its own. P-256 keys, valid from an
// hour ago for a day.
#pragma once

#include <string>

namespace sinkrt::testing {

struct TlsTestFiles {
  std::string ca_cert;
  std::string server_cert, server_key;  // signed by ca_cert
  std::string client_cert, client_key;  // signed by ca_cert
  std::string other_ca_cert;            // another CA
  std::string rogue_cert, rogue_key;    // signed by other_ca_cert
};

// Writes the files above into `dir` (which must exist) as PEM.
TlsTestFiles WriteTlsTestFiles(const std::string& dir);

}  // namespace sinkrt::testing
