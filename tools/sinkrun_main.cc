// sinkrun: trains a built-in network end to end on one device, and starts
// local sinkd daemons.
//
//   sinkrun train --model mlp|lenet|vit | --graph FILE | --streams DIR
//                 [--data fashion-mnist[:DIR]|synthetic[:N]]
//                 [--epochs 5] [--batch 64] [--optimizer sgd|momentum|adam|adamw|lamb]
//                 [--weight-decay 0] [--no-decay bias,beta,gamma,norm]
//                 [--lr 0.01] [--momentum 0.9] [--seed 1]
//                 [--sink-size -1 | --no-sink] [--threads N] [--report FILE]
//                 [--devices N [--sinkd PATH] [--no-bind] | --rank-table FILE] [--token T]
//                 [--parallel stand_alone|data_parallel|semi_auto_parallel|auto_parallel]
//                 [--gradients-mean true|false] [--parameter-broadcast] [--comm-fusion JSON]
//                 [--strategy data|model|DPxMP|FILE] [--strategy-save FILE] [--full-batch]
//                 [--search-mode dynamic_programming|sharding_propagation]
//                 [--device-memory BYTES] [--calibration FILE]
//                 [--save-checkpoint FILE] [--checkpoint-dir DIR [--checkpoint-epochs K]]
//                 [--resume CHECKPOINT]
//                 [--profile DIR [--profile-steps A:B] [--profile-every K] [--profile-keep N]]
//   sinkrun launch -n N [--base-port P] [--rank-table-out FILE] [--token T]
//                  [--sinkd PATH] [--threads K] [--no-bind] [--quiet]
//   sinkrun launch -n N [--local-worker-num L --node-rank K] [--master-addr A]
//                  [--master-port P] [--log-dir DIR] [--token T] [--no-bind] -- COMMAND...
//   sinkrun calibrate [--out calibration.json] [--threads 1] [--grid 16,64,256,1024]
//                     [--no-collectives]
//   sinkrun profile DIR [--json]
//   sinkrun --version
//
// train runs on an in-process device by default; --devices N starts N sinkd
// daemons for the run and trains through them, --rank-table trains on
// daemons already running (anywhere); without either, MindSpore's
// RANK_TABLE_FILE names that table when it is set. The device code is the same either
// way, so are the numbers. More than one device needs --parallel
// data_parallel or semi_auto_parallel (MindSpore's rule); --batch is then
// one data-parallel replica's, as in MindSpore: the global batch is N x
// batch under data_parallel, and batch x the strategy's data-parallel
// degree under semi_auto_parallel (data: N, model: 1, DPxMP: DP; with
// --full-batch every rank reads the whole batch), and batch x N under
// auto_parallel (data_parallel's global batch: the search is compared like
// for like with --strategy data; docs/guide/auto_parallel.md). An auto_parallel
// run prints its search (mode, predicted step time and memory per rank,
// the calibration file) and, after training, the predicted step time next
// to the measured one. launch starts N daemons on
// this machine, writes their rank table and keeps them until SIGINT or
// SIGTERM (or one of them dies). calibrate measures this machine for
// AUTO_PARALLEL's cost model and writes a calibration file
// (docs/guide/auto_parallel.md). --profile records every sink (docs/guide/profiler.md):
// a Chrome-trace timeline, a summary and a picture in DIR; profile prints
// the summary of such a directory again.
//
// The network is a built-in one (--model), a graph file (--graph: its
// loss, its optimizer unless --optimizer is given, its batch unless --batch
// is), or streams compiled beforehand by sinkc (--streams DIR: no graph and
// no compiler; the parallel plan, optimizer and batch are the streams', and
// a job that contradicts them — devices, batch, the data's columns — is
// refused before anything runs). The image pipeline follows the network's
// "image" input: [784] per sample for an MLP, [1, 28, 28] for a CNN.
//
// What MindSpore's
//   model.train(epochs, train_ds, [LossMonitor(), TimeMonitor()],
//               dataset_sink_mode=True, sink_size=-1)
//   model.eval(test_ds)
// does, with the same printed lines. The pipeline is MindSpore's LeNet/MLP
// recipe: Rescale(1/255), Reshape([784]) for the MLP or HWC2CHW for LeNet,
// labels to int32, Shuffle(seed) (a new permutation every pass),
// Batch(batch, drop_remainder=True); the test split is evaluated whole.
//
// Every flag, the data and the report file are checked before anything is
// compiled, so a mistake costs no training time: exit 2 for a bad command
// line, 1 for anything that fails after it (missing data included).
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli_validators.h"
#include "cli/tool_version.h"
#include "parallel_flags.h"
#include "sinkrt/device/openmp_policy.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrun.h"

