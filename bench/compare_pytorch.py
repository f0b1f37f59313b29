"""sinkrt against PyTorch on the same MLP, the same data and the same steps.

Run through bench/compare_pytorch, which installs PyTorch and builds
sinkrun. Two parts:

  throughput  samples/s of the 784-512-256-10 MLP (SGD momentum 0.9, lr 0.01)
              for every batch size x thread count n: sinkrt in sink mode and
              in non-sink mode (sinkrun train --threads n --report), and
              PyTorch (torch.set_num_threads(n)), each confined to n cores
              (sched_setaffinity), each over the same epochs of the
              same data; the figure is the median over epochs 2..E (epoch 1
              warms up both), then the median over --rounds interleaved
              rounds.
  accuracy    final test accuracy and loss after --accuracy-epochs epochs at
              batch 64, sinkrt (sink mode) vs PyTorch, all 10000 test images,
              for each of --accuracy-seeds.

PyTorch here starts from bit-identical parameters and sees the batches in
the same order as sinkrt: the script recomputes sinkrt's He-uniform
initialiser (device/src/init/initializer.h: SplitMix64 counter stream) and
its Shuffle permutation (host/src/dataset/pass_order.cc: xoshiro256** from
(seed, pass), Lemire's bounded draw, Fisher-Yates) and checks both by
comparing the first step's loss of the two frameworks. MindSpore's Momentum
(v = m v + g; p -= lr v) and torch.optim.SGD(momentum=m) are the same update.
"""

import argparse
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
WIDTHS = (784, 512, 256, 10)
FIRST_STEPS = 20


# ---------------------------------------------------------------- sinkrt's RNGs

def splitmix64_next(state):
    """SplitMix64 as pass_order.cc steps it: returns (output, new state)."""
    state = (state + GOLDEN) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31), state


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


def shuffle_permutation(n, seed, pass_index):
    """Dataset.Shuffle(seed)'s order of pass `pass_index` over n samples."""
    mixed, _ = splitmix64_next(seed)
    state = mixed ^ pass_index
    s = []
    for _ in range(4):
        out, state = splitmix64_next(state)
        s.append(out)

    def next_u64():
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(bound):
        m = next_u64() * bound
        low = m & MASK
        if low < bound:
            threshold = ((1 << 64) - bound) % bound
            while low < threshold:
                m = next_u64() * bound
                low = m & MASK
        return m >> 64

    order = list(range(n))
    for i in range(n, 1, -1):
        j = below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return np.array(order, dtype=np.int64)


def splitmix64_np(z):
    """SplitMix64's output function on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def he_uniform(shape, seed):
    """InitSpec::HeUniform(seed) of an [in, out] weight, as the device fills it."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        h = splitmix64_np(np.uint64(seed) ^ (i * np.uint64(GOLDEN)))
    u = (h >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    limit = np.float32(np.sqrt(6.0 / shape[0]))
    low, rng = -limit, np.float32(limit - (-limit))
    return (low + rng * u).astype(np.float32).reshape(shape)


# ---------------------------------------------------------------- data

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(count, rows * cols)
    if magic == 2049:
        return np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64)
    raise ValueError(f"{path}: magic number {magic} is not an IDX image or label file")


def find(directory, name):
    for candidate in (name, name + ".gz"):
        p = os.path.join(directory, candidate)
        if os.path.isfile(p):
            return p
    sys.exit(f"compare_pytorch: {directory} has no {name}[.gz]")


def synthetic_split(size, split):
    """tools/sinkrun.cc's SyntheticImages, vectorised."""
    pixels = 28 * 28
    templates = (splitmix64_np(np.uint64(0x7E3A11) + np.arange(10 * pixels, dtype=np.uint64))
                 >> np.uint64(56)).astype(np.int64).reshape(10, pixels)
    with np.errstate(over="ignore"):
        keys = splitmix64_np(np.uint64(split * 0x100000000) + np.arange(size, dtype=np.uint64))
    labels = (keys % np.uint64(10)).astype(np.int64)
    images = np.empty((size, pixels), dtype=np.uint8)
    p = np.arange(pixels, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)
    for start in range(0, size, 4096):
        k = keys[start:start + 4096, None]
        with np.errstate(over="ignore"):
            noise = (splitmix64_np(k ^ p) >> np.uint64(56)).astype(np.int64)
        images[start:start + 4096] = (templates[labels[start:start + 4096]] + noise * 3) // 4
    return images, labels


