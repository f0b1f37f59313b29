"""sinkrt against PyTorch on the same network, the same data and the same steps.

Run through bench/compare_pytorch, which installs PyTorch and builds
sinkrun. --model mlp (784-512-256-10, SGD momentum 0.9, lr 0.01) or vit
(issue 15's ViT, Adam lr 1e-3). Three parts:

  first steps  sinkrun --sink-size 1 and PyTorch train 20 steps at batch 64
               from the same parameters on the same batches; their losses
               must agree to float rounding, or nothing below is like for like.
  throughput   samples/s for every batch size x thread count n: sinkrt in
               sink mode (and, over whole passes, non-sink mode), PyTorch
               as-is (n torch threads, this environment) and "PyTorch best"
               (the fastest of the configurations that pytorch_ref/torch_env.py
               defines; --best limits the search), each run confined to n
               cores (sched_setaffinity), each over --epochs epochs of
               --epoch-steps steps (0: whole passes); the figure is the median
               over epochs 2..E (epoch 1 warms up), then the median over
               --rounds rounds, interleaved. With --roofline-bench, every
               round also measures one core's peak f32 GEMM rate, and the
               MLP's rows show the roofline of n cores and the fraction of
               it reached (pytorch_ref/roofline.py).
  accuracy     test accuracy and loss after --accuracy-epochs epochs at batch
               64, sinkrt (sink mode) vs PyTorch, all test images, for each
               of --accuracy-seeds, with both per-epoch curves.

PyTorch starts from bit-identical parameters and sees the batches in the same
order as sinkrt: pytorch_ref/ recomputes sinkrt's initialisers (SplitMix64
counter stream; --self-check compares them with sinkrun's bit for bit) and
its Shuffle permutation (xoshiro256**, Lemire, Fisher-Yates). The update:
MindSpore's Momentum is torch.optim.SGD(momentum); MindSpore's Adam places
eps differently from torch.optim.Adam, so the first steps and the accuracy
runs use pytorch_ref.models.SinkrtAdam (sinkrt's formula) and the throughput
runs torch.optim.Adam (what a PyTorch user runs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from pytorch_ref import roofline, self_check, torch_env
from pytorch_ref.recipes import RECIPES
from pytorch_ref.sinkrun import MissingModel, has_model, pinned, run_sinkrun

FIRST_STEPS = 20


def spawn_torch(args, config, batch, cores, epochs, seed, first_steps=0, epoch_steps=0, impl="torch",
                eval_each_epoch=False):
    """One PyTorch run in a child process under `config` (torch_env.Config), on `cores` cores."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", args.model, "--data", args.data,
           "--batch", str(batch), "--torch-threads", str(config.torch_threads), "--epochs", str(epochs),
           "--epoch-steps", str(epoch_steps), "--seed", str(seed), "--optimizer-impl", impl]
    if first_steps:
        cmd += ["--first-steps", str(first_steps)]
    if eval_each_epoch:
        cmd.append("--eval-each-epoch")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=config.env(os.environ), preexec_fn=pinned(cores))
    if proc.returncode != 0:
        sys.exit(f"compare_pytorch: PyTorch run failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def steady(rates):
    """Median samples/s over epochs 2..E (epoch 1 warms caches, allocators and JIT)."""
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def fmt_k(v):
    return f"{v / 1000:.2f}k" if v < 10000 else f"{v / 1000:.1f}k"


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def first_steps_check(args, results):
    """Same parameters, batches and update: the first steps' losses agree to
    float rounding, or the comparison below is not like for like."""
    n, recipe = FIRST_STEPS, RECIPES[args.model]
    as_is = torch_env.Config("as-is", 1)
    theirs = spawn_torch(args, as_is, 64, 1, 1, args.seed, first_steps=n, impl="sinkrt")
    print(f"PyTorch {theirs['torch_version']} (BLAS: {', '.join(theirs['blas']) or 'none loaded'}); "
          f"{recipe['describe']}; data {args.data}; seed {args.seed}; this environment has OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')} (sinkrun always waits passively)")
    if recipe["optimizer"] == "adam":
        print("optimizer: the first steps and the accuracy runs use sinkrt's Adam in PyTorch (MindSpore's "
              "eps placement, pytorch_ref.models.SinkrtAdam); the throughput runs use torch.optim.Adam")
    if args.pytorch_only:
        return
    ours = run_sinkrun(args.sinkrun, args.model, args.data, 64, 1, n, True, args.seed, ("--sink-size", "1"))["losses"]
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs["step_losses"]))
    print(f"losses of the first {n} steps (same parameters, same batches): step 1 sinkrt {ours[0]:.6f}, "
          f"PyTorch {theirs['step_losses'][0]:.6f}; step {n} sinkrt {ours[-1]:.6f}, PyTorch "
          f"{theirs['step_losses'][-1]:.6f}; largest relative difference {worst:.1e}")
    results["first_steps"] = {"sinkrt": ours, "pytorch": theirs["step_losses"], "max_relative_difference": worst}
    if worst > recipe["first_steps_tolerance"]:
        print(f"warning: the first steps differ by more than {recipe['first_steps_tolerance']:.0e}: "
              "initialisation, data order or update do not match", file=sys.stderr)


