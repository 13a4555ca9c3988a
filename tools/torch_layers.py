"""tools/torch_layers.py — the layer kinds of convolutional networks
(dsl/layers_conv.c) in PyTorch, from a plan.json layer's kind and attrs: one
definition for the test oracle (tests/oracle.py) and the benchmark's torch
stages (bench/torch_pippy.py). Tensors carry the batch first: [B, C, H, W].
"""
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
