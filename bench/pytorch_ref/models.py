"""sinkrt's zoo networks in PyTorch, started from sinkrt's parameters
(params.py), and MindSpore's Adam as sinkrt's AdamUpdate computes it."""

import numpy as np
import torch

from .params import PARAMETERS, VIT


class Mlp(torch.nn.Module):
    """784-512-256-10 with ReLU: host::MakeMlpNetwork."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 512)
        self.fc2 = torch.nn.Linear(512, 256)
        self.fc3 = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def identity(x):
    return x


class Attention(torch.nn.Module):
    def __init__(self, width, heads, drop=identity):
        super().__init__()
        self.drop = drop  # attn_drop on the probabilities, proj_drop after proj
        self.heads, self.head_dim = heads, width // heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.scale = self.head_dim ** -0.5  # 1/4: a power of two, so x * scale == x / 4

    def forward(self, x):
        b, t, d = x.shape
        # A token's 192 qkv values are [heads, 3, head_dim], head-major as
        # sinkrt's zoo ViT: head h's q, k, v are columns 48h..48h+47.
        qkv = self.qkv(x).view(b, t, self.heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = self.drop(torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1))
        return self.drop(self.proj((attn @ v).transpose(1, 2).reshape(b, t, d)))


class FeedForward(torch.nn.Module):
    def __init__(self, width, hidden, drop=identity):
        super().__init__()
        self.drop = drop
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        h = self.drop(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))
        return self.drop(self.fc2(h))


class Block(torch.nn.Module):
    """Pre-LN: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, width, heads, hidden, eps, drop=identity):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(width, eps=eps)
        self.attn = Attention(width, heads, drop)
        self.ln2 = torch.nn.LayerNorm(width, eps=eps)
        self.mlp = FeedForward(width, hidden, drop)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Vit(torch.nn.Module):
    """Issue 15's ViT: image [B, 784] -> 16 row-major 7x7 patches -> Linear(49, 64)
    + pos_embed -> 2 blocks -> LayerNorm -> mean over tokens -> Linear(64, 10).
    `drop` (a function of a tensor, identity by default) sits where
    MakeVitNetwork places its Dropout ops: pos_drop, attn_drop, proj_drop
    and after each of the MLP's two Linear layers (timm's places)."""

    def __init__(self, drop=identity):
        super().__init__()
        self.drop = drop
        v = VIT
        self.patch = torch.nn.Linear(v["patch_values"], v["width"])
        self.grid_size, self.patch_size = v["grid"], v["patch"]
        self.pos_embed = torch.nn.Parameter(torch.zeros(v["patches"], v["width"]))
        for i in range(v["depth"]):
            self.add_module(f"block{i}", Block(v["width"], v["heads"], v["mlp"], v["ln_eps"], drop))
        self.depth = v["depth"]
        self.norm = torch.nn.LayerNorm(v["width"], eps=v["ln_eps"])
        self.head = torch.nn.Linear(v["width"], v["classes"])

    def forward(self, image):
        g, p = self.grid_size, self.patch_size
        # [B, 784] -> [B, 4, 7, 4, 7] (patch row, pixel row, patch column, pixel
        # column) -> [B, 4, 4, 7, 7] -> [B, 16, 49]: patches in row-major order.
        x = image.view(-1, g, p, g, p).permute(0, 1, 3, 2, 4).reshape(-1, g * g, p * p)
        x = self.drop(self.patch(x) + self.pos_embed)
        for i in range(self.depth):
            x = getattr(self, f"block{i}")(x)
        return self.head(self.norm(x).mean(dim=1))


MODULES = {"mlp": Mlp, "vit": Vit}


def torch_name(sinkrt_name):
    """The PyTorch parameter holding sinkrt's tensor: LayerNorm's gamma/beta
    are torch's weight/bias; every other name is the same."""
    if sinkrt_name.endswith(".gamma"):
        return sinkrt_name[:-len("gamma")] + "weight"
    if sinkrt_name.endswith(".beta"):
        return sinkrt_name[:-len("beta")] + "bias"
    return sinkrt_name


def build(model, seed, **kwargs):
    """The PyTorch network holding sinkrt's initial parameters, bit for bit.
    sinkrt's weights are [in, out]; torch.nn.Linear holds [out, in]."""
    net = MODULES[model](**kwargs)
    own = dict(net.named_parameters())
    params = PARAMETERS[model](seed)
    if set(map(torch_name, params)) != set(own):
        raise AssertionError(f"{model}: sinkrt's parameters {sorted(params)} do not map onto PyTorch's {sorted(own)}")
    with torch.no_grad():
        for name, value in params.items():
            target = own[torch_name(name)]
            if name.endswith(".weight") and value.ndim == 2:
                value = value.T
            if tuple(target.shape) != value.shape:
                raise AssertionError(f"{name}: sinkrt's {value.shape} does not fit PyTorch's {tuple(target.shape)}")
            target.copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return net


class SinkrtAdam(torch.optim.Optimizer):
    """MindSpore's Adam as device/src/kernels/optimizer_update.cc computes it,
    every scalar in f32 and every operation in the kernel's order:

      powers = (powers[0] * beta1, powers[1] * beta2)          (AdamPowers, from 1)
      lr_t = lr * sqrt(1 - powers[1]) / (1 - powers[0])
      m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g
      param -= lr_t m / (sqrt(v) + eps)

    torch.optim.Adam divides by sqrt(v / (1 - beta2^t)) + eps instead: the
    same update but for where eps sits (eps_torch = eps / sqrt(1 - beta2^t)),
    which matters in the first steps and for small gradients."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})
        f = np.float32
        self.lr, self.b1, self.b2, self.eps = f(lr), f(betas[0]), f(betas[1]), f(eps)
        self.powers = [f(1), f(1)]

    @torch.no_grad()
    def step(self):
        f = np.float32
        self.powers = [f(self.powers[0] * self.b1), f(self.powers[1] * self.b2)]
        lr_t = f(f(self.lr * np.sqrt(f(1) - self.powers[1])) / f(f(1) - self.powers[0]))
        b1, b2 = float(self.b1), float(self.b2)
        c1, c2 = float(f(1) - self.b1), float(f(1) - self.b2)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                m, v = state["m"], state["v"]
                m.mul_(b1).add_(g * c1)
                v.mul_(b2).add_((g * c2).mul_(g))
                p.sub_((m * float(lr_t)).div_(v.sqrt().add_(float(self.eps))))