def throughput(args, batches, threads, results):
    sinkrt = not args.pytorch_only
    nosink = sinkrt and args.epoch_steps == 0  # sinkrun's --sink-size needs sink mode
    sink_extra = ("--sink-size", str(args.epoch_steps)) if args.epoch_steps else ()
    rows = []
    for b in batches:
        for t in threads:
            configs = torch_env.candidates(t, args.best)
            base = dict(os.environ)
            runs = {"sink": [], "nosink": [], **{i: [] for i in range(len(configs))}}
            peaks = []
            for _ in range(args.rounds):
                if args.roofline_bench:
                    peaks.append(roofline.peak_gflops_one_core(args.roofline_bench))
                if sinkrt:
                    runs["sink"].append(steady(run_sinkrun(args.sinkrun, args.model, args.data, b, t, args.epochs,
                                                           True, args.seed, sink_extra)["epoch_samples_per_s"]))
                if nosink:
                    runs["nosink"].append(steady(run_sinkrun(args.sinkrun, args.model, args.data, b, t, args.epochs,
                                                             False, args.seed)["epoch_samples_per_s"]))
                for i, c in enumerate(configs):
                    runs[i].append(steady(spawn_torch(args, c, b, t, args.epochs, args.seed,
                                                      epoch_steps=args.epoch_steps)["epoch_samples_per_s"]))
            med = {k: statistics.median(v) for k, v in runs.items() if v}
            best = max(range(len(configs)), key=lambda i: med[i])
            win = configs[best]
            row = {"batch": b, "threads": t, "torch": med[0], "torch_best": med[best],
                   "best_config": win.describe(base), "best_torch_threads": win.torch_threads,
                   "best_env_set": win.set, "best_env_unset": list(win.unset),
                   "candidates": [{"config": c.describe(base), "torch_threads": c.torch_threads,
                                   "samples_per_s": med[i], "rounds": runs[i]} for i, c in enumerate(configs)]}
            for k in ("sink", "nosink"):
                if k in med:
                    row[k], row[k + "_rounds"] = med[k], runs[k]
            if peaks:
                row["peak_gflops_1core"], row["peak_gflops_rounds"] = statistics.median(peaks), peaks
                row["roofline"] = roofline.samples_per_s(args.model, row["peak_gflops_1core"], t)
            rows.append(row)
            shown = [(k, runs[k]) for k in ("sink", "nosink") if runs[k]] + [("PyTorch as-is", runs[0])]
            print(f"  batch {b}, {t} thread(s): " + ", ".join(
                f"{k} {fmt_k(statistics.median(v))} ({' '.join(fmt_k(x) for x in v)})" for k, v in shown) +
                f"; PyTorch best {fmt_k(med[best])} of {len(configs)} configurations: {configs[best].describe(base)}",
                flush=True)
            for i, c in enumerate(configs):
                print(f"      {fmt_k(med[i]):>7}  {c.describe(base)}")
    results["throughput"] = rows
    steps = f"{args.epoch_steps} steps" if args.epoch_steps else "whole passes"
    print(f"\nsamples/s, {RECIPES[args.model]['describe']}; epochs of {steps}, median of epochs 2..{args.epochs}"
          f" ({args.rounds} round(s)); PyTorch best: --best {args.best}\n")
    has_roof = any(r.get("roofline") for r in rows)
    if has_roof:
        print(f"roofline: n cores x one core's peak f32 GEMM rate (a 1024^3 oneDNN matmul on one thread, measured "
              f"in every round beside the runs) over {roofline.FLOPS_PER_SAMPLE[args.model] / 1e6:.2f} MFLOP per "
              f"sample\n")
    head = ["batch", "threads"] + (["sinkrt sink"] if sinkrt else []) + (["sinkrt non-sink"] if nosink else [])
    head += ["PyTorch as-is", "PyTorch best"]
    if sinkrt:
        head += ["sink / best"] + (["non-sink / best"] if nosink else []) + ["sink / as-is"]
    if has_roof:
        head += ["roofline"] + (["sink / roofline"] if sinkrt else []) + ["best / roofline"]
    head += ["best configuration"]
    lines = []
    for r in rows:
        line = [str(r["batch"]), str(r["threads"])]
        line += [fmt_k(r[k]) for k in ("sink", "nosink") if k in r]
        line += [fmt_k(r["torch"]), fmt_k(r["torch_best"])]
        if sinkrt:
            line += [f"{r[k] / r['torch_best']:.2f}x" for k in ("sink", "nosink") if k in r]
            line += [f"{r['sink'] / r['torch']:.2f}x"]
        if has_roof:
            roof = r.get("roofline")
            line += [fmt_k(roof) if roof else "-"]
            line += [f"{r[k] / roof:.0%}" if roof else "-" for k in (["sink"] if sinkrt else []) + ["torch_best"]]
        line += [r["best_config"]]
        lines.append(line)
    table(head, lines)


