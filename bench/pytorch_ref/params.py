"""The initial parameters of sinkrt's zoo networks, by sinkrt's names, in
numpy: what host::MakeMlpNetwork / MakeVitNetwork's initialisers fill on the
device. Weights are stored [in, out] (y = x @ W), as sinkrt stores them."""

from collections import OrderedDict

from . import rng

MLP_WIDTHS = (784, 512, 256, 10)

# The ViT of issue 15: 16 patches of 7x7, width 64, 2 pre-LN blocks of
# 4 heads of 16, MLP 256, 10 classes.
VIT = {"patches": 16, "patch": 7, "grid": 4, "patch_values": 49, "width": 64, "depth": 2, "heads": 4,
       "head_dim": 16, "mlp": 256, "classes": 10, "ln_eps": 1e-5, "pos_embed_limit": 0.035}


def mlp_parameters(seed):
    """784-512-256-10: fc{k}.weight HeUniform(seed + k - 1), biases zero."""
    p = OrderedDict()
    for k in range(3):
        shape = (MLP_WIDTHS[k], MLP_WIDTHS[k + 1])
        p[f"fc{k + 1}.weight"] = rng.he_uniform(shape, seed + k)
        p[f"fc{k + 1}.bias"] = rng.zeros(shape[1])
    return p


def vit_parameters(seed):
    """The ViT's parameters, model seed S = seed:
    patch.weight XavierUniform(S), pos_embed Uniform(+-0.035, S+1),
    block i: attn.qkv.weight S+2+4i, attn.proj.weight S+3+4i,
    mlp.fc1.weight S+4+4i, mlp.fc2.weight S+5+4i (all XavierUniform),
    head.weight XavierUniform(S+10); biases and LayerNorm betas zero, gammas one."""
    v = VIT
    d, limit = v["width"], v["pos_embed_limit"]
    p = OrderedDict()
    p["patch.weight"] = rng.xavier_uniform((v["patch_values"], d), seed)
    p["patch.bias"] = rng.zeros(d)
    p["pos_embed"] = rng.uniform((v["patches"], d), seed + 1, -limit, limit)
    for i in range(v["depth"]):
        b, s = f"block{i}", seed + 4 * i
        p[f"{b}.ln1.gamma"] = rng.ones(d)
        p[f"{b}.ln1.beta"] = rng.zeros(d)
        p[f"{b}.attn.qkv.weight"] = rng.xavier_uniform((d, 3 * d), s + 2)
        p[f"{b}.attn.qkv.bias"] = rng.zeros(3 * d)
        p[f"{b}.attn.proj.weight"] = rng.xavier_uniform((d, d), s + 3)
        p[f"{b}.attn.proj.bias"] = rng.zeros(d)
        p[f"{b}.ln2.gamma"] = rng.ones(d)
        p[f"{b}.ln2.beta"] = rng.zeros(d)
        p[f"{b}.mlp.fc1.weight"] = rng.xavier_uniform((d, v["mlp"]), s + 4)
        p[f"{b}.mlp.fc1.bias"] = rng.zeros(v["mlp"])
        p[f"{b}.mlp.fc2.weight"] = rng.xavier_uniform((v["mlp"], d), s + 5)
        p[f"{b}.mlp.fc2.bias"] = rng.zeros(d)
    p["norm.gamma"] = rng.ones(d)
    p["norm.beta"] = rng.zeros(d)
    p["head.weight"] = rng.xavier_uniform((d, v["classes"]), seed + 10)
    p["head.bias"] = rng.zeros(v["classes"])
    return p


PARAMETERS = {"mlp": mlp_parameters, "vit": vit_parameters}
