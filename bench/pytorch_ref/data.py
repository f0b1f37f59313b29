"""The data sinkrun trains on, as numpy arrays: Fashion-MNIST's IDX files or
tools/sinkrun's synthetic images, scaled as sinkrun's pipeline scales them."""

import gzip
import os
import struct
import sys

import numpy as np

from .rng import splitmix64_np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


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
    """tools/sinkrun's SyntheticImages, vectorised."""
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
    """(train_x, train_y, test_x, test_y) as sinkrun's pipeline feeds them:
    images f32 [N, 784] = v/255, labels int64."""
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
