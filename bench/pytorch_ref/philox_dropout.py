"""sinkrt's dropout masks in PyTorch, bit for bit (device/src/random/philox.h,
dropout_mask.h; docs/guide/dropout.md): element g of op `op_id` at training
step `step` reads byte g mod 4 of 32-bit word (g / 4) mod 4 of
Philox4x32-10 block g / 16, whose counter is (block low, block high, op_id,
step low) and whose key is (seed low, seed high xor step high). With
t = floor(p · 2^16) = 256·t_hi + t_lo the element is kept when its byte is
above t_hi, dropped when below, and on a tie kept when the same byte of the
refinement block (bit 31 of the counter's second word set) is at least
t_lo. A kept element is x · (1 / (1 - p)) in float32. On one device g is
the element's row-major index in the tensor.

The words are computed in int64 tensors: a product of two 32-bit values
wraps past 2^63, but its 64 bits are the unsigned product's, so the high
and low halves come out right (checked against Python integers by
`self_test`)."""

import numpy as np
import torch

M32 = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85

# The zoo ViT's Dropout ops (2 blocks, as `sinkrun train --model vit
# --dropout P` builds it, names as its --profile lists them), in the order
# the forward pass reaches them: pos_drop, then per block attn_drop,
# proj_drop, the MLP's two.
VIT_DROPOUT_OPS = ("pos_embed.dropout", "block0.attn.dropout", "block0.attn.dropout_8", "block0.mlp.dropout",
                   "block0.mlp.dropout_9", "block1.attn.dropout", "block1.attn.dropout_17", "block1.mlp.dropout",
                   "block1.mlp.dropout_18")


def fnv1a32(name):
    """host/src/graph/dropout_ops.cc's NameHash: the op id."""
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & M32
    return h


REFINE_BIT = 0x80000000


def words(seed, step, op_id, blocks, refine=False):
    """The words of blocks 0 .. blocks - 1 in order (4 a block), an int64
    tensor of uint32 values; `refine`: the refinement blocks'."""
    b = torch.arange(blocks, dtype=torch.int64)
    c0, c1 = b & M32, ((b >> 32) & M32) | (REFINE_BIT if refine else 0)
    c2 = torch.full_like(b, op_id)
    c3 = torch.full_like(b, step & M32)
    k0, k1 = seed & M32, ((seed >> 32) ^ (step >> 32)) & M32
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & M32, (k1 + W1) & M32
        p0, p1 = c0 * M0, c2 * M1
        c0, c1, c2, c3 = ((p1 >> 32) & M32) ^ c1 ^ k0, p1 & M32, ((p0 >> 32) & M32) ^ c3 ^ k1, p0 & M32
    return torch.stack((c0, c1, c2, c3), dim=1).reshape(-1)


def element_bytes(seed, step, op_id, n, refine=False):
    """Elements 0 .. n - 1's bytes: byte g mod 4 of word g / 4."""
    w = words(seed, step, op_id, (n + 15) // 16, refine)
    g = torch.arange(n, dtype=torch.int64)
    return (w[g >> 2] >> (8 * (g & 3))) & 0xFF


def keep_mask(seed, step, op_id, n, threshold):
    """Which of elements 0 .. n - 1 are kept under t = floor(p · 2^16)."""
    primary = element_bytes(seed, step, op_id, n)
    hi, lo = threshold >> 8, threshold & 0xFF
    tie = primary == hi
    keep = primary > hi
    if bool(tie.any()):
        keep = keep | (tie & (element_bytes(seed, step, op_id, n, refine=True) >= lo))
    return keep


def _byte_reference(seed, step, op_id, g, refine=False):
    """Element g's byte in Python integers, for self_test."""
    block = g // 16
    c = [block & M32, (block >> 32) | (REFINE_BIT if refine else 0), op_id, step & M32]
    k = [seed & M32, ((seed >> 32) ^ (step >> 32)) & M32]
    for r in range(10):
        if r:
            k = [(k[0] + W0) & M32, (k[1] + W1) & M32]
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
    return (c[(g // 4) % 4] >> (8 * (g % 4))) & 0xFF


def self_test():
    """The paper's known answer (counter 0, key 0) and Python integers."""
    assert [int(w) for w in words(0, 0, 0, 1)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    for refine in (False, True):
        got = element_bytes(7, 3, 0x1234ABCD, 300, refine)
        for g in (0, 1, 2, 3, 17, 63, 255, 299):
            assert int(got[g]) == _byte_reference(7, 3, 0x1234ABCD, g, refine), (g, refine)


class PhiloxDropout(torch.nn.Module):
    """One module for all of a network's Dropout sites: each forward pass
    visits `op_names` in order; `step` is sinkrt's dropout/step (advance it
    after every training step). Identity in eval mode, as sinkrt's eval."""

    def __init__(self, p, seed, op_names):
        super().__init__()
        self.p = float(np.float32(p))
        self.threshold = int(self.p * 65536.0)
        self.scale = float(np.float32(1) / (np.float32(1) - np.float32(p)))
        self.seed = seed
        self.op_ids = [fnv1a32(n) for n in op_names]
        self.step, self.site = 0, 0

    def forward(self, x):
        if not self.training:
            return x
        op_id = self.op_ids[self.site % len(self.op_ids)]
        self.site += 1
        keep = keep_mask(self.seed, self.step, op_id, x.numel(), self.threshold).view(x.shape)
        return torch.where(keep, x * self.scale, torch.zeros((), dtype=x.dtype))

    def next_step(self):
        self.step += 1
        self.site = 0