namespace {

using namespace sinkrt;

// train's network, data and optimizer flags.
void AddTrainJobFlags(CLI::App* train, tools::TrainFlags& f) {
  train
      ->add_option("--model", f.model,
                   "network: mlp (784-512-256-10), lenet, or vit (a small Vision Transformer; its defaults: "
                   "--optimizer adam --lr 0.001)")
      ->check(CLI::IsMember({"mlp", "lenet", "vit"}))
      ->capture_default_str();
  train->add_option("--graph", f.graph,
                    "train a graph file (binary or JSON; its loss and optimizer) instead of --model");
  train->add_option("--streams", f.streams,
                    "run the task streams sinkc compiled into DIR: no graph, no compile; the plan, optimizer and "
                    "batch are the streams'");
  train->add_option("--save-checkpoint", f.save_checkpoint,
                    "after training, write the parameters and optimizer state to FILE");
  train->add_option("--checkpoint-dir", f.checkpoint_dir,
                    "while training, write DIR/CKP-EPOCH_STEP.ckpt every --checkpoint-epochs epochs (the newest 5 "
                    "kept; MindSpore's ModelCheckpoint)");
  train->add_option("--checkpoint-epochs", f.checkpoint_epochs, "epochs between --checkpoint-dir checkpoints")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  train->add_option("--resume", f.resume,
                    "start from this checkpoint: its parameters and optimizer state, and its epoch as the initial "
                    "epoch (the data continues where it stood); --epochs is the total, as MindSpore's epoch with "
                    "initial_epoch. Any device count, at the same global batch");
  train
      ->add_option("--data", f.data,
                   "fashion-mnist[:DIR] (IDX files, raw or .gz; default DIR " + std::string(tools::kFashionMnistDir) +
                       ") or synthetic[:N] (a generated stand-in, N training samples, default 60000)")
      ->default_val("fashion-mnist");
  train->add_option("--epochs", f.epochs, "epochs (sinks in sink mode)")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  train->add_option("--batch", f.batch, "batch size")->check(tools::PositiveInteger())->capture_default_str();
  train
      ->add_option("--optimizer", f.optimizer,
                   "sgd, momentum, adam, adamw (MindSpore's AdamWeightDecay) or lamb (docs/guide/optimizers.md)")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw", "lamb"}))
      ->capture_default_str();
  train
      ->add_option("--weight-decay", f.weight_decay,
                   "weight decay, >= 0 (sgd, momentum, adam: added to the gradient; adamw, lamb: to the update); "
                   "without --no-decay, names containing beta or gamma get none (MindSpore's default)")
      ->capture_default_str();
  train
      ->add_option("--clip-grad-norm", f.clip_grad_norm,
                   "clip the gradients by their global norm before the update (MindSpore's clip_by_global_norm, "
                   "computed on the device; docs/guide/clipping.md); 0: no clipping")
      ->capture_default_str();
  train->add_option("--no-decay", f.no_decay,
                    "comma-separated name filters of parameters that get no weight decay (a group with decay 0), "
                    "e.g. bias,beta,gamma,norm");
  train->add_option("--lr", f.lr, "learning rate, > 0")->capture_default_str();
  train->add_option("--lr-schedule", f.lr_schedule,
                    "learning-rate schedule computed on the device from the optimizer step, --lr its rate: "
                    "constant, warmup:steps=N, cosine[:min=X,warmup=W,decay=N], poly:end=X,power=P[,decay=N,update=1], "
                    "exp|natural_exp|inverse:rate=R,decay=N[,stair=1], piecewise:milestones=A/B,rates=X/Y "
                    "(docs/guide/lr_schedules.md)");
  train->add_option("--momentum", f.momentum, "momentum of --optimizer momentum, in [0, 1)")->capture_default_str();
  train->add_option("--seed", f.seed, "parameter initialisation and shuffle seed")
      ->check(tools::UnsignedInteger())
      ->capture_default_str();
  train
      ->add_option("--dropout", f.dropout,
                   "--model vit: drop probability p in [0, 1) of its dropout layers (nn.Dropout(p); masks from "
                   "--seed, the same for any device count)")
      ->capture_default_str();
  train->add_option("--sink-size", f.sink_size, "steps per sink epoch; -1: a whole pass (MindSpore's sink_size)")
      ->capture_default_str();
  train->add_flag("--no-sink", f.no_sink, "run every step as its own request (dataset_sink_mode=False)");
  train->add_option("--threads", f.threads, "device kernel threads (default: every core this process may use)")
      ->check(tools::PositiveInteger());
  train->add_flag("--no-bind", f.no_bind,
                  "with --devices N > 1: leave the daemons unbound (by default each runs on its own share of the "
                  "cores, as mpirun --bind-to core)");
  train->add_option("--report", f.report, "write one JSON object per epoch and an end record to FILE");
}

// train's devices: in-process, started daemons, or a rank table.
void AddTrainDeviceFlags(CLI::App* train, tools::TrainFlags& f) {
  train
      ->add_option("--devices", f.devices,
                   "start this many sinkd daemons for the run and train on them (more than one needs "
                   "--parallel data_parallel); default: an in-process device")
      ->check(tools::PositiveInteger());
  train->add_option("--rank-table", f.rank_table,
                    "train on the running sinkd daemons this rank table names (default: RANK_TABLE_FILE, unless "
                    "--devices is given)");
}

// train's parallel mode and its settings.
void AddTrainParallelFlags(CLI::App* train, tools::TrainFlags& f) {
  train
      ->add_option("--parallel", f.par.parallel,
                   "stand_alone (one device), data_parallel (one replica per device, gradients AllReduced "
                   "on the devices; --batch is per rank), semi_auto_parallel (the model sharded by --strategy; "
                   "--batch is per data-parallel replica) or auto_parallel (the strategies searched; the global "
                   "batch is --batch x --devices)")
      ->capture_default_str();
  train
      ->add_option("--gradients-mean", f.par.gradients_mean,
                   "data_parallel: average the gradients over the ranks (true, as DDP) or sum them (false, "
                   "MindSpore's default)")
      ->capture_default_str();
  train->add_flag("--parameter-broadcast", f.par.parameter_broadcast,
                  "data_parallel: broadcast rank 0's initial parameters to every rank");
  train->add_option("--comm-fusion", f.par.comm_fusion,
                    "data_parallel: MindSpore's comm_fusion as JSON, e.g. "
                    "'{\"allreduce\": {\"mode\": \"size\", \"config\": 32}}'");
  train
      ->add_option("--strategy", f.par.strategy,
                   "semi_auto_parallel: data, model (Megatron: the MLP and the ViT), DPxMP (e.g. 2x2) or a strategy "
                   "file (default: the graph's strategies, MindSpore's default elsewhere)")
      ->check(tools::NonEmpty());
  train
      ->add_option("--strategy-save", f.par.strategy_save,
                   "semi_auto_parallel and auto_parallel: write the ops' strategies (auto_parallel: the searched ones) "
                   "and the parameters' layouts to FILE (JSON)")
      ->check(tools::NonEmpty());
  train->add_flag("--full-batch", f.par.full_batch,
                  "semi_auto_parallel and auto_parallel: every rank reads the whole --batch (MindSpore's full_batch)");
  train->add_option("--search-mode", f.par.search_mode, "auto_parallel: dynamic_programming or sharding_propagation")
      ->capture_default_str();
  train
      ->add_option(
          "--device-memory", f.par.device_memory,
          "auto_parallel: per-rank limit on the compiled arena, in bytes or with KB, MB, GB, KiB, MiB, GiB: the "
          "search keeps to it, or the compile is refused naming what is needed "
          "(MindSpore's device_memory_capacity; default: unlimited)")
      ->check(tools::NonEmpty());
  train
      ->add_option("--calibration", f.par.calibration,
                   "auto_parallel: the cost model's calibration file (default: SINKRT_CALIBRATION, else the "
                   "built-in one; sinkrun calibrate writes one)")
      ->check(tools::NonEmpty());
  train->add_flag("--fully-use-devices", f.par.fully_use_devices,
                  "auto_parallel: every MatMul, BatchMatMul and Conv2D splits over all devices (MindSpore's default; "
                  "sinkrt's lets a small one repeat)");
  train
      ->add_option("--pipeline-stages", f.par.pipeline_stages,
                   "data_parallel or semi_auto_parallel: cut the network into S pipeline stages of devices/S ranks "
                   "each (MindSpore's pipeline_stages; docs/guide/pipeline.md); under semi_auto_parallel --strategy "
                   "is for devices/S ranks and every rank reads the whole batch")
      ->check(tools::PositiveInteger());
  train
      ->add_option("--micro-size", f.par.micro_size,
                   "with --pipeline-stages: micro-batches per batch (PipelineCell's micro_size; at least the stages, "
                   "dividing --batch)")
      ->check(tools::PositiveInteger());
  train->add_option("--pipeline-scheduler", f.par.pipeline_scheduler,
                    "with --pipeline-stages: 1f1b (default) or gpipe (MindSpore's pipeline_config)");
  train->add_option("--stage-of", f.par.stage_of,
                    "with --pipeline-stages: LAYER=k,... puts the ops in name scope LAYER in stage k "
                    "(cell.pipeline_stage); default: contiguous stages of about equal estimated cost");
  train
      ->add_option("--grad-accumulation", f.par.grad_accumulation,
                   "K: one optimizer step is K batches of --batch, their gradients summed on the device before one "
                   "reduction and one update (MindSpore's grad_accumulation_step; stand_alone and data_parallel; "
                   "steps and --sink-size count optimizer steps; docs/guide/grad_accumulation.md)")
      ->check(tools::PositiveInteger());
  tools::AddParallelOptimizerFlags(*train, f.par.enable_parallel_optimizer, f.par.parallel_optimizer_config);
  train->add_option("--loss-scale-manager", f.loss_scale,
                    "none, fixed[:SCALE[:DROP]] or dynamic[:INIT[:FACTOR[:WINDOW]]]: loss scaling inside the sink "
                    "(MindSpore's FixedLossScaleManager(128, True) and DynamicLossScaleManager(2**24, 2, 2000) are "
                    "fixed and dynamic; an overflowed step skips its update; docs/guide/loss_scale.md)");
  train
      ->add_option(
          "--amp-level", f.amp_level,
          "O0|O1|O2|O3: mixed precision (MindSpore's amp_level): O1 runs MatMul, BatchMatMul, Conv2D and Relu in "
          "bf16, O2 the whole network but LayerNorm, Softmax and the loss, O3 all but the loss; parameters, "
          "gradients and the optimizer stay f32 (docs/guide/amp.md)")
      ->check(tools::NonEmpty());
  train->add_flag("--sync-bn", f.sync_bn,
                  "every BatchNorm of the network is SyncBatchNorm: under data_parallel (and semi_auto_parallel's "
                  "batch splits) it normalises with the statistics of the whole global batch, AllReduced inside the "
                  "sink, so the ranks train as one device would (docs/guide/normalization.md)");
  train
      ->add_option("--recompute", f.recompute,
                   "all|LAYER,...: re-run these layers' forward in the backward pass instead of keeping their "
                   "activations (MindSpore's cell.recompute(); all: every top-level layer; docs/guide/recompute.md)")
      ->check(tools::NonEmptyList());
}

// train's outputs (profile) and the devices' credentials.
void AddTrainOutputFlags(CLI::App* train, tools::TrainFlags& f) {
  train->add_option("--profile", f.profile,
                    "record the run and write its timeline and summary into DIR (docs/guide/profiler.md)");
  train->add_option("--profile-steps", f.profile_steps,
                    "with --profile: record steps A to B only, counted from 1 (A:B)");
  train->add_option("--profile-every", f.profile_every, "with --profile: record every K-th step")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  train->add_option("--profile-keep", f.profile_keep, "with --profile: keep the last N recorded steps")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  train->add_option("--token", f.token, "the daemons' --token");
  train->add_option("--tls-ca", f.tls.ca_file,
                    "TLS to sinkd: the PEM CA its certificate chains to (default: SINKRT_TLS_CA; docs/guide/tls.md)");
  train->add_option("--tls-cert", f.tls.cert_file,
                    "TLS: this client's PEM certificate, for a sinkd with --tls-ca; with --devices also the "
                    "daemons' own (default: SINKRT_TLS_CERT)");
  train->add_option("--tls-key", f.tls.key_file, "TLS: the PEM private key of --tls-cert (default: SINKRT_TLS_KEY)");
  train->add_flag("--tls-plain-peers", f.tls_plain_peers,
                  "with --devices N > 1 and TLS, or one process per rank with TLS: the devices' links to each "
                  "other (the data plane) stay plain TCP, for speed (sinkd --tls-plain-peers, "
                  "SINKRT_TLS_PLAIN_PEERS=1); by default they use TLS as every other connection");
  train->add_option("--sinkd", f.sinkd, "the sinkd binary for --devices (default: SINKRT_SINKD, or beside sinkrun)");
}

CLI::App* AddTrain(CLI::App& app, tools::TrainFlags& f) {
  CLI::App* train = app.add_subcommand("train", "train a network, then evaluate it on the test split");
  // The last of a repeated option wins, as with getopt, so that a wrapper
  // (scripts/demo) can pass defaults and its caller override them.
  train->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddTrainJobFlags(train, f);
  AddTrainDeviceFlags(train, f);
  AddTrainParallelFlags(train, f);
  AddTrainOutputFlags(train, f);
  return train;
}

CLI::App* AddLaunch(CLI::App& app, tools::LaunchFlags& l) {
  CLI::App* launch = app.add_subcommand(
      "launch", "start N sinkd daemons on this machine, write their rank table, stop them on Ctrl-C or SIGTERM");
  launch->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  launch->add_option("-n,--devices", l.devices, "daemons to start, ranks 0..N-1")
      ->required()
      ->check(tools::PositiveInteger());
  launch->add_option("--base-port", l.base_port, "rank i listens on 127.0.0.1:(P + i); 0: any free port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  launch->add_option("--rank-table-out", l.rank_table_out, "where to write the rank table")->capture_default_str();
  launch->add_option("--token", l.token, "a secret every host must send");
  launch->add_option("--tls-cert", l.tls.cert_file,
                     "TLS: the PEM certificate the daemons serve with; with a COMMAND every rank's (SINKRT_TLS_CERT), "
                     "rank 0's master serves with it (docs/guide/tls.md)");
  launch->add_option("--tls-key", l.tls.key_file, "TLS: the PEM private key of --tls-cert");
  launch->add_option("--tls-ca", l.tls.ca_file,
                     "TLS: the PEM CA that signed every certificate; the daemons (and the master) then require "
                     "client certificates");
  launch->add_option("--sinkd", l.sinkd, "the sinkd binary (default: SINKRT_SINKD, or beside sinkrun)");
  launch
      ->add_option("--threads", l.threads,
                   "kernel threads per daemon (default: the cores it is bound to, or every core with --no-bind)")
      ->check(tools::PositiveInteger());
  launch->add_flag("--no-bind", l.no_bind,
                   "leave the daemons unbound (by default each of N > 1 runs on its own share of the cores, as "
                   "mpirun --bind-to core)");
  launch->add_flag("--quiet", l.quiet, "no job log from the daemons");
  launch
      ->add_option("--local-worker-num", l.local_workers,
                   "with a COMMAND: ranks on this host (default: all N); the launcher on host K starts ranks "
                   "K*L..K*L+L-1")
      ->check(tools::PositiveInteger());
  launch->add_option("--node-rank", l.node_rank, "with a COMMAND: this host's index K")
      ->check(tools::NonNegativeInteger());
  launch->add_option("--master-addr", l.master_addr, "with a COMMAND: where rank 0's process listens for the others")
      ->capture_default_str();
  launch
      ->add_option("--master-port", l.master_port,
                   "with a COMMAND: the master's port (default: a free one on one host, 8118 across hosts)")
      ->check(CLI::Range(1, 65535));
  launch->add_option("--log-dir", l.log_dir, "with a COMMAND: each rank's output to DIR/worker_RANK.log");
  launch->add_option("command", l.command,
                     "after --: the program every rank runs (e.g. sinkrun train ...), one process per rank with "
                     "RANK_ID, RANK_SIZE, DEVICE_ID and MS_SCHED_HOST/PORT set");
  return launch;
}

CLI::App* AddCalibrate(CLI::App& app, tools::CalibrateFlags& cal) {
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "measure GEMM, memory and collective speeds for auto_parallel's cost model, write a calibration file");
  calibrate->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  calibrate->add_option("--out", cal.out, "the calibration file to write")->capture_default_str();
  calibrate->add_option("--threads", cal.threads, "kernel threads per rank")
      ->check(tools::PositiveInteger())
      ->capture_default_str();
  calibrate->add_option("--grid", cal.grid, "M, N and K of the GEMM grid, ascending")
      ->delimiter(',')
      ->check(tools::PositiveInteger())  // CLI::PositiveNumber printed its range to DBL_MAX in 300 digits
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  calibrate->add_flag("--no-collectives", cal.no_collectives,
                      "measure compute only, copy the collectives from the built-in default");
  return calibrate;
}

// `sinkrun help [SUBCOMMAND]`, as git and go answer it: the help, where
// CLI11 said "A subcommand is required".
int Help(CLI::App& app, int argc, char** argv) {
  if (argc == 2) {
    std::cout << app.help();
    return 0;
  }
  CLI::App* sub = nullptr;
  try {
    sub = argc == 3 ? app.get_subcommand(argv[2]) : nullptr;
  } catch (const CLI::OptionNotFound&) {
  }
  if (!sub) return tools::Usage("help takes one subcommand: train, launch, calibrate or profile");
  std::cout << sub->help();
  return 0;
}

int RunLaunch(const CLI::App* launch, const tools::LaunchFlags& l, const char* argv0) {
  const bool ranks = !l.command.empty();
  for (const char* daemons_only : {"--base-port", "--rank-table-out", "--sinkd", "--threads", "--quiet"})
    if (ranks && launch->count(daemons_only))
      return tools::Usage(std::string("launch ") + daemons_only + " applies to daemons, not to a COMMAND after --");
  for (const char* ranks_only : {"--local-worker-num", "--node-rank", "--master-addr", "--master-port", "--log-dir"})
    if (!ranks && launch->count(ranks_only))
      return tools::Usage(std::string("launch ") + ranks_only +
                          " applies to a COMMAND after -- (one process per rank)");
  return ranks ? tools::LaunchRanks(l, argv0) : tools::Launch(l, argv0);
}

int RunCalibrate(const tools::CalibrateFlags& cal) {
  if (!std::is_sorted(cal.grid.begin(), cal.grid.end()) ||
      std::adjacent_find(cal.grid.begin(), cal.grid.end()) != cal.grid.end())
    return tools::Usage("calibrate --grid must be strictly ascending");
  return tools::Calibrate(cal);
}

int RunTrain(tools::TrainFlags& f, const CLI::App* train, const char* argv0, tools::Clock::time_point start) {
  // MindSpore's RANK_TABLE_FILE names the devices when the command line
  // does not: an explicit --rank-table or --devices wins over it.
  f.rank_table_source = "--rank-table " + f.rank_table;
  if (f.rank_table.empty() && !train->count("--devices"))
    if (const char* env = std::getenv("RANK_TABLE_FILE"); env && *env) {
      f.rank_table = env;
      f.rank_table_source = std::string("RANK_TABLE_FILE=") + env;
    }
  // The ViT's recipe trains with Adam at 1e-3 (issue 15, as ViT papers do);
  // flags given on the command line still win.
  if (f.model == "vit") {
    if (!train->count("--optimizer")) f.optimizer = "adam";
    if (!train->count("--lr")) f.lr = 1e-3;
  }
  return tools::Train(f, *train, argv0, start);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sinkrt;
  device::EnsurePassiveOpenMp(argv);
  const tools::Clock::time_point start = tools::Clock::now();
  // A daemon that goes away must be an error from send(), not a silent death.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"sinkrun: trains sinkrt's built-in networks end to end, on an in-process device or on sinkd"};
  tools::AddVersionFlag(app, host::HostVersionText("sinkrun"));
  app.require_subcommand(1);
  tools::TrainFlags f;
  CLI::App* train = AddTrain(app, f);
  tools::LaunchFlags l;
  CLI::App* launch = AddLaunch(app, l);
  tools::CalibrateFlags cal;
  CLI::App* calibrate = AddCalibrate(app, cal);
  CLI::App* profile = app.add_subcommand("profile", "print the summary of a profiled run's directory (as sinkprof)");
  std::string profile_dir;
  bool profile_json = false;
  profile->add_option("dir", profile_dir, "what sinkrun train --profile, Profiler::analyse() or sinkd --profile wrote")
      ->required();
  profile->add_flag("--json", profile_json, "print summary.json's JSON instead of the text");
  if (argc >= 2 && std::string(argv[1]) == "help") return Help(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tools::UsageExit(app, e);
  }
  if (launch->parsed()) return RunLaunch(launch, l, argv[0]);
  if (profile->parsed()) return tools::Profile(profile_dir, profile_json);
  if (calibrate->parsed()) return RunCalibrate(cal);
  return RunTrain(f, train, argv[0], start);
}
