// sinkc: compiles a graph file into one task stream per rank, offline.
//
//   sinkc GRAPH -o DIR [--devices N]
//         [--parallel stand_alone|data_parallel|semi_auto_parallel|auto_parallel]
//         [--batch B] [--gradients-mean[=true|false]] [--parameter-broadcast]
//         [--comm-fusion JSON] [--strategy data|model|DPxMP|FILE]
//         [--strategy-save FILE] [--full-batch] [--seed S]
//         [--search-mode dynamic_programming|sharding_propagation]
//         [--device-memory BYTES] [--calibration FILE] [--fully-use-devices] [--explain]
//         [--pipeline-stages S --micro-size M [--pipeline-scheduler 1f1b|gpipe]
//          [--stage-of LAYER=k,...]]
//         [--optimizer sgd|momentum|adam|adamw|lamb] [--lr LR] [--momentum M]
//         [--weight-decay W] [--no-decay NAME,...]
//         [--queue-capacity Q] [--quiet]
//   sinkc --version
//
// GRAPH is a graph file (binary .sgraph or JSON, host/graph_file.h). DIR
// receives rank_K.tstream for every rank and manifest.json; the same input
// and flags always give byte-identical files. `sinkrun train --streams DIR`
// and Model::Create(ReadCompiledJob(DIR), ...) run them without the graph.
//
// MindSpore's defaults, shared with sinkrun and host::ParallelContext:
// --gradients-mean false (AllReduce sum), comm_fusion auto. The
// optimizer comes from the file unless --optimizer is given. --seed adds to
// every random initialiser's seed (0: the file's).
//
// semi_auto_parallel compiles each rank's slice of the whole graph
// (docs/design/sharding.md) with the shard strategies of --strategy: a preset
// (data, model, DPxMP) or a strategy file; without it, the file's own
// (MindSpore's default where an op has none). --batch (default: the
// file's) is one data-parallel replica's batch, as under data_parallel: the
// graph is compiled for --batch x the strategy's data-parallel degree
// (data on N devices: N, model: 1, DPxMP: DP, a strategy file: the split of
// its loss's labels), or for --batch itself with --full-batch (every rank
// reads the whole batch). --strategy-save writes the strategies and
// parameter layouts compiled (MindSpore's strategy_ckpt_save_file).
//
// auto_parallel (docs/guide/auto_parallel.md) searches every op's strategy once
// (ops that carry one in the file keep it; --strategy is refused) against
// the cost model of --calibration (else $SINKRT_CALIBRATION, else the
// built-in default), under the per-rank limit --device-memory (bytes, or
// with KB/MB/GB/KiB/MiB/GiB), and compiles every rank from the result as
// semi_auto_parallel: the streams are semi-auto streams. --batch is then
// the data-parallel global batch's share per device: the graph is compiled
// for --batch x --devices (--batch with --full-batch). It prints one line
// with the search and the calibration file; --explain also prints the
// plan, one line per op (ExplainPlan). --strategy-save writes the searched
// strategies, which `--parallel semi_auto_parallel --strategy FILE` at the
// same graph batch compiles to the same stream bytes.
//
// data_parallel with --pipeline-stages S (docs/guide/pipeline.md) compiles S
// stages of --devices / S ranks, each batch of --batch rows cut into M
// micro-batches; the manifest records the pipeline and the summary prints a
// line per stage.
//
// Exit 0 on success, 2 for
// a bad command line, 1 for a graph or compile error (naming the file, the
// op and the field).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli_validators.h"
#include "cli/tool_version.h"
#include "parallel_flags.h"
#include "plan_text.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/shard_strategies.h"

