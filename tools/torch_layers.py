"""tools/torch_layers.py — the layer kinds of convolutional networks
(dsl/layers_conv.c) and Llama's kinds (rmsnorm, swiglu, attention with rope,
kv_heads and no bias) in PyTorch, from a plan.json layer's kind and attrs: one
definition for the test oracle (tests/oracle.py) and the benchmark's torch
stages (bench/torch_pippy.py). Tensors carry the batch first: [B, C, H, W] or
[B, T, d].
"""
import math

import torch
import torch.nn.functional as F


def pair(v):
    return tuple(v) if isinstance(v, list) else v


def conv_layer(k, at, h, p):
    """Layer kind k with attrs at on h, parameters p (a list, the plan's order);
    None when k is not one of these kinds (batchnorm2d is the caller's: its
    statistics are a matter of micro-batches)."""
    b = p[1] if at.get("bias", False) and len(p) > 1 else None
    if k == "conv2d":
        return F.conv2d(h, p[0], b, pair(at["stride"]), pair(at["padding"]), pair(at["dilation"]), at["groups"])
    if k == "conv1d":
        return F.conv1d(h, p[0], b, at["stride"], at["padding"], at["dilation"], at["groups"])
    if k == "conv_transpose2d":
        return F.conv_transpose2d(h, p[0], b, pair(at["stride"]), pair(at["padding"]), pair(at["output_padding"]),
                                  at["groups"])
    if k == "maxpool2d":
        return F.max_pool2d(h, pair(at["kernel"]), pair(at["stride"]), pair(at["padding"]))
    if k == "avgpool2d":
        return F.avg_pool2d(h, pair(at["kernel"]), pair(at["stride"]), pair(at["padding"]), count_include_pad=True)
    if k == "global_avgpool":
        return h.mean((2, 3))
    if k == "upsample":
        if at["mode"] == "bilinear":
            return F.interpolate(h, scale_factor=at["scale"], mode="bilinear", align_corners=False)
        return F.interpolate(h, scale_factor=at["scale"], mode="nearest")
    if k == "flatten":
        return h.reshape(h.shape[0], -1)
    if k == "reshape":
        return h.reshape(h.shape[0], *at["shape"])
    if k == "transpose":
        return h.transpose(at["dims"][0] + 1, at["dims"][1] + 1)
    if k == "mean":
        return h.mean(at["dim"] + 1)
    if k == "sigmoid":
        return torch.sigmoid(h)
    if k == "tanh":
        return torch.tanh(h)
    if k == "silu":
        return h * torch.sigmoid(h)
    return None


def rope(z, theta):
    """Llama's rotary embedding on z [B, h, T, hd]: the half split, cos and sin
    made in float32 as transformers makes them."""
    T, hd = z.shape[-2], z.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().to(z.dtype), emb.sin().to(z.dtype)
    half = hd // 2
    rot = torch.cat([-z[..., half:], z[..., :half]], dim=-1)
    return z * cos + rot * sin


def attention_general(h, p, at):
    """attention with kv_heads, rope, bias, separate_qkv, without dropout (the
    caller refuses a non-zero one)."""
    B, T, d = h.shape
    heads, kvh = at["heads"], at.get("kv_heads", at["heads"])
    hd = d // heads
    kv = kvh * hd
    bias = at.get("bias", True)
    it = iter(p)

    def proj(x):
        w = next(it)
        b = next(it) if bias else None
        return x @ w.t() + (b if b is not None else 0)
    if at.get("separate_qkv", False):
        q, k, v = proj(h), proj(h), proj(h)
    else:
        qkv = proj(h)
        q, k, v = qkv[..., :d], qkv[..., d:d + kv], qkv[..., d + kv:]
    q = q.reshape(B, T, heads, hd).transpose(1, 2)
    k = k.reshape(B, T, kvh, hd).transpose(1, 2)
    v = v.reshape(B, T, kvh, hd).transpose(1, 2)
    if at.get("rope", 0):
        q, k = rope(q, at["rope"]), rope(k, at["rope"])
    k = k.repeat_interleave(heads // kvh, dim=1)
    v = v.repeat_interleave(heads // kvh, dim=1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    if at["causal"]:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    ctx = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
    return proj(ctx)


def rmsnorm(h, w, eps):
    """h / sqrt(mean(h^2) + eps) * w over the last dimension."""
    return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * w


def swiglu(h, p, bias):
    """silu(h W_gate^T + b_gate) * (h W_up^T + b_up): the gate and up halves of
    Llama's MLP (its down projection is the next linear)."""
    g = h @ p[0].t() + (p[1] if bias else 0)
    u = h @ p[2 if bias else 1].t() + (p[3] if bias else 0)
    return F.silu(g) * u