def load_data(spec):
    """(train_x, train_y, test_x, test_y) as sinkrun's pipeline feeds them: f32 v/255."""
    kind, _, arg = spec.partition(":")
    if kind == "fashion-mnist":
        d = arg or FASHION_MNIST_DIR
        tx = read_idx(find(d, "train-images-idx3-ubyte"))
        ty = read_idx(find(d, "train-labels-idx1-ubyte"))
        vx = read_idx(find(d, "t10k-images-idx3-ubyte"))
        vy = read_idx(find(d, "t10k-labels-idx1-ubyte"))
    elif kind == "synthetic":
        n = int(arg) if arg else 60000
        tx, ty = synthetic_split(n, 0)
        vx, vy = synthetic_split(max(1, n // 6), 1)
    else:
        sys.exit(f"compare_pytorch: --data {spec}: expected fashion-mnist[:DIR] or synthetic[:N]")
    # Rescale(1/255) rounds v * (1/255) in double to f32, as this does.
    lut = (np.arange(256, dtype=np.float64) * (1.0 / 255.0)).astype(np.float32)
    return lut[tx], ty, lut[vx], vy


# ---------------------------------------------------------------- runners

def pinned(threads):
    """preexec_fn: run the child on `threads` cores only, so that "1 thread"
    means one core for everything the framework runs — sinkrt's feeder and
    pipeline workers as much as PyTorch's inline batch gathering."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    return lambda: os.sched_setaffinity(0, cores)


def read_report(path):
    """sinkrun's --report file (JSON lines), removed once read: its epoch
    records and its end record."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    return [r for r in records if r["event"] == "epoch"], next(r for r in records if r["event"] == "end")


def run_sinkrun(sinkrun, data, batch, threads, epochs, sink, seed, extra=()):
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        report = f.name
    cmd = [sinkrun, "train", "--model", "mlp", "--data", data, "--batch", str(batch), "--epochs", str(epochs),
           "--threads", str(threads), "--seed", str(seed), "--lr", "0.01", "--momentum", "0.9",
           "--optimizer", "momentum", "--report", report, *extra]
    if not sink:
        cmd.append("--no-sink")
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pinned(threads))
    if proc.returncode != 0:
        sys.exit(f"compare_pytorch: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    epochs_, end = read_report(report)
    return {"epoch_samples_per_s": [r["samples_per_s"] for r in epochs_], "losses": [r["loss"] for r in epochs_],
            "test_accuracy": end["test_accuracy"], "test_loss": end["test_loss"], "end": end}


def torch_model(torch, seed):
    layers = []
    for k in range(3):
        lin = torch.nn.Linear(WIDTHS[k], WIDTHS[k + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(he_uniform((WIDTHS[k], WIDTHS[k + 1]), seed + k).T.copy()))
            lin.bias.zero_()
        layers.append(lin)
        if k < 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def train_pass(model, opt, loss_fn, x_all, y_all, order, batch, steps, step_losses, first_steps=0):
    """One pass of `steps` optimizer steps over x_all/y_all in `order`, `batch`
    samples a step; returns the last step's loss. With first_steps > 0, each
    step's loss goes to step_losses, and the pass ends once it holds
    first_steps of them."""
    for s in range(steps):
        idx = order[s * batch:(s + 1) * batch]
        xb, yb = x_all[idx], y_all[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        if first_steps:
            step_losses.append(loss.item())
            if len(step_losses) == first_steps:
                break
    return loss


def run_torch(torch, data, batch, threads, epochs, seed, first_steps=0):
    """Trains and evaluates; with first_steps > 0, returns the losses of the
    first `first_steps` steps instead."""
    torch.set_num_threads(threads)
    train_x, train_y, test_x, test_y = data
    x_all, y_all = torch.from_numpy(train_x), torch.from_numpy(train_y)
    model = torch_model(torch, seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(train_y) // batch  # Batch(drop_remainder=True)
    rates, losses = [], []
    for epoch in range(epochs):
        order = torch.from_numpy(shuffle_permutation(len(train_y), seed, epoch))
        t0 = time.perf_counter()
        loss = train_pass(model, opt, loss_fn, x_all, y_all, order, batch, steps, losses, first_steps)
        if first_steps and len(losses) == first_steps:
            return {"step_losses": losses}
        rates.append(steps * batch / (time.perf_counter() - t0))
        losses.append(loss.item())
    with torch.no_grad():
        logits = model(torch.from_numpy(test_x))
        labels = torch.from_numpy(test_y)
        test_loss = torch.nn.functional.cross_entropy(logits.double(), labels).item()
        acc = (logits.argmax(1) == labels).double().mean().item()
    return {"epoch_samples_per_s": rates, "losses": losses, "test_accuracy": acc, "test_loss": test_loss}


def torch_worker(args):
    """Child process: one PyTorch run, so that thread pools and the allocator start fresh."""
    import torch
    data = load_data(args.data)
    out = run_torch(torch, data, args.batch, args.threads, args.epochs, args.seed, args.first_steps)
    out["torch_version"] = torch.__version__
    out["blas"] = sorted({line.split()[-1].rsplit("/", 1)[-1] for line in open("/proc/self/maps")
                          if "blas" in line and "/" in line})
    print(json.dumps(out))


def spawn_torch(args, batch, threads, epochs, first_steps=0, tuned=False, seed=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--data", args.data, "--batch", str(batch),
           "--threads", str(threads), "--epochs", str(epochs), "--seed", str(args.seed if seed is None else seed)]
    if first_steps:
        cmd += ["--first-steps", str(first_steps)]
    env = dict(os.environ)
    if tuned:
        # "Tuned" as DESIGN §7 means it: what environment variables alone buy a
        # PyTorch user — OpenMP waits passively (a spinning team beside
        # OpenBLAS's threads on 2 cores runs 3-4x slower), glibc keeps freed
        # memory (no mmap/munmap and page faults per tensor), and BLAS runs
        # as many threads as torch (fewer measured slower here).
        env.update({"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                    "MALLOC_TRIM_THRESHOLD_": str(1 << 32), "MALLOC_TOP_PAD_": str(64 << 20),
                    "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pinned(threads))
    if proc.returncode != 0:
        sys.exit(f"compare_pytorch: PyTorch run failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def steady(rates):
    """Median samples/s over epochs 2..E (epoch 1 warms caches, allocators and JIT)."""
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def fmt_k(v):
    return f"{v / 1000:.1f}k"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sinkrun", default="build/tools/sinkrun")
    p.add_argument("--data", default="fashion-mnist", help="fashion-mnist[:DIR] or synthetic[:N]")
    p.add_argument("--batches", default="64,256")
    p.add_argument("--threads", default=f"1,{len(os.sched_getaffinity(0))}",
                   help="thread counts, comma separated (default: 1 and every core this process may use); "
                        "a run with n threads is confined to n cores")
    p.add_argument("--epochs", type=int, default=3, help="epochs per throughput run (the first is not timed)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds per configuration; the median counts")
    p.add_argument("--accuracy-epochs", type=int, default=5)
    p.add_argument("--accuracy-seeds", help="seeds for the accuracy runs, comma separated (default: --seed)")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--tuned", action="store_true", help="also time PyTorch with DESIGN §7's tuned environment")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write every figure to this file")
    # Internal: one PyTorch run in a child process.
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--first-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_worker:
        args.threads = int(args.threads)
        return torch_worker(args)

    if not os.access(args.sinkrun, os.X_OK):
        sys.exit(f"compare_pytorch: no sinkrun at {args.sinkrun} (build it, or pass --sinkrun)")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    results = {"data": args.data, "throughput": [], "accuracy": None}

    # Same initial parameters, same batches, same update: the first steps'
    # losses agree to float rounding (later, rounding differences grow as
    # ReLUs flip), or the comparison below is not like for like.
    n = FIRST_STEPS
    ours = run_sinkrun(args.sinkrun, args.data, 64, 1, n, True, args.seed, ("--sink-size", "1"))["losses"]
    theirs = spawn_torch(args, 64, 1, 1, first_steps=n)
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs["step_losses"]))
    print(f"PyTorch {theirs['torch_version']} (BLAS: {', '.join(theirs['blas']) or 'none loaded'}); "
          f"data {args.data}; seed {args.seed}; PyTorch as-is runs with OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '(unset)')}, sinkrun always with passive")
    print(f"losses of the first {n} steps (same parameters, same batches): step 1 sinkrt {ours[0]:.6f}, "
          f"PyTorch {theirs['step_losses'][0]:.6f}; step {n} sinkrt {ours[-1]:.6f}, PyTorch "
          f"{theirs['step_losses'][-1]:.6f}; largest relative difference {worst:.1e}")
    results["first_steps"] = {"sinkrt": ours, "pytorch": theirs["step_losses"], "max_relative_difference": worst}
    if worst > 1e-4:
        print("warning: the first steps differ: initialisation, data order or update do not match", file=sys.stderr)

    if not args.skip_throughput:
        rows = []
        for b in batches:
            for t in threads:
                runs = {"sink": [], "nosink": [], "torch": [], "torch_tuned": []}
                for _ in range(args.rounds):
                    runs["sink"].append(steady(run_sinkrun(args.sinkrun, args.data, b, t, args.epochs, True,
                                                           args.seed)["epoch_samples_per_s"]))
                    runs["nosink"].append(steady(run_sinkrun(args.sinkrun, args.data, b, t, args.epochs, False,
                                                             args.seed)["epoch_samples_per_s"]))
                    runs["torch"].append(steady(spawn_torch(args, b, t, args.epochs)["epoch_samples_per_s"]))
                    if args.tuned:
                        runs["torch_tuned"].append(
                            steady(spawn_torch(args, b, t, args.epochs, tuned=True)["epoch_samples_per_s"]))
                row = {"batch": b, "threads": t, **{k: statistics.median(v) for k, v in runs.items() if v}}
                rows.append(row)
                print(f"  batch {b}, {t} thread(s): " + ", ".join(
                    f"{k} {fmt_k(statistics.median(v))} ({' '.join(fmt_k(x) for x in v)})"
                    for k, v in runs.items() if v), flush=True)
                results["throughput"].append({**row, "rounds": {k: v for k, v in runs.items() if v}})
        head = "| batch | threads | sinkrt sink | sinkrt non-sink | PyTorch |"
        rule = "|---|---|---|---|---|"
        if args.tuned:
            head += " PyTorch tuned |"
            rule += "---|"
        head += " sink / PyTorch | non-sink / PyTorch |"
        rule += "---|---|"
        if args.tuned:
            head += " sink / tuned |"
            rule += "---|"
        print(f"\nsamples/s, MLP 784-512-256-10, SGD momentum 0.9, lr 0.01; median of epochs 2..{args.epochs}"
              f" ({args.rounds} round(s))\n")
        print(head)
        print(rule)
        for r in rows:
            line = (f"| {r['batch']} | {r['threads']} | {fmt_k(r['sink'])} | {fmt_k(r['nosink'])} | "
                    f"{fmt_k(r['torch'])} |")
            if args.tuned:
                line += f" {fmt_k(r['torch_tuned'])} |"
            line += f" {r['sink'] / r['torch']:.2f}x | {r['nosink'] / r['torch']:.2f}x |"
            if args.tuned:
                line += f" {r['sink'] / r['torch_tuned']:.2f}x |"
            print(line)

    if not args.skip_accuracy:
        e = args.accuracy_epochs
        t = threads[-1]
        seeds = [int(x) for x in args.accuracy_seeds.split(",")] if args.accuracy_seeds else [args.seed]
        runs = []
        for seed in seeds:
            s = run_sinkrun(args.sinkrun, args.data, 64, t, e, True, seed)
            pt = spawn_torch(args, 64, t, e, seed=seed)
            runs.append({"seed": seed, "sinkrt": s, "pytorch": pt})
        results["accuracy"] = {"epochs": e, "batch": 64, "threads": t, "runs": runs}
        print(f"\ntest accuracy after {e} epochs, batch 64, SGD momentum 0.9, lr 0.01, {t} thread(s) "
              f"({args.data}, all {runs[0]['sinkrt']['end']['test_samples']} test samples)\n")
        print("| seed | sinkrt accuracy | PyTorch accuracy | sinkrt loss | PyTorch loss |")
        print("|---|---|---|---|---|")
        for r in runs:
            s, pt = r["sinkrt"], r["pytorch"]
            print(f"| {r['seed']} | {s['test_accuracy']:.4f} | {pt['test_accuracy']:.4f} | {s['test_loss']:.4f} | "
                  f"{pt['test_loss']:.4f} |")
        if len(runs) > 1:
            def mean(who, key):
                return statistics.mean(r[who][key] for r in runs)
            print(f"| mean | {mean('sinkrt', 'test_accuracy'):.4f} | {mean('pytorch', 'test_accuracy'):.4f} | "
                  f"{mean('sinkrt', 'test_loss'):.4f} | {mean('pytorch', 'test_loss'):.4f} |")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
