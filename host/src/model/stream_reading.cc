#include "host/src/model/stream_reading.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "host/src/job/stream_report.h"
#include "host/src/model/slices.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host {
namespace {

// eval_step's ArgMaxAccuracy input: the rows of the logits it counts, local
// and global (equal when the logits are not split by rows).
void AccuracyRows(const VerifiedStream& view, int64_t* local, int64_t* global) {
  *local = *global = 0;
  const fb::Program* p = view.FindProgram(ProgramKind::EvalStep);
  if (!p) return;
  for (const fb::Stream* s : *p->streams())
    for (const fb::Task* t : *s->tasks())
      if (t->body_type() == fb::TaskBody::KernelTask && t->body_as_KernelTask()->op() == fb::OpCode::ArgMaxAccuracy) {
        const fb::Buffer* b = view.root()->buffers()->Get(t->body_as_KernelTask()->inputs()->Get(0));
        *local = *global = b->shape() && b->shape()->size() > 0 ? b->shape()->Get(0) : 1;
        if (b->slice() && b->slice()->global_shape() && b->slice()->global_shape()->size() > 0)
          *global = b->slice()->global_shape()->Get(0);
      }
}

}  // namespace

QueueInfo FindQueue(const VerifiedStream& view, const std::string& name) {
  QueueInfo q;
  if (!view.root()->queues()) return q;
  for (uint32_t i = 0; i < view.root()->queues()->size(); ++i) {
    const fb::QueueSpec* spec = view.root()->queues()->Get(i);
    if (spec->name() && spec->name()->str() == name) q.index = i;
  }
  if (q.index >= 0) q.columns = job::QueueColumns(view, name);
  return q;
}

std::vector<uint32_t> Reports(const VerifiedStream& view, ProgramKind kind) {
  const fb::Program* p = view.FindProgram(kind);
  if (!p || !p->reports()) return {};
  return {p->reports()->begin(), p->reports()->end()};
}

void FindEvalReports(const VerifiedStream& view, int* loss_report, int* accuracy_report) {
  const std::vector<uint32_t> train = Reports(view, ProgramKind::TrainStep);
  const std::vector<uint32_t> eval = Reports(view, ProgramKind::EvalStep);
  int64_t accuracy_buffer = -1;
  if (const fb::Program* p = view.FindProgram(ProgramKind::EvalStep))
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* t : *s->tasks())
        if (t->body_type() == fb::TaskBody::KernelTask && t->body_as_KernelTask()->op() == fb::OpCode::ArgMaxAccuracy)
          accuracy_buffer = t->body_as_KernelTask()->outputs()->Get(0);
  for (size_t i = 0; i < eval.size(); ++i) {
    if (!train.empty() && eval[i] == train[0]) *loss_report = static_cast<int>(i);
    if (eval[i] == accuracy_buffer) *accuracy_report = static_cast<int>(i);
  }
  // With gradient accumulation train_step reports the mean of its
  // micro-steps' losses, another buffer; eval_step reports the loss first.
  if (*loss_report < 0 && !eval.empty() && eval[0] != accuracy_buffer) *loss_report = 0;
}

int FindMetricSumsReport(const VerifiedStream& view) {
  const fb::Program* p = view.FindProgram(ProgramKind::EvalStep);
  if (!p || !p->reports() || !p->streams()) return -1;
  for (const fb::Stream* s : *p->streams())
    for (const fb::Task* t : *s->tasks())
      if (t->body_type() == fb::TaskBody::KernelTask && t->body_as_KernelTask()->op() == fb::OpCode::MetricSum) {
        const uint32_t sums = t->body_as_KernelTask()->outputs()->Get(0);
        for (uint32_t i = 0; i < p->reports()->size(); ++i)
          if (p->reports()->Get(i) == sums) return static_cast<int>(i);
      }
  return -1;
}

