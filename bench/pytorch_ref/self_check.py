"""compare_pytorch --self-check: this package's numpy initialisers against
sinkrt's, bit for bit, read back from checkpoints that sinkrun writes; the
PyTorch ViT against the recipe written out in numpy; SinkrtAdam against
sinkrt's AdamUpdate formula.

sinkrun cannot train 0 steps, so it trains one step of plain SGD with the
smallest positive f32 learning rate (2^-149): lr * grad then rounds to 0, or
to a few multiples of 2^-149 where |grad| >= 0.5, and subtracting that from
any normal f32 leaves it unchanged. A checkpoint saved after that step holds
the initial parameters exactly; only a parameter that starts at exactly 0
(a bias) may end at +-k * 2^-149, which the comparison allows.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from . import rng
from .checkpoint import read_checkpoint
from .params import PARAMETERS

TINY_LR = "1.401298464324817e-45"  # 2^-149, f32's denorm_min
TINY = 1e-43  # a few denorm_min: what a zero-initialised parameter may drift to


def init_graph(batch):
    """A chain of MatMuls through every shape the ViT's Xavier weights have,
    with He, Xavier and Uniform initialisers and seeds small and large. The
    expected values: {name: array}."""
    big = (1 << 63) + 5
    layers = [  # (name, [in, out], init JSON, expected)
        ("he", (784, 49), {"kind": "HeUniform", "seed": 11}, rng.he_uniform((784, 49), 11)),
        ("patch", (49, 64), {"kind": "XavierUniform", "seed": 12}, rng.xavier_uniform((49, 64), 12)),
        ("qkv", (64, 192), {"kind": "XavierUniform", "seed": big}, rng.xavier_uniform((64, 192), big)),
        ("uniform", (192, 64), {"kind": "Uniform", "low": -0.035, "high": 0.035, "seed": 13},
         rng.uniform((192, 64), 13, -0.035, 0.035)),
        ("proj", (64, 64), {"kind": "XavierUniform", "seed": 14}, rng.xavier_uniform((64, 64), 14)),
        ("fc1", (64, 256), {"kind": "XavierUniform", "seed": 15}, rng.xavier_uniform((64, 256), 15)),
        ("fc2", (256, 64), {"kind": "XavierUniform", "seed": 16}, rng.xavier_uniform((256, 64), 16)),
        ("head", (64, 10), {"kind": "XavierUniform", "seed": 17}, rng.xavier_uniform((64, 10), 17)),
    ]
    tensors = [{"name": "image", "kind": "Input", "shape": [batch, 784]}]
    ops, expected, x = [], {}, 0
    for name, shape, init, values in layers:
        tensors.append({"name": f"{name}.weight", "kind": "Param", "shape": list(shape), "init": init})
        tensors.append({"name": f"{name}.out"})
        ops.append({"name": f"{name}.matmul", "op": "MatMul", "inputs": [x, len(tensors) - 2],
                    "outputs": [len(tensors) - 1]})
        expected[f"{name}.weight"] = values
        x = len(tensors) - 1
    # A Uniform bias: a short buffer of the same stream kind as pos_embed.
    tensors.append({"name": "pos.bias", "kind": "Param", "shape": [10],
                    "init": {"kind": "Uniform", "low": -0.035, "high": 0.035, "seed": 18}})
    expected["pos.bias"] = rng.uniform((10,), 18, -0.035, 0.035)
    tensors.append({"name": "logits"})
    ops.append({"name": "bias", "op": "BiasAdd", "inputs": [x, len(tensors) - 2], "outputs": [len(tensors) - 1]})
    logits = len(tensors) - 1
    tensors.append({"name": "label", "kind": "Input", "dtype": "I32", "shape": [batch]})
    tensors.append({"name": "loss"})
    ops.append({"name": "loss", "op": "SparseSoftmaxCrossEntropy", "inputs": [logits, logits + 1],
                "outputs": [logits + 2]})
    graph = {"format_major": 1, "name": "init_check", "tensors": tensors, "ops": ops, "loss": logits + 2,
             "outputs": [logits]}
    return graph, expected


def initial_parameters(sinkrun, network_flags, batch=64):
    """The parameters sinkrun starts from: one step of SGD at lr 2^-149."""
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "init.ckpt")
        cmd = [sinkrun, "train", *network_flags, "--data", f"synthetic:{batch}", "--batch", str(batch),
               "--epochs", "1", "--threads", "1", "--optimizer", "sgd", "--lr", TINY_LR, "--save-checkpoint", ckpt]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}"
        return read_checkpoint(ckpt)[1], None


def compare(expected, actual, what):
    """Lines saying what differs; empty when every value is bit-identical."""
    problems = []
    extra = sorted(set(actual) - set(expected))
    if extra:  # plain SGD keeps no optimizer state: every tensor is a parameter
        problems.append(f"{what}: sinkrt has parameters the reference lacks: {', '.join(extra)}")
    for name, want in expected.items():
        got = actual.get(name)
        if got is None:
            problems.append(f"{what}: sinkrt has no tensor '{name}' (its tensors: {', '.join(sorted(actual))})")
            continue
        if got.shape != want.shape:
            problems.append(f"{what}: '{name}' is {list(got.shape)} in sinkrt, {list(want.shape)} here")
            continue
        same = (got.view(np.uint32) == want.view(np.uint32)) | ((want == 0) & (np.abs(got) < TINY))
        if not same.all():
            i = int(np.argmin(same.ravel()))
            problems.append(f"{what}: '{name}' differs in {int((~same).sum())} of {want.size} values, first at "
                            f"flat index {i}: sinkrt {got.ravel()[i]!r}, here {want.ravel()[i]!r}")
    return problems


def run(sinkrun, seed, models, has_model):
    """Prints what was checked; returns False when anything differs."""
    ok = True
    assert rng.splitmix64_np(np.uint64(0)) == np.uint64(0xE220A8397B1DCDAF), \
        "splitmix64(0), as docs/reference/ops.md gives it"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        graph, expected = init_graph(64)
        json.dump(graph, f)
    try:
        actual, error = initial_parameters(sinkrun, ["--graph", f.name])
    finally:
        os.unlink(f.name)
    checks = [("initialiser graph (He, Xavier at the ViT's shapes, Uniform)", expected, actual, error)]
    for model in models:
        if not has_model(model):
            print(f"self-check: {model}: skipped, {sinkrun} has no --model {model} yet")
            continue
        actual, error = initial_parameters(sinkrun, ["--model", model, "--seed", str(seed)])
        checks.append((f"--model {model} --seed {seed}", PARAMETERS[model](seed), actual, error))
    for what, want, got, error in checks:
        problems = [f"{what}: {error}"] if error else compare(want, got, what)
        n = sum(v.size for v in want.values())
        if problems:
            ok = False
            for p in problems:
                print(f"self-check: FAILED {p}", file=sys.stderr)
        else:
            print(f"self-check: {what}: {len(want)} tensors, {n} values bit-identical")
    if importlib.util.find_spec("torch") is None:  # the initialisers need no PyTorch; the rest does
        print("self-check: no PyTorch here: the ViT module and Adam checks skipped")
        return ok
    return check_vit_module(seed) & check_adam() & ok


def vit_reference_logits(params, images):
    """Issue 15's ViT written out per sample in float64 numpy, straight from
    the recipe, to check pytorch_ref.models.Vit's reshapes and head split."""
    p = {k: v.astype(np.float64) for k, v in params.items()}

    def layer_norm(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * p[name + ".gamma"] + p[name + ".beta"]

    def linear(x, name):
        return x @ p[name + ".weight"] + p[name + ".bias"]

    out = []
    for image in images.astype(np.float64).reshape(-1, 28, 28):
        # Patch r*4 + c holds rows 7r..7r+6, columns 7c..7c+6, row by row.
        x = np.stack([image[7 * r:7 * r + 7, 7 * c:7 * c + 7].ravel() for r in range(4) for c in range(4)])
        x = linear(x, "patch") + p["pos_embed"]
        for i in range(2):
            b = f"block{i}"
            qkv = linear(layer_norm(x, b + ".ln1"), b + ".attn.qkv")
            heads = []
            for h in range(4):
                # Head-major: head h's q, k, v are columns 48h + 16j .. + 15.
                q, k, v = (qkv[:, 48 * h + 16 * j:48 * h + 16 * j + 16] for j in range(3))
                s = q @ k.T / 4
                a = np.exp(s - s.max(-1, keepdims=True))
                heads.append((a / a.sum(-1, keepdims=True)) @ v)
            x = x + linear(np.concatenate(heads, axis=1), b + ".attn.proj")
            hid = linear(layer_norm(x, b + ".ln2"), b + ".mlp.fc1")
            hid = 0.5 * hid * (1 + np.tanh(np.sqrt(2 / np.pi) * (hid + 0.044715 * hid ** 3)))
            x = x + linear(hid, b + ".mlp.fc2")
        out.append(linear(layer_norm(x, "norm").mean(0), "head"))
    return np.stack(out)


def check_vit_module(seed):
    """pytorch_ref's torch ViT against the per-sample numpy recipe, on
    parameters perturbed away from their zero/one initial values (so that
    biases, betas and gammas are exercised too)."""
    import torch
    from .models import build, torch_name
    from .params import vit_parameters
    params = vit_parameters(seed)
    r = np.random.default_rng(seed)
    params = {k: (v + r.normal(0, 0.05, v.shape)).astype(np.float32) for k, v in params.items()}
    net = build("vit", seed).double()
    own = dict(net.named_parameters())
    with torch.no_grad():
        for k, v in params.items():
            own[torch_name(k)].copy_(torch.from_numpy(v.T.copy() if k.endswith(".weight") else v))
    images = r.random((8, 784)).astype(np.float32)
    want = vit_reference_logits(params, images)
    got = net(torch.from_numpy(images).double()).detach().numpy()
    worst = float(np.abs(got - want).max())
    ok = worst < 1e-9
    print(f"self-check: PyTorch ViT vs the recipe in numpy (float64, 8 images): largest logit difference "
          f"{worst:.1e}{'' if ok else ' - FAILED'}", file=sys.stdout if ok else sys.stderr)
    return ok


def check_adam(steps=5):
    """SinkrtAdam against optimizer_update.cc's AdamUpdate written out in
    numpy f32 (one rounding per operation, in the kernel's order), bit for bit."""
    import torch
    from .models import SinkrtAdam
    f = np.float32
    r = np.random.default_rng(7)
    param = r.normal(0, 0.1, 4096).astype(f)
    grads = [(r.normal(0, 1, 4096) * 10.0 ** r.integers(-9, 0, 4096)).astype(f) for _ in range(steps)]
    t = torch.nn.Parameter(torch.from_numpy(param.copy()))
    opt = SinkrtAdam([t], lr=1e-3)
    lr, b1, b2, eps = f(1e-3), f(0.9), f(0.999), f(1e-8)
    m, v, p0, p1 = np.zeros_like(param), np.zeros_like(param), f(1), f(1)
    for g in grads:
        t.grad = torch.from_numpy(g.copy())
        opt.step()
        p0, p1 = f(p0 * b1), f(p1 * b2)
        lr_t = f(f(lr * np.sqrt(f(1) - p1)) / f(f(1) - p0))
        m = f(b1 * m) + f(f(f(1) - b1) * g)
        v = f(b2 * v) + f(f(f(f(1) - b2) * g) * g)
        param = param - f(f(lr_t * m) / f(np.sqrt(v) + eps))
    same = int((t.detach().numpy().view(np.uint32) == param.view(np.uint32)).sum())
    ok = same == param.size
    print(f"self-check: SinkrtAdam vs AdamUpdate's formula in numpy f32, {steps} steps: {same} of {param.size} "
          f"parameters bit-identical{'' if ok else ' - FAILED'}", file=sys.stdout if ok else sys.stderr)
    return ok
