"""The transformer recipe of issue 41 on both sides: the ViT with dropout,
MindSpore's AdamWeightDecay with a no-decay group, warmup then cosine, and
clipping by global norm. The sinkrun flags that select it, and the PyTorch
pieces that compute the same thing: the schedule as
docs/guide/lr_schedules.md gives it, AdamWeightDecay as
device/src/kernels/adam_weight_decay.cc computes it (torch.optim.AdamW
corrects the moments' bias, MindSpore's does not, so it is written out
here), and MindSpore's clip_by_global_norm."""

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Recipe:
    lr: float = 1e-3  # the cosine's maximum
    min_lr: float = 1e-5
    warmup: int = 200  # optimizer steps
    decay: int = 0  # cosine steps after the warmup; 0: the run's steps after the warmup
    weight_decay: float = 0.05
    no_decay: tuple = ("bias", "beta", "gamma", "norm")
    dropout: float = 0.1
    clip: float = 0.0  # clip_by_global_norm's clip_norm; 0: no clipping
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-6  # AdamWeightDecay's default

    def describe(self):
        clip = f", clip_by_global_norm {self.clip:g}" if self.clip else ", no clipping"
        return (f"ViT, dropout {self.dropout:g}, AdamWeightDecay (lr {self.lr:g}, weight decay {self.weight_decay:g}, "
                f"none for {'|'.join(self.no_decay)}), warmup {self.warmup} then cosine over {self.decay} steps to "
                f"{self.min_lr:g}{clip}")

    def sinkrun_flags(self):
        flags = ["--model", "vit", "--optimizer", "adamw", "--lr", repr(self.lr), "--weight-decay",
                 repr(self.weight_decay), "--no-decay", ",".join(self.no_decay), "--lr-schedule",
                 f"cosine:warmup={self.warmup},min={self.min_lr!r},decay={self.decay}", "--dropout", repr(self.dropout)]
        if self.clip:
            flags += ["--clip-grad-norm", repr(self.clip)]
        return flags

    def rate(self, step):
        """LrSchedule::WarmupCosine at optimizer step `step` (0 first): in
        float64, rounded once to float32, as the LrSchedule kernel computes it."""
        if step < self.warmup:
            r = self.lr * step / self.warmup
        else:
            t = min(step - self.warmup, self.decay)
            r = self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * t / self.decay))
        return float(np.float32(r))

    def decays(self, sinkrt_name):
        """Whether the parameter takes weight decay: not when its name contains
        one of the no-decay filters (the group's decay is 0)."""
        return not any(f in sinkrt_name for f in self.no_decay)


def clip_by_global_norm(grads, clip_norm):
    """MindSpore's ops.clip_by_global_norm: g · clip_norm / max(‖g‖, clip_norm),
    the norm over every gradient. The sum of squares in float64 (sinkrt's
    order of summation is not PyTorch's; float64 takes the order out)."""
    norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))
    factor = float(np.float32(clip_norm) / np.float32(max(norm, clip_norm)))
    if factor != 1.0:
        for g in grads:
            g.mul_(factor)
    return norm


class AdamWeightDecay:
    """MindSpore's nn.AdamWeightDecay, every operation in float32 in the
    kernel's order, with no bias correction:

      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
      w -= lr (m / (sqrt(v) + eps) + wd w)

    `params` is [(sinkrt name, torch parameter)]; wd is the recipe's weight
    decay, 0 for a name the no-decay group claims."""

    def __init__(self, params, recipe):
        import torch
        self.recipe = recipe
        self.entries = [(p, recipe.weight_decay if recipe.decays(name) else 0.0, torch.zeros_like(p),
                         torch.zeros_like(p)) for name, p in params]
        self.step_count = 0

    def step(self):
        import torch
        r = self.recipe
        grads = [p.grad for p, *_ in self.entries]
        norm = clip_by_global_norm(grads, r.clip) if r.clip else None
        lr = r.rate(self.step_count)
        b1, b2, eps = r.beta1, r.beta2, r.eps
        c1, c2 = float(np.float32(1) - np.float32(b1)), float(np.float32(1) - np.float32(b2))
        with torch.no_grad():
            for p, wd, m, v in self.entries:
                g = p.grad
                m.mul_(b1).add_(g * c1)
                v.mul_(b2).add_((g * c2).mul_(g))
                update = m / (v.sqrt() + eps)
                if wd:
                    update.add_(p * float(np.float32(wd)))
                p.sub_(update * lr)
        self.step_count += 1
        return lr, norm
