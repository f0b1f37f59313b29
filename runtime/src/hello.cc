#include "runtime/src/hello.h"

namespace sinkrt {

void BuildHello(flatbuffers::FlatBufferBuilder& fbb, const HelloFields& hello) {
  // The order of the strings and fields fixes the bytes on the wire: the
  // order the daemon and the rendezvous wrote them in before this builder.
  // Null offsets and default scalars are not stored.
  auto software = hello.software.empty() ? 0 : fbb.CreateString(hello.software);
  auto token = hello.token.empty() ? 0 : fbb.CreateString(hello.token);
  auto host_id = hello.host_id.empty() ? 0 : fbb.CreateString(hello.host_id);
  auto nonce = hello.nonce.empty() ? 0 : fbb.CreateVector(hello.nonce);
  fb::HelloBuilder hb(fbb);
  hb.add_protocol_major(hello.protocol_major);
  hb.add_protocol_minor(hello.protocol_minor);
  hb.add_role(hello.role);
  hb.add_rank(hello.rank);
  hb.add_software(software);
  hb.add_busy(hello.busy);
  hb.add_cores(hello.cores);
  hb.add_pid(hello.pid);
  hb.add_job(hello.job);
  hb.add_token(token);
  hb.add_host_id(host_id);
  hb.add_nonce(nonce);
  FinishMessage(fbb, fb::MessageBody::Hello, hb.Finish().Union());
}

HelloFields ReadHello(const fb::Hello& hello) {
  HelloFields out;
  out.protocol_major = hello.protocol_major();
  out.protocol_minor = hello.protocol_minor();
  out.role = hello.role();
  out.rank = hello.rank();
  out.token = hello.token() ? hello.token()->str() : "";
  out.software = hello.software() ? hello.software()->str() : "";
  out.busy = hello.busy();
  out.cores = hello.cores();
  out.pid = hello.pid();
  out.job = hello.job();
  out.host_id = hello.host_id() ? hello.host_id()->str() : "";
  if (hello.nonce()) out.nonce.assign(hello.nonce()->begin(), hello.nonce()->end());
  return out;
}

}  // namespace sinkrt
