"""sinkrt's random streams in numpy, bit for bit.

Parameters: device/src/init/initializer.{h,cc} (a counter-based SplitMix64
stream; element i of seed s depends only on (s, i)). Batch order:
host/src/dataset/pass_order.cc (xoshiro256** seeded from (seed, pass),
Lemire's bounded draw, Fisher-Yates). Both are checked against sinkrun by
`compare_pytorch --self-check` (initialisers, through a checkpoint) and by
the first-steps loss comparison (order).
"""

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


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


class PassOrder:
    """The sample indices of global step g (0-based) of a Shuffle(seed) +
    Batch(batch, drop_remainder=True) pipeline that runs on across passes:
    step g is step g mod P of pass g div P, P = n div batch."""

    def __init__(self, n, seed, batch):
        self.n, self.seed, self.batch = n, seed, batch
        self.steps_per_pass = n // batch
        self._pass, self._order = None, None

    def step(self, g):
        p, s = divmod(g, self.steps_per_pass)
        if p != self._pass:
            self._pass, self._order = p, shuffle_permutation(self.n, self.seed, p)
        return self._order[s * self.batch:(s + 1) * self.batch]


def splitmix64_np(z):
    """SplitMix64's output function on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform01(n, seed):
    """UniformAt(seed, i) for i in [0, n): top 24 bits times 2^-24, exact in f32."""
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        h = splitmix64_np(np.uint64(seed) ^ (i * np.uint64(GOLDEN)))
    return (h >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def fill_uniform(shape, seed, low, high):
    """FillUniform: y[i] = low + (high - low) * u_i, every operation in f32
    (the device is built without FMA contraction)."""
    low, high = np.float32(low), np.float32(high)
    span = np.float32(high - low)
    n = int(np.prod(shape, dtype=np.int64))
    return (low + span * uniform01(n, seed)).astype(np.float32).reshape(shape)


def fan_in_out(shape):
    """host/src/compiler/lowering.cc's FanInOut: [in, out] -> (in, out);
    rank >= 3 (O, I first) -> (I*spatial, O*spatial); 1-D -> (n, n)."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[2:]))
    return shape[1] * receptive, shape[0] * receptive


def _limit(fan):
    # sqrt in double, then rounded to f32, as FillInitializer does.
    return np.float32(np.sqrt(6.0 / fan))


def he_uniform(shape, seed):
    """InitSpec::HeUniform(seed): U(-l, l), l = sqrt(6 / fan_in)."""
    fan_in, _ = fan_in_out(shape)
    limit = _limit(fan_in)
    return fill_uniform(shape, seed, -limit, limit)


def xavier_uniform(shape, seed):
    """InitSpec::XavierUniform(seed): U(-l, l), l = sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_out(shape)
    limit = _limit(fan_in + fan_out)
    return fill_uniform(shape, seed, -limit, limit)


def uniform(shape, seed, low, high):
    """InitSpec::Uniform(low, high, seed); low and high are f32 in the Init."""
    return fill_uniform(shape, seed, low, high)


def zeros(shape):
    return np.zeros(shape, dtype=np.float32)


def ones(shape):
    return np.ones(shape, dtype=np.float32)
