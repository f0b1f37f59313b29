"""sinkrt data-parallel training against PyTorch DDP (Gloo) on one machine.

Run through bench/compare_ddp, which installs PyTorch and builds sinkrun and
sinkd. For every N of --devices (default 1, 2, 4):

  sinkrt   sinkrun train --devices N --parallel data_parallel (N = 1:
           --devices 1, stand-alone on one daemon) --batch 64 per rank, sink
           mode, --report: N sinkd daemons with --threads max(1, cores / N)
           each, the gradients AllReduced on the devices inside the sink.
           Figures from the report's epoch records: samples_per_s, and
           comm_hidden = max(0, 1 - comm_wait / comm), the share of the
           AllReduce time the compute stream did not wait for.
  DDP      torch.nn.parallel.DistributedDataParallel with the Gloo backend,
           N processes (torch.multiprocessing.spawn, rendezvous through a
           file), each torch.set_num_threads(max(1, cores // N)), batch 64
           per rank, SGD momentum 0.9 lr 0.01, the same MLP. "as-is": the
           environment this script was started with; "tuned" (--tuned):
           compare_pytorch.py's tuned environment (OMP_WAIT_POLICY=PASSIVE,
           glibc malloc that keeps freed memory, BLAS threads = torch threads).

Both see the same data, the same initial parameters and the same batches:
the DDP ranks start from sinkrt's He-uniform initialiser, each epoch uses
sinkrt's Shuffle permutation of that pass (compare_pytorch.py recomputes
both), and rank r's batch k holds samples k*b*N + j*N + r of it (j < b),
which is Dataset::ShardBelowBatch's sharding and DistributedSampler's
(shuffle=False, i.e. order[r::N]) over the shuffled pass. With gradients
mean (sinkrt's --gradients-mean true, DDP's average) both take the step one
device would take on the global batch of N x 64. The script checks this by
comparing every rank's loss over the first steps.

Each figure is the median of the per-epoch samples/s over epochs 2..E (the
first warms up both), then the median over --rounds interleaved rounds.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# RNGs, data, the PyTorch pass and sinkrun reports, shared with compare_pytorch.
from pytorch_ref.data import FASHION_MNIST_DIR, find, read_idx, synthetic_split  # noqa: E402
from pytorch_ref.mlp_pass import torch_model, train_pass  # noqa: E402
from pytorch_ref.rng import shuffle_permutation  # noqa: E402
from pytorch_ref.sinkrun import read_report  # noqa: E402

LR, MOMENTUM = 0.01, 0.9
FIRST_STEPS = 20
TUNED_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
             "MALLOC_TRIM_THRESHOLD_": str(1 << 32), "MALLOC_TOP_PAD_": str(64 << 20)}


def cores():
    return len(os.sched_getaffinity(0))


def threads_per_rank(n):
    return max(1, cores() // n)


def load_str():
    a, b, c = os.getloadavg()
    return f"{a:.2f}, {b:.2f}, {c:.2f}"


# ---------------------------------------------------------------- data, shared by every DDP run

def train_split(spec):
    """Raw training images (u8 [n, 784]) and labels, as sinkrun reads --data."""
    kind, _, arg = spec.partition(":")
    if kind == "fashion-mnist":
        d = arg or FASHION_MNIST_DIR
        return read_idx(find(d, "train-images-idx3-ubyte")), read_idx(find(d, "train-labels-idx1-ubyte"))
    if kind == "synthetic":
        return synthetic_split(int(arg) if arg else 60000, 0)
    sys.exit(f"compare_ddp: --data {spec}: expected fashion-mnist[:DIR] or synthetic[:N]")


def prepare_data(spec, epochs, seed, directory):
    """Writes the images, labels and each epoch's Shuffle permutation to
    `directory`, computed once for every DDP run. Returns the sample count."""
    images, labels = train_split(spec)
    np.save(os.path.join(directory, "images.npy"), np.ascontiguousarray(images, dtype=np.uint8))
    np.save(os.path.join(directory, "labels.npy"), labels.astype(np.int64))
    orders = np.stack([shuffle_permutation(len(labels), seed, e) for e in range(max(epochs, 1))])
    np.save(os.path.join(directory, "orders.npy"), orders)
    return len(labels)


# ---------------------------------------------------------------- DDP

def ddp_rank(rank, world, threads, data_dir, out_dir, epochs, batch, seed, first_steps):
    """One DDP process: trains `epochs` epochs (or `first_steps` steps) and
    writes its per-epoch times and losses to out_dir/rank{rank}.json."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(out_dir, "rendezvous"), rank=rank,
                            world_size=world)
    # Rescale(1/255) rounds v * (1/255) in double to f32, as sinkrun's pipeline does.
    lut = (np.arange(256, dtype=np.float64) * (1.0 / 255.0)).astype(np.float32)
    x_all = torch.from_numpy(lut[np.load(os.path.join(data_dir, "images.npy"))])
    y_all = torch.from_numpy(np.load(os.path.join(data_dir, "labels.npy")))
    orders = np.load(os.path.join(data_dir, "orders.npy"))
    # Every rank builds the same parameters; DDP also broadcasts rank 0's.
    model = torch.nn.parallel.DistributedDataParallel(torch_model(torch, seed))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    # Shard(N, r) of a pass, then Batch(b, drop_remainder): samples r + jN of
    # the shuffled pass, wrapping around to fill ceil(n / N) (pass_order.cc;
    # DistributedSampler(shuffle=False) pads the same way), in batches of b.
    n = len(y_all)
    pick = (rank + np.arange((n + world - 1) // world) * world) % n
    steps = len(pick) // batch
    times, losses, step_losses = [], [], []
    for epoch in range(epochs):
        mine = torch.from_numpy(orders[epoch % len(orders)][pick])
        dist.barrier()
        t0 = time.perf_counter()
        loss = train_pass(model, opt, loss_fn, x_all, y_all, mine, batch, steps, step_losses, first_steps)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if first_steps:
            break
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "steps": steps, "epoch_s": times, "losses": losses, "step_losses": step_losses,
                   "threads": torch.get_num_threads(), "torch_version": torch.__version__}, f)