def accuracy(args, threads, results):
    e, t = args.accuracy_epochs, threads[-1]
    seeds = [int(x) for x in args.accuracy_seeds.split(",")] if args.accuracy_seeds else [args.seed]
    as_is = torch_env.Config("as-is", t)
    sinkrt = not args.pytorch_only
    runs = []
    for seed in seeds:
        r = {"seed": seed}
        if sinkrt:
            r["sinkrt"] = run_sinkrun(args.sinkrun, args.model, args.data, 64, t, e, True, seed)
            if args.accuracy_curve:
                # sinkrun evaluates once, at the end: the same run cut after k
                # epochs (deterministic, so its first k epochs are these) gives epoch k.
                r["sinkrt"]["epoch_test_accuracy"] = [
                    run_sinkrun(args.sinkrun, args.model, args.data, 64, t, k, True, seed)["test_accuracy"]
                    for k in range(1, e)] + [r["sinkrt"]["test_accuracy"]]
        r["pytorch"] = spawn_torch(args, as_is, 64, t, e, seed, impl="sinkrt", eval_each_epoch=True)
        runs.append(r)
    results["accuracy"] = {"epochs": e, "batch": 64, "threads": t, "runs": runs}
    who = (["sinkrt"] if sinkrt else []) + ["pytorch"]
    names = {"sinkrt": "sinkrt", "pytorch": "PyTorch"}
    test_samples = runs[0]["sinkrt"]["end"]["test_samples"] if sinkrt else runs[0]["pytorch"]["test_samples"]
    print(f"\ntest accuracy after {e} epoch{'s' if e > 1 else ''}, batch 64, {RECIPES[args.model]['describe']}, {t} thread(s) "
          f"({args.data}, all {test_samples} test samples; PyTorch with {runs[0]['pytorch']['optimizer']})\n")
    head = ["seed"] + [f"{names[w]} accuracy" for w in who] + [f"{names[w]} loss" for w in who]
    lines = [[str(r["seed"])] + [f"{r[w]['test_accuracy']:.4f}" for w in who] + [f"{r[w]['test_loss']:.4f}" for w in who]
             for r in runs]

    def mean(w, key):
        return statistics.mean(r[w][key] for r in runs)
    if len(runs) > 1:
        lines.append(["mean"] + [f"{mean(w, 'test_accuracy'):.4f}" for w in who] +
                     [f"{mean(w, 'test_loss'):.4f}" for w in who])
    table(head, lines)

    print(f"\nper-epoch curves (training loss: each epoch's last step, as sinkrun's report has it; test accuracy"
          f"{'' if args.accuracy_curve or not sinkrt else ' of PyTorch only (sinkrt: --accuracy-curve)'})\n")
    head = ["seed", "epoch"] + [f"{names[w]} loss" for w in who] + [f"{names[w]} test acc" for w in who]
    lines = []
    for r in runs:
        for k in range(e):
            acc = [r[w].get("epoch_test_accuracy", [])[k:k + 1] for w in who]
            lines.append([str(r["seed"]), str(k + 1)] + [f"{r[w]['losses'][k]:.4f}" for w in who] +
                         [f"{a[0]:.4f}" if a else "–" for a in acc])
    table(head, lines)
    if sinkrt:
        gap = mean("sinkrt", "test_accuracy") - mean("pytorch", "test_accuracy")
        met = gap >= -0.005
        results["accuracy"]["mean_gap"] = gap
        bar = f" (issue 15's bar: >= -0.005: {'met' if met else 'NOT met'})" if args.model == "vit" else ""
        print(f"\nsinkrt - PyTorch, mean test accuracy over seeds {','.join(map(str, seeds))}: {gap:+.4f}{bar}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(RECIPES), default="mlp")
    p.add_argument("--sinkrun", default="build/tools/sinkrun")
    p.add_argument("--data", default="fashion-mnist", help="fashion-mnist[:DIR] or synthetic[:N]")
    p.add_argument("--batches", default="64,256")
    p.add_argument("--threads", default=f"1,{len(os.sched_getaffinity(0))}",
                   help="thread counts, comma separated (default: 1 and every core this process may use); "
                        "a run with n threads is confined to n cores")
    p.add_argument("--epochs", type=int, default=3, help="epochs per throughput run (the first is not timed)")
    p.add_argument("--epoch-steps", type=int,
                   help="steps per throughput epoch, 0 for whole passes (default: mlp 0, vit 150); "
                        "sinkrt's non-sink column needs whole passes")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds per configuration; the median counts")
    p.add_argument("--best", choices=("full", "quick", "off"), default="full",
                   help="how many PyTorch configurations 'PyTorch best' tries (pytorch_ref/torch_env.py): full, "
                        "quick (as-is, DESIGN's tuned, every knob on) or off (as-is only)")
    p.add_argument("--tuned", action="store_const", const="quick", dest="best", help="the same as --best quick")
    p.add_argument("--accuracy-epochs", type=int, help="default: mlp 5, vit 3")
    p.add_argument("--accuracy-seeds", help="seeds for the accuracy runs, comma separated (default: --seed)")
    p.add_argument("--accuracy-curve", action="store_true",
                   help="also sinkrt's test accuracy after every epoch (a sinkrun run per epoch count)")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--pytorch-only", action="store_true",
                   help="run the PyTorch side alone (no sinkrun: no first-steps check, no sinkrt columns)")
    p.add_argument("--self-check", action="store_true",
                   help="only check the numpy initialisers against sinkrun's, bit for bit, and exit")
    p.add_argument("--roofline-bench",
                   help="train_step_bench, to measure one core's peak f32 GEMM rate in every round and print the "
                        "MLP's roofline and each figure's fraction of it (bench/compare_pytorch passes it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write every figure to this file")
    # Internal: one PyTorch run in a child process.
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--torch-threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--first-steps", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--optimizer-impl", choices=("sinkrt", "torch"), default="torch", help=argparse.SUPPRESS)
    p.add_argument("--eval-each-epoch", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    recipe = RECIPES[args.model]
    if args.epoch_steps is None:
        args.epoch_steps = recipe["epoch_steps"]
    if args.accuracy_epochs is None:
        args.accuracy_epochs = recipe["accuracy_epochs"]
    if args.torch_worker:
        from pytorch_ref import torch_run
        args.threads = args.torch_threads
        return torch_run.worker(args)

    needs_sinkrun = args.self_check or not args.pytorch_only
    if needs_sinkrun and not os.access(args.sinkrun, os.X_OK):
        sys.exit(f"compare_pytorch: no sinkrun at {args.sinkrun} (build it, or pass --sinkrun)")
    if args.self_check:
        ok = self_check.run(args.sinkrun, args.seed, sorted(RECIPES), lambda m: has_model(args.sinkrun, m))
        sys.exit(0 if ok else 1)
    if not args.pytorch_only and not has_model(args.sinkrun, args.model):
        sys.exit(f"compare_pytorch: {args.sinkrun} has no --model {args.model} yet (sinkrun train --model "
                 f"{args.model} is refused); build a sinkrun that has it, or pass --pytorch-only to run the "
                 "PyTorch side alone")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    results = {"model": args.model, "data": args.data, "best_search": args.best, "first_steps": None,
               "throughput": [], "accuracy": None}
    try:
        first_steps_check(args, results)
        if not args.skip_throughput:
            throughput(args, batches, threads, results)
        if not args.skip_accuracy:
            accuracy(args, threads, results)
    except MissingModel as e:
        sys.exit(f"compare_pytorch: {e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
