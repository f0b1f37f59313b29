#include "host/src/graph/file/lr_schedule_options.h"

#include <string>

namespace sinkrt::host {

namespace fbs = flatbuffers;

fbs::Offset<fb::LrScheduleOptions> WriteLrSchedule(fbs::FlatBufferBuilder& fbb, const LrSchedule& s) {
  fbs::Offset<fbs::Vector<float>> values = 0;
  if (s.kind == LrScheduleKind::Table) values = fbb.CreateVector(s.values);
  fb::LrScheduleOptionsBuilder b(fbb);
  b.add_kind(static_cast<fb::LrScheduleKind>(s.kind));
  b.add_learning_rate(s.learning_rate);
  b.add_end_learning_rate(s.end_learning_rate);
  b.add_decay_rate(s.decay_rate);
  b.add_decay_steps(s.decay_steps);
  b.add_warmup_steps(s.warmup_steps);
  b.add_power(s.power);
  b.add_is_stair(s.is_stair);
  b.add_update_decay_steps(s.update_decay_steps);
  if (s.kind == LrScheduleKind::Table) b.add_values(values);
  return b.Finish();
}

Result<LrSchedule> ReadLrSchedule(const fb::LrScheduleOptions* o) {
  LrSchedule s;
  if (!o) return s;
  const auto kind = static_cast<int>(o->kind());
  if (kind > static_cast<int>(LrScheduleKind::Table))
    return InvalidArgument("schedule kind " + std::to_string(kind) + " is not an LrScheduleKind (WarmUp .. Table)");
  s.kind = static_cast<LrScheduleKind>(kind);
  s.learning_rate = o->learning_rate();
  s.end_learning_rate = o->end_learning_rate();
  s.decay_rate = o->decay_rate();
  s.decay_steps = o->decay_steps();
  s.warmup_steps = o->warmup_steps();
  s.power = o->power();
  s.is_stair = o->is_stair();
  s.update_decay_steps = o->update_decay_steps();
  if (o->values()) s.values.assign(o->values()->begin(), o->values()->end());
  return s;
}

}  // namespace sinkrt::host