def ddp_launch(args):
    """Child process: spawns the `world` ranks and prints their combined result."""
    import torch.multiprocessing as mp

    out_dir = tempfile.mkdtemp(prefix="compare_ddp_")
    try:
        mp.spawn(ddp_rank, nprocs=args.world, join=True,
                 args=(args.world, args.rank_threads, args.data_dir, out_dir, args.epochs, args.batch, args.seed,
                       args.first_steps))
        ranks = []
        for r in range(args.world):
            with open(os.path.join(out_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    steps = ranks[0]["steps"]
    # The ranks step in lock step (every step AllReduces); an epoch lasts
    # as long as its slowest rank.
    epoch_s = [max(r["epoch_s"][e] for r in ranks) for e in range(len(ranks[0]["epoch_s"]))]
    print(json.dumps({
        "world": args.world, "threads": ranks[0]["threads"], "steps": steps, "torch_version": ranks[0]["torch_version"],
        "epoch_samples_per_s": [args.world * steps * args.batch / s for s in epoch_s],
        "rank_losses": [[r["losses"][e] for r in ranks] for e in range(len(epoch_s))],
        "step_rank_losses": [[r["step_losses"][k] for r in ranks] for k in range(len(ranks[0]["step_losses"]))],
        "blas": sorted({line.split()[-1].rsplit("/", 1)[-1] for line in open("/proc/self/maps")
                        if "blas" in line and "/" in line}),
    }))


def run_ddp(args, world, data_dir, epochs, tuned=False, first_steps=0):
    threads = threads_per_rank(world)
    cmd = [sys.executable, os.path.abspath(__file__), "--ddp-launch", "--world", str(world), "--rank-threads",
           str(threads), "--data-dir", data_dir, "--epochs", str(epochs), "--batch", str(args.batch), "--seed",
           str(args.seed), "--first-steps", str(first_steps)]
    env = dict(os.environ)
    if tuned:
        env.update(TUNED_ENV)
        env.update({"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)})
    # Its own process group, so that a timeout ends the spawned ranks too.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        # A PyTorch whose OpenMP team spins (as-is, 2 threads) slows down
        # 10-20x when anything else runs: drop the run rather than the comparison.
        print(f"warning: DDP{' tuned' if tuned else ''} with {world} process(es) did not finish in {args.timeout} s; "
              f"this round has no figure for it", file=sys.stderr, flush=True)
        return None
    if proc.returncode != 0:
        sys.exit(f"compare_ddp: DDP with {world} process(es) failed ({proc.returncode}):\n{stderr}")
    return json.loads(stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- sinkrt

def run_sinkrun(args, devices, epochs, extra=()):
    fd, report = tempfile.mkstemp(suffix=".jsonl", prefix="compare_ddp_")
    os.close(fd)
    cmd = [args.sinkrun, "train", "--model", "mlp", "--data", args.data, "--batch", str(args.batch), "--epochs",
           str(epochs), "--seed", str(args.seed), "--lr", str(LR), "--momentum", str(MOMENTUM), "--optimizer",
           "momentum", "--devices", str(devices), "--report", report, *extra]
    if devices > 1:
        cmd += ["--parallel", "data_parallel", "--gradients-mean", "true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"compare_ddp: {' '.join(cmd)} did not finish in {args.timeout} s")
    if proc.returncode != 0:
        sys.exit(f"compare_ddp: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    epochs_, end = read_report(report)
    timed = epochs_[1:] if len(epochs_) > 1 else epochs_

    def per_step(key):
        return statistics.median(r["device_ms"][key] / r["steps"] for r in timed)

    hidden = [r["comm_hidden"] for r in timed if r.get("comm_hidden") is not None]
    return {"epoch_samples_per_s": [r["samples_per_s"] for r in epochs_],
            "rank_losses": [r["rank_losses"] for r in epochs_],
            "comm_hidden": statistics.median(hidden) if hidden else None,
            "step_ms": {**{k: per_step(k) for k in ("compute", "comm", "comm_wait", "queue_wait", "other")},
                        "epoch": statistics.median(r["epoch_ms"] / r["steps"] for r in timed),
                        "data_wait": statistics.median(r["data_wait_ms"] / r["steps"] for r in timed)},
            "device_threads": end["device_threads"]}


def steady(rates):
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def fmt_k(v):
    return f"{v / 1000:.1f}k"


# ---------------------------------------------------------------- main

def check_first_steps(args, data_dir, world):
    """Same parameters, same batches, same update: every rank's loss over the
    first steps agrees (to float rounding) between the two frameworks."""
    n = FIRST_STEPS
    extra = ("--sink-size", "1")
    ours = run_sinkrun(args, world, n, extra)["rank_losses"]
    theirs = run_ddp(args, world, data_dir, 1, first_steps=n)
    if theirs is None:
        sys.exit("compare_ddp: the first-steps check did not finish; is the machine busy?")
    worst = max(abs(a - b) / abs(b) for s, t in zip(ours, theirs["step_rank_losses"]) for a, b in zip(s, t))
    print(f"first {n} steps on {world} ranks (same parameters, same batches): rank 0's loss at step 1 sinkrt "
          f"{ours[0][0]:.6f}, DDP {theirs['step_rank_losses'][0][0]:.6f}; step {n} sinkrt {ours[-1][0]:.6f}, DDP "
          f"{theirs['step_rank_losses'][-1][0]:.6f}; largest relative difference over every rank {worst:.1e}",
          flush=True)
    per_step = [max(abs(a - b) / abs(b) for a, b in zip(s, t)) for s, t in zip(ours, theirs["step_rank_losses"])]
    print("  largest relative difference per step: " + " ".join(f"{d:.0e}" for d in per_step), flush=True)
    # A mismatch of parameters, sharding or update shows in the first steps;
    # after that the two frameworks' different summation orders (oneDNN vs
    # OpenBLAS GEMMs, our ring vs Gloo's AllReduce) grow as training
    # amplifies them, smoothly, to ~1e-4 by step 20.
    if max(per_step[:3]) > 1e-5:
        print("warning: the first steps differ: initialisation, sharding or update do not match", file=sys.stderr)
    return {"world": world, "sinkrt": ours, "ddp": theirs["step_rank_losses"], "max_relative_difference": worst,
            "torch_version": theirs["torch_version"], "blas": theirs["blas"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sinkrun", default="build/tools/sinkrun")
    p.add_argument("--data", default="synthetic", help="fashion-mnist[:DIR] or synthetic[:N] (default 60000)")
    p.add_argument("--devices", default="1,2,4", help="process / daemon counts, comma separated")
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--epochs", type=int, default=4, help="epochs per run (the first is not timed)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds per N; the median counts")
    p.add_argument("--tuned", action="store_true", help="also time DDP in compare_pytorch.py's tuned environment")
    p.add_argument("--skip-check", action="store_true", help="skip the first-steps loss comparison")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=180, help="seconds per run (a DDP run past it is dropped)")
    p.add_argument("--json", help="also write every figure to this file")
    # Internal: one DDP run (launcher of the spawned ranks).
    p.add_argument("--ddp-launch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rank-threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--first-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ddp_launch:
        return ddp_launch(args)

    start = time.time()
    if not os.access(args.sinkrun, os.X_OK):
        sys.exit(f"compare_ddp: no sinkrun at {args.sinkrun} (build it, or pass --sinkrun)")
    worlds = [int(n) for n in args.devices.split(",")]
    load = os.getloadavg()[0]
    print(f"load average at start: {load_str()} ({cores()} cores)", flush=True)
    if load > 0.5:
        print(f"warning: load average {load:.2f} > 0.5: something else is running; figures will be low and noisy",
              file=sys.stderr, flush=True)

    data_dir = tempfile.mkdtemp(prefix="compare_ddp_data_")
    results = {"data": args.data, "batch": args.batch, "epochs": args.epochs, "rounds": args.rounds, "cores": cores(),
               "load_start": os.getloadavg(), "rows": []}
    try:
        prepare_data(args.data, args.epochs, args.seed, data_dir)
        if not args.skip_check:
            results["first_steps"] = check_first_steps(args, data_dir, max(worlds))
        rows = []
        for n in worlds:
            runs = {"sinkrt": [], "ddp": [], "ddp_tuned": []}
            details = {"sinkrt": [], "ddp": [], "ddp_tuned": []}
            for _ in range(args.rounds):
                s = run_sinkrun(args, n, args.epochs)
                runs["sinkrt"].append(steady(s["epoch_samples_per_s"]))
                details["sinkrt"].append(s)
                for key in ("ddp", "ddp_tuned") if args.tuned else ("ddp",):
                    d = run_ddp(args, n, data_dir, args.epochs, tuned=key == "ddp_tuned")
                    if d:
                        runs[key].append(steady(d["epoch_samples_per_s"]))
                        details[key].append(d)
            # The sinkrt run whose samples/s is the median, for its breakdown.
            ranked = sorted(range(len(runs["sinkrt"])), key=lambda i: runs["sinkrt"][i])
            mid = details["sinkrt"][ranked[(len(ranked) - 1) // 2]]
            row = {"devices": n, "threads": threads_per_rank(n),
                   **{k: statistics.median(v) for k, v in runs.items() if v},
                   "comm_hidden": mid["comm_hidden"], "step_ms": mid["step_ms"],
                   "loss_epoch1": {"sinkrt": statistics.mean(mid["rank_losses"][0]),
                                   "ddp": next((statistics.mean(d["rank_losses"][0])
                                                for d in details["ddp"] + details["ddp_tuned"]), None)}}
            rows.append(row)
            print(f"  N={n} ({row['threads']} thread(s) per rank): " + ", ".join(
                f"{k} {fmt_k(statistics.median(v))} ({' '.join(fmt_k(x) for x in v)})"
                for k, v in runs.items() if v) + f"; load {load_str()}", flush=True)
            results["rows"].append({**row, "rounds": {k: v for k, v in runs.items() if v}})

        best = "DDP best" if args.tuned else "DDP"
        print(f"\nsamples/s, MLP 784-512-256-10, batch {args.batch} per rank, SGD momentum {MOMENTUM}, lr {LR}, "
              f"{args.data}; median of epochs 2..{args.epochs}, {args.rounds} round(s); {cores()} cores\n")
        head = "| N | sinkrt samples/s | sinkrt comm hidden | DDP (Gloo) as-is |"
        rule = "|---|---|---|---|"
        if args.tuned:
            head += " DDP (Gloo) tuned |"
            rule += "---|"
        head += f" sinkrt / {best} |"
        rule += "---|"
        print(head)
        print(rule)
        def cell(r, key):
            return fmt_k(r[key]) if key in r else f"(> {args.timeout} s)"

        for r in rows:
            ddp_best = max(r.get("ddp", 0), r.get("ddp_tuned", 0))
            hidden = "–" if r["comm_hidden"] is None else f"{100 * r['comm_hidden']:.0f} %"
            line = f"| {r['devices']} | {fmt_k(r['sinkrt'])} | {hidden} | {cell(r, 'ddp')} |"
            if args.tuned:
                line += f" {cell(r, 'ddp_tuned')} |"
            line += f" {r['sinkrt'] / ddp_best:.2f}x |" if ddp_best else " – |"
            print(line)
        print("\nsinkrt per step (ms, device clocks averaged over ranks; epoch = wall time per step):")
        for r in rows:
            m = r["step_ms"]
            print(f"  N={r['devices']}: epoch {m['epoch']:.2f} = compute {m['compute']:.2f} + comm wait "
                  f"{m['comm_wait']:.2f} + queue wait {m['queue_wait']:.2f} + other {m['other']:.2f}; "
                  f"AllReduce (comm stream) {m['comm']:.2f}; loss after epoch 1 sinkrt "
                  f"{r['loss_epoch1']['sinkrt']:.4f}, DDP "
                  + ("–" if r['loss_epoch1']['ddp'] is None else f"{r['loss_epoch1']['ddp']:.4f}"))
        print(f"\nload average at end: {load_str()}; {time.time() - start:.0f} s")
        results["load_end"] = os.getloadavg()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
