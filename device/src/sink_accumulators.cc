// A program's accumulators (task_stream.fbs, Program.accumulators): sums
// that its kernels add to in every step (eval's MetricSum) and that the
// host reads once after the sink. Zeroing them when a sink starts, rather
// than in a task at step 0, keeps every step of the program the same and
// the reset out of the kernels. The spans are resolved at load, so the sink
// only runs a memset per accumulator: no allocation, no lookup.
#include <cstring>
#include <string>

#include "device/src/loaded_job.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"

namespace sinkrt::device {

Status PrepareAccumulators(LoadedJob& job, const fb::Program* def, PreparedProgram* out) {
  out->accumulators.clear();
  if (!def->accumulators()) return Status::Ok();
  const auto* buffers = job.stream.root()->buffers();
  for (uint32_t index : *def->accumulators()) {
    // The verifier vouched for the index and the role; the arena for the bytes.
    const fb::Buffer* b = buffers->Get(index);
    if (b->offset() + b->bytes() > job.arena.size())
      return OutOfRange(std::string(ProgramKindName(def->kind())) + ": accumulator buffer " + std::to_string(index) +
                        " ends past the arena");
    out->accumulators.emplace_back(job.arena.data() + b->offset(), b->bytes());
  }
  return Status::Ok();
}

void ZeroAccumulators(PreparedProgram& prog) {
  for (std::span<uint8_t> a : prog.accumulators) std::memset(a.data(), 0, a.size());
}

}  // namespace sinkrt::device