Result<RankPlan> PlanRank(const VerifiedStream& view, uint32_t r) {
  const std::string where = "rank " + std::to_string(r);
  RankPlan plan;
  SINKRT_ASSIGN_OR_RETURN(plan.train, PlanRankFeed(job::QueueColumns(view, "train"), job::QueueSlices(view, "train"),
                                                   where + "'s train queue"));
  SINKRT_ASSIGN_OR_RETURN(plan.eval, PlanRankFeed(job::QueueColumns(view, "eval"), job::QueueSlices(view, "eval"),
                                                  where + "'s eval queue"));
  SINKRT_ASSIGN_OR_RETURN(plan.predict, PlanRankFeed(job::QueueColumns(view, "predict"),
                                                     job::QueueSlices(view, "predict"), where + "'s predict queue"));
  plan.state = StateBuffers(view);
  AccuracyRows(view, &plan.accuracy_rows, &plan.accuracy_global_rows);
  const std::vector<uint32_t> predict = Reports(view, ProgramKind::PredictStep);
  if (!predict.empty()) plan.predict_output = job::ReadSlice(view.root()->buffers()->Get(predict[0])->slice());
  return plan;
}

std::vector<StateBuffer> StateBuffers(const VerifiedStream& view) {
  std::vector<StateBuffer> out;
  for (uint32_t i = 0; i < view.root()->buffers()->size(); ++i) {
    const fb::Buffer* b = view.root()->buffers()->Get(i);
    if (b->role() != fb::BufferRole::Param && b->role() != fb::BufferRole::OptState &&
        b->role() != fb::BufferRole::State)
      continue;
    StateBuffer s;
    s.index = i;
    s.name = b->name() ? b->name()->str() : "";
    s.dtype = FromFb(b->dtype());
    if (b->shape()) s.shape.assign(b->shape()->begin(), b->shape()->end());
    s.bytes = b->bytes();
    s.role = FromFb(b->role());
    s.slice = job::ReadSlice(b->slice());
    out.push_back(std::move(s));
  }
  return out;
}

Status PlanPipeline(Model::Impl& m, const std::string& context) {
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const uint32_t per_stage = n / static_cast<uint32_t>(m.pipeline_stages);
  std::map<std::string, uint32_t> owner;
  for (uint32_t r = 0; r < n; ++r) {
    const VerifiedStream& view = m.streams[r];
    m.rank_train_queues.push_back(FindQueue(view, "train"));
    m.rank_eval_queues.push_back(FindQueue(view, "eval"));
    m.reports_loss.push_back(!Reports(view, ProgramKind::TrainStep).empty());
    // Replicas hold what their stage's first rank holds; slices are each
    // their own rank's.
    if (!m.stage_sharded && r % per_stage != 0) continue;
    const uint32_t stage = r / per_stage;
    for (StateBuffer& s : StateBuffers(view)) {
      auto [it, fresh] = owner.emplace(s.name, stage);
      // A parameter lives in one stage. Optimizer state that is not any
      // parameter's (Adam's step powers) is on every stage, equal on all:
      // a checkpoint holds it once and loads it everywhere.
      if (!fresh && it->second != stage) {
        const auto first = std::find_if(m.stage_state.begin(), m.stage_state.end(),
                                        [&](const auto& e) { return e.second.name == s.name; });
        if (s.role != BufferRole::OptState || s.slice || first == m.stage_state.end() ||
            first->second.shape != s.shape || first->second.dtype != s.dtype)
          return Internal(context + ": stages " + std::to_string(it->second) + " and " + std::to_string(stage) +
                          " both hold '" + s.name + "'");
      }
      m.stage_state.emplace_back(r, std::move(s));
    }
  }
  if (!m.reports_loss.back()) return Internal(context + ": the last stage does not report the loss");
  // The last stage's eval_step reports [loss, correct count, logits], or
  // [loss] when the loss is not a sparse cross-entropy, then the metric
  // sums of sunk eval.
  m.metric_sums_report = FindMetricSumsReport(m.streams.back());
  const size_t eval_reports =
      Reports(m.streams.back(), ProgramKind::EvalStep).size() - (m.metric_sums_report >= 0 ? 1 : 0);
  m.loss_report = eval_reports > 0 ? 0 : -1;
  m.accuracy_report = eval_reports == 3 ? 1 : -1;
  return Status::Ok();
}

}  // namespace sinkrt::host
