#include "support/tls_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

namespace sinkrt::testing {
namespace {

struct Issued {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~Issued() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("making test certificates: ") + what);
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  Check(ext && X509_add_ext(cert, ext, -1) == 1, "extension");
  X509_EXTENSION_free(ext);
}

// A certificate for `cn`, signed by `issuer` (self-signed when null).
std::unique_ptr<Issued> Issue(const char* cn, const Issued* issuer, bool is_ca, long serial) {
  auto out = std::make_unique<Issued>();
  out->key = EVP_EC_gen("P-256");
  Check(out->key, "key");
  X509* c = out->cert = X509_new();
  Check(c && X509_set_version(c, 2) == 1, "certificate");
  ASN1_INTEGER_set(X509_get_serialNumber(c), serial);
  X509_gmtime_adj(X509_getm_notBefore(c), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c), 24 * 3600);
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509_set_pubkey(c, out->key);
  X509* signer_cert = issuer ? issuer->cert : c;
  AddExtension(c, signer_cert, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  AddExtension(c, signer_cert, NID_key_usage,
               is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature,keyEncipherment");
  Check(X509_sign(c, issuer ? issuer->key : out->key, EVP_sha256()) > 0, "signature");
  return out;
}

void WritePem(const std::string& path, const Issued& i, bool key) {
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f, "open");
  const bool ok =
      key ? PEM_write_PrivateKey(f, i.key, nullptr, nullptr, 0, nullptr, nullptr) == 1 : PEM_write_X509(f, i.cert) == 1;
  Check(std::fclose(f) == 0 && ok, "write");
}

}  // namespace

TlsTestFiles WriteTlsTestFiles(const std::string& dir) {
  TlsTestFiles t;
  auto ca = Issue("sinkrt test CA", nullptr, true, 1);
  auto server = Issue("sinkd", ca.get(), false, 2);
  auto client = Issue("sinkrun", ca.get(), false, 3);
  auto other_ca = Issue("another CA", nullptr, true, 4);
  auto rogue = Issue("rogue", other_ca.get(), false, 5);
  auto put = [&](const char* name, const Issued& i, bool key) {
    std::string path = dir + "/" + name;
    WritePem(path, i, key);
    return path;
  };
  t.ca_cert = put("ca.pem", *ca, false);
  t.server_cert = put("server.pem", *server, false);
  t.server_key = put("server.key", *server, true);
  t.client_cert = put("client.pem", *client, false);
  t.client_key = put("client.key", *client, true);
  t.other_ca_cert = put("other_ca.pem", *other_ca, false);
  t.rogue_cert = put("rogue.pem", *rogue, false);
  t.rogue_key = put("rogue.key", *rogue, true);
  return t;
}

}  // namespace sinkrt::testing