namespace {

using namespace sinkrt;

struct Flags {
  std::string graph;
  std::string out;
  int devices = 1;
  int64_t batch = 0;                // --batch: one replica's (0: the file's)
  tools::ParallelFlags par;         // --parallel and the settings of each parallel mode
  std::string recompute;            // --recompute all|LAYER,...
  std::string amp_level = "O0";     // --amp-level
  std::string loss_scale = "none";  // --loss-scale-manager
  bool explain = false;
  uint64_t seed = 0;
  std::string optimizer;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;  // --weight-decay
  std::string no_decay;     // --no-decay: the no-decay group's name filters
  uint32_t queue_capacity = 16;
  bool quiet = false;
};

int Usage(const std::string& m) {
  std::cerr << "sinkc: " << m << '\n';
  return 2;
}
int Failure(const std::string& m) {
  std::cerr << "sinkc: " << m << '\n';
  return 1;
}

std::string Mib(uint64_t bytes) {
  char buf[32];
  if (bytes < (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
}

std::string Hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string ColumnsText(const std::vector<host::ColumnSpec>& cols) {
  std::string s;
  for (const auto& c : cols) {
    if (!s.empty()) s += ", ";
    s += c.name + " " + DTypeName(c.dtype) + " " + ShapeToString(c.shape);
  }
  return s;
}

// `global_batch`: the batch of one step over every rank.
void PrintSummary(const Flags& f, const host::GraphFile& file, const host::CompiledJob& job, int64_t global_batch) {
  const host::CompileOptions& o = job.options;
  const host::CompiledStream& r0 = job.ranks[0];
  std::cout << "sinkc: " << f.graph << " -> " << f.out << "/: " << job.world_size()
            << (job.world_size() == 1 ? " rank, " : " ranks, ")
            << tools::ParallelContextText(job.auto_parallel ? host::ParallelMode::AutoParallel : o.parallel_mode,
                                          o.gradients_mean);
  if (o.parameter_broadcast) std::cout << ", parameter broadcast";
  if (job.auto_parallel) {
    std::cout << ", strategy searched (" << job.auto_parallel->search_mode << ")";
    if (o.full_batch) std::cout << ", full batch";
  } else if (o.parallel_mode == host::ParallelMode::SemiAutoParallel) {
    std::cout << ", strategy " << tools::StrategyText(f.par.strategy);
    if (o.full_batch) std::cout << ", full batch";
  }
  std::cout << '\n';
  std::cout << "  network   '" << job.network_name << "' " << Hex(job.network_hash) << ": "
            << file.graph.tensors().size() << " tensors, " << file.graph.ops().size() << " ops, loss '"
            << file.graph.tensor(file.graph.loss()).name << "'\n";
  const host::OptimizerSpec& s = o.optimizer;
  std::cout << "  optimizer " << host::OptimizerKindName(s.kind) << " lr ";
  if (s.schedule.enabled()) {
    std::cout << host::DescribeLrSchedule(s.schedule);  // on the device (docs/guide/lr_schedules.md)
  } else {
    std::cout << s.learning_rate;
  }
  if (s.kind == host::OptimizerKind::Momentum) std::cout << " momentum " << s.momentum;
  if (s.weight_decay != 0) std::cout << " weight_decay " << s.weight_decay;
  for (const host::ParamGroup& g : s.groups) {
    std::cout << " group [";
    for (size_t i = 0; i < g.names.size(); ++i) std::cout << (i ? "," : "") << g.names[i];
    std::cout << "] weight_decay " << g.weight_decay;
    if (g.learning_rate > 0) std::cout << " lr " << g.learning_rate;
  }
  if (s.clip_grad_norm != 0) std::cout << " clip_grad_norm " << s.clip_grad_norm;  // docs/guide/clipping.md
  std::cout << '\n';
  const auto cols = job.train_columns();
  std::cout << "  inputs    " << ColumnsText(cols) << " per rank";
  if (job.world_size() > 1) std::cout << " (global batch " << global_batch << ")";
  std::cout << "; queue capacity " << o.queue_capacity << '\n';
  if (o.pipeline.stages > 1) {
    std::cout << "  pipeline  " << o.pipeline.stages << " stages of " << job.world_size() / o.pipeline.stages
              << (job.world_size() / o.pipeline.stages == 1 ? " rank" : " ranks") << ", " << o.pipeline.micro_size
              << " micro-batches, " << o.pipeline.scheduler << "; per stage, its first rank:\n";
    for (uint32_t r = 0; r < job.world_size(); r += job.world_size() / o.pipeline.stages) {
      const host::CompileReport& rep = job.ranks[r].report;
      std::cout << "    stage " << rep.pipeline_stage << "  rank " << r << ": train " << rep.train_tasks << " + "
                << rep.comm_tasks << " comm tasks, arena " << Mib(rep.arena_bytes) << ", predicted bubble "
                << static_cast<int>(100 * rep.predicted_bubble + 0.5) << "%\n";
    }
  }
  std::cout << "  tasks     train " << r0.report.train_tasks;
  if (r0.report.comm_tasks) std::cout << " + " << r0.report.comm_tasks << " comm";
  std::cout << ", eval " << r0.report.eval_tasks << ", predict " << r0.report.predict_tasks << "; arena "
            << Mib(r0.report.arena_bytes) << " (" << Mib(r0.report.persistent_bytes) << " persistent)\n";
  if (!r0.report.buckets.empty()) {
    uint64_t total = 0;
    for (const auto& b : r0.report.buckets) total += b.bytes;
    std::cout << "  buckets   " << r0.report.buckets.size() << " AllReduce"
              << (r0.report.buckets.size() == 1 ? "" : "s") << " over " << Mib(total) << ":";
    size_t shown = 0;
    for (const auto& b : r0.report.buckets) {
      if (shown == 4) {
        std::cout << "; ...";
        break;
      }
      std::cout << (shown++ ? "; [" : " [") << b.offset << ", " << b.offset + b.bytes << ") " << b.gradients.size()
                << (b.gradients.size() == 1 ? " gradient" : " gradients");
    }
    std::cout << '\n';
  }
  // Optimizer parallel: what rank 0 shards, and why the rest stays whole.
  for (size_t i = 0; i < r0.report.optimizer_shards.size(); ++i)
    std::cout << (i == 0 ? "  optimizer parallel (rank 0):\n" : "") << "    " << r0.report.optimizer_shards[i] << '\n';
  if (!f.par.strategy_save.empty()) std::cout << "  strategy  " << f.par.strategy_save << '\n';
  for (uint32_t r = 0; r < job.world_size(); ++r)
    std::cout << "  rank " << r << "    rank_" << r << ".tstream " << job.ranks[r].stream.bytes().size()
              << " bytes, stream " << Hex(job.ranks[r].graph_hash) << '\n';
  std::cout << "  manifest  " << f.out << "/manifest.json\n";
}

// The leading dim of the graph's first Input: its batch (0 when none).
int64_t GraphBatch(const host::Graph& g) {
  for (const host::TensorInfo& t : g.tensors())
    if (t.kind == host::TensorKind::Input) return t.shape.empty() ? 0 : t.shape[0];
  return 0;
}

// The command line's job, checked before the graph is read: a mistake
// here is the command line's (exit 2).
Result<host::JobSpec> SpecFromFlags(const Flags& f, const CLI::App& app) {
  if (f.out.empty()) return InvalidArgument("-o DIR is required");
  if (!f.optimizer.empty()) {
    if (!(f.lr > 0) || !std::isfinite(f.lr)) return InvalidArgument("--lr must be a positive number");
    if (!(f.momentum >= 0 && f.momentum < 1)) return InvalidArgument("--momentum must be in [0, 1)");
  } else if (app.count("--lr") || app.count("--momentum") || app.count("--weight-decay") || app.count("--no-decay")) {
    return InvalidArgument(
        "--lr, --momentum, --weight-decay and --no-decay apply with --optimizer (the file's optimizer is used as "
        "written)");
  }
  if (!(f.weight_decay >= 0) || !std::isfinite(f.weight_decay))
    return InvalidArgument("--weight-decay must be >= 0, got " + std::to_string(f.weight_decay));
  if (app.count("--no-decay") && tools::SplitList(f.no_decay).empty())
    return InvalidArgument("--no-decay '" + f.no_decay + "' names no parameter filter");
  host::JobSpec spec;
  tools::ParallelFlags par = f.par;
  par.devices = f.devices;
  par.devices_flag = "--devices " + std::to_string(f.devices);
  SINKRT_RETURN_IF_ERROR(tools::ParallelSpecFromFlags(par, app, spec));
  SINKRT_RETURN_IF_ERROR(host::CheckJobSpec(spec).status());
  // Only a search has choices to explain; semi_auto_parallel compiles the
  // strategies it is given.
  if (f.explain && spec.mode != host::ParallelMode::AutoParallel)
    return InvalidArgument("--explain explains auto_parallel's search: give --parallel auto_parallel (--parallel " +
                           f.par.parallel + " searches nothing)");
  SINKRT_ASSIGN_OR_RETURN(spec.amp_level, host::ParseAmpLevel(f.amp_level), "--amp-level");
  SINKRT_ASSIGN_OR_RETURN(spec.loss_scale, host::ParseLossScaleManager(f.loss_scale), "--loss-scale-manager");
  spec.recompute = tools::SplitList(f.recompute);
  spec.queue_capacity = f.queue_capacity;
  return spec;
}

// The optimizer: --optimizer's, else the file's.
Result<host::OptimizerSpec> OptimizerOf(const Flags& f, const host::GraphFile& file) {
  if (!f.optimizer.empty()) {
    SINKRT_ASSIGN_OR_RETURN(host::OptimizerSpec spec,
                            host::MakeOptimizer(f.optimizer, static_cast<float>(f.lr), static_cast<float>(f.momentum)),
                            "--optimizer");
    spec.weight_decay = static_cast<float>(f.weight_decay);
    if (!f.no_decay.empty()) host::SetNoDecay(spec, tools::SplitList(f.no_decay));
    SINKRT_RETURN_IF_ERROR(host::ValidateOptimizer(spec), "--optimizer");
    return spec;
  }
  if (file.optimizer) return *file.optimizer;
  return InvalidArgument(f.graph + " names no optimizer: give --optimizer sgd|momentum|adam|adamw|lamb");
}

// Writes the job, and the strategies when --strategy-save asks.
Status WriteJob(const Flags& f, const host::JobSpec& spec, const host::JobPlan& plan, const host::CompiledJob& job) {
  SINKRT_RETURN_IF_ERROR(host::WriteCompiledJob(job, f.out), "-o " + f.out);
  return host::SaveJobStrategies(spec, plan);
}

int Run(const Flags& f, const CLI::App& app) {
  auto spec = SpecFromFlags(f, app);
  if (!spec.ok()) return Usage(spec.status().message());
  host::GraphLoadOptions load;
  load.batch = f.batch;
  load.seed_offset = f.seed;
  auto file = host::LoadGraph(f.graph, load);
  if (!file.ok()) return Failure(file.status().message());
  auto optimizer = OptimizerOf(f, *file);
  if (!optimizer.ok()) return Usage(optimizer.status().message());
  spec->optimizer = *optimizer;
  // The file's (or --batch's) batch is one replica's, or one device's share
  // under auto_parallel: the plan decides the batch the graph is read at.
  spec->batch = GraphBatch(file->graph);
  spec->network = [&](int64_t batch) -> Result<host::Graph> {
    if (batch == spec->batch) return file->graph;
    host::GraphLoadOptions at = load;
    at.batch = batch;
    SINKRT_ASSIGN_OR_RETURN(host::GraphFile other, host::LoadGraph(f.graph, at));
    return std::move(other.graph);
  };
  auto plan = host::PlanJob(*spec);
  if (!plan.ok()) return Failure(f.graph + ": " + plan.status().message());
  // Under auto_parallel the plan searched and compiled every rank.
  std::optional<host::CompiledJob> compiled;
  if (!plan->searched) {
    auto c = host::CompileJob(*plan->network, plan->compile_options);
    if (!c.ok()) return Failure(f.graph + ": " + c.status().message());
    compiled = std::move(c).value();
  }
  const host::CompiledJob& job = plan->searched ? *plan->searched : *compiled;
  if (Status written = WriteJob(f, *spec, *plan, job); !written.ok()) return Failure(written.message());
  // Asked for, so printed even with --quiet.
  if (job.auto_parallel && f.explain) std::cout << host::ExplainPlan(*job.auto_parallel);
  if (job.auto_parallel && !f.quiet) std::cout << tools::AutoParallelText(*job.auto_parallel) << '\n';
  if (!f.quiet) PrintSummary(f, *file, job, plan->global_batch);
  return 0;
}

// --devices, --parallel, --batch and the settings of each parallel mode.
void AddParallelFlags(CLI::App& app, Flags& f) {
  app.add_option("--devices", f.devices, "ranks to compile for (MindSpore's device_num)")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  app.add_option("--parallel", f.par.parallel, "stand_alone, data_parallel, semi_auto_parallel or auto_parallel")
      ->capture_default_str();
  app.add_option("--batch", f.batch,
                 "one data-parallel replica's batch (default: the file's): every input's leading dimension, times the "
                 "data-parallel degree under semi_auto_parallel and --devices under auto_parallel")
      ->check(tools::PositiveInteger());
  app.add_flag("--gradients-mean", f.par.gradients_mean,
               "data_parallel: AllReduce Mean instead of Sum (--gradients-mean=false: Sum, MindSpore's default)");
  app.add_flag("--parameter-broadcast", f.par.parameter_broadcast, "init ends by broadcasting rank 0's parameters");
  app.add_option("--comm-fusion", f.par.comm_fusion,
                 "MindSpore's comm_fusion as JSON, e.g. '{\"allreduce\": {\"mode\": \"size\", \"config\": 32}}'");
  app.add_option("--strategy", f.par.strategy,
                 "semi_auto_parallel: data, model (Megatron, the zoo MLP and ViT), DPxMP (e.g. 2x2) or a strategy "
                 "file (default: the graph file's strategies, MindSpore's default elsewhere)")
      ->check(tools::NonEmpty());
  app.add_option(
         "--strategy-save", f.par.strategy_save,
         "semi_auto_parallel and auto_parallel: write the ops' strategies (auto_parallel: the searched ones) and "
         "the parameters' layouts to FILE (JSON)")
      ->check(tools::NonEmpty());
  app.add_flag("--full-batch", f.par.full_batch,
               "semi_auto_parallel and auto_parallel: every rank reads the whole --batch (MindSpore's full_batch)");
  app.add_option("--search-mode", f.par.search_mode, "auto_parallel: dynamic_programming or sharding_propagation")
      ->capture_default_str();
  app.add_option("--device-memory", f.par.device_memory,
                 "auto_parallel: per-rank limit on the compiled arena, in bytes or with KB, MB, GB, KiB, MiB, GiB: the "
                 "search keeps to it, or the compile is refused naming what is needed "
                 "(MindSpore's device_memory_capacity; default: unlimited)")
      ->check(tools::NonEmpty());
  app.add_option("--calibration", f.par.calibration,
                 "auto_parallel: the cost model's calibration file (default: SINKRT_CALIBRATION, else the built-in "
                 "one; sinkrun calibrate writes one)")
      ->check(tools::NonEmpty());
  app.add_flag("--fully-use-devices", f.par.fully_use_devices,
               "auto_parallel: every MatMul, BatchMatMul and Conv2D splits over all devices (MindSpore's default; "
               "sinkrt's lets a small one repeat)");
}

// The pipeline, the optimizer parallel, precision, recompute, the
// optimizer and the queue.
void AddCompileFlags(CLI::App& app, Flags& f) {
  tools::AddPipelineFlags(app, f.par);
  tools::AddParallelOptimizerFlags(app, f.par.enable_parallel_optimizer, f.par.parallel_optimizer_config);
  app.add_option("--loss-scale-manager", f.loss_scale,
                 "none, fixed[:SCALE[:DROP]] or dynamic[:INIT[:FACTOR[:WINDOW]]]: loss scaling inside the sink "
                 "(MindSpore's FixedLossScaleManager(128, True) and DynamicLossScaleManager(2**24, 2, 2000) are "
                 "fixed and dynamic; an overflowed step skips its update; docs/guide/loss_scale.md)")
      ->capture_default_str();
  app.add_option(
         "--amp-level", f.amp_level,
         "O0|O1|O2|O3: mixed precision (MindSpore's amp_level): O1 runs MatMul, BatchMatMul, Conv2D and Relu in "
         "bf16, O2 the whole network but LayerNorm, Softmax and the loss, O3 all but the loss; parameters, "
         "gradients and the optimizer stay f32 (docs/guide/amp.md)")
      ->capture_default_str()
      ->check(tools::NonEmpty());
  app.add_option("--recompute", f.recompute,
                 "all|LAYER,...: re-run these layers' forward in the backward pass instead of keeping their "
                 "activations (MindSpore's cell.recompute(); all: every top-level layer; docs/guide/recompute.md)")
      ->check(tools::NonEmptyList());
  app.add_flag("--explain", f.explain,
               "auto_parallel: print the search's choice for every op, its cost and the best rejected alternative");
  app.add_option("--seed", f.seed, "added to every random initialiser's seed")->capture_default_str();
  app.add_option("--optimizer", f.optimizer,
                 "sgd, momentum, adam, adamw (AdamWeightDecay) or lamb (default: the file's optimizer)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay of --optimizer, >= 0")->capture_default_str();
  app.add_option("--no-decay", f.no_decay,
                 "comma-separated name filters of the parameters --optimizer does not decay (a group with decay 0)");
  app.add_option("--lr", f.lr, "learning rate of --optimizer")->capture_default_str();
  app.add_option("--momentum", f.momentum, "momentum of --optimizer momentum")->capture_default_str();
  app.add_option("--queue-capacity", f.queue_capacity, "device queue slots (MS_DATASET_SINK_QUEUE)")
      ->check(CLI::Range(1, 128))
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sinkc: compiles a sinkrt graph file into one task stream per rank (rank_K.tstream) and a manifest"};
  sinkrt::tools::AddVersionFlag(app, sinkrt::host::HostVersionText("sinkc"));
  Flags f;
  app.add_option("graph", f.graph, "graph file (binary .sgraph, or JSON against schemas/graph.fbs)")->required();
  app.add_option("-o,--out", f.out, "output directory (created if missing)")->required();
  AddParallelFlags(app, f);
  AddCompileFlags(app, f);
  app.add_flag("-q,--quiet", f.quiet, "print nothing on success");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tools::UsageExit(app, e);
  }
  return Run(f, app);
}
