#!/usr/bin/python3
"""tests/torch_examples.py — the convolutional examples (examples/resnet.pipe,
unet.pipe, vit.pipe, digits_cnn.pipe) written by hand in PyTorch (Debian's
python3-torch, float64), for tests/conv_examples.t: loaded with pipegen's
initial weights, trained on the same batches, they must give what the stage
programs gave.

    torch_examples.py MODEL --plan PLAN --init W0 --x X --y Y --loss1 L1
                      [--w1 W1] [--steps N --lossN LN --wN WN]

W0: the runtime's initial weights (`--steps 0 --save`); L1, W1: the loss it
printed and the weights it saved after one step; LN, WN: after N steps. Prints
one line per comparison, "ok - ..." or "not ok - ...": the losses to relative
1e-5, every weight and running statistic to 1e-4 (max|a - b| / max|b|); exits 1
if any failed, 2 on a usage or data error.

The models are ordinary nn.Modules named as the .pipe names its layers, so
their state dicts are pipegen's tensors by name (batch norm's
num_batches_tracked aside). What pipeline training means is written out here,
as torchgpipe does it: each step runs the batch as the plan's micro-batches
(plan.json's microbatch_rows) one after another, batch norm normalising each
by its own statistics; deferred batch norm (torchgpipe's DeferredBatchNorm)
moves its running statistics once per step, from the sums over all the
micro-batches; the loss of the whole batch is the sum of the micro-batches'
(cross_entropy: divided by the batch's samples times positions); weight decay
applies to the weights of convolutions, linear layers and position
embeddings, not to biases and norms; the learning rate follows the plan's
schedule (cosine: linear warm-up, then the cosine from lr to min over the
steps) and the gradient's global norm is clipped when the plan says so.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_safetensors  # noqa: E402
from oracle import OracleError, lr_at, read_pgd, rel_err  # noqa: E402  (one definition of each)

torch.set_default_dtype(torch.float64)


class DeferredBN(nn.BatchNorm2d):
    """BatchNorm2d normalising each micro-batch by its own statistics; the
    running statistics move once per step (commit) from the whole batch."""

    def __init__(self, c, eps=1e-5, momentum=0.1):
        super().__init__(c, eps=eps, momentum=momentum)
        self.sums = None

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        d = x.detach()
        part = (d.sum((0, 2, 3)), (d * d).sum((0, 2, 3)), d.numel() // d.shape[1])
        self.sums = part if self.sums is None else tuple(a + b for a, b in zip(self.sums, part))
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)

    def commit(self):
        s, ss, n = self.sums
        mean = s / n
        var = (ss - s * mean) / (n - 1)
        with torch.no_grad():
            self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
            self.running_var.mul_(1 - self.momentum).add_(self.momentum * var)
        self.sums = None


def conv3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


# ---- examples/resnet.pipe ----------------------------------------------------

class Basic(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = conv3(c, c), DeferredBN(c)
        self.conv2, self.bn2 = conv3(c, c), DeferredBN(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1, self.bn1 = conv3(cin, cout, 2), DeferredBN(cout)
        self.conv2, self.bn2 = conv3(cout, cout), DeferredBN(cout)
        self.proj, self.pbn = nn.Conv2d(cin, cout, 1, stride=2, bias=False), DeferredBN(cout)

    def forward(self, x):
        f = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(f + self.pbn(self.proj(x)))


class ResNet(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.stem, self.bn = conv3(3, c), DeferredBN(c)
        self.b1 = Basic(c)
        self.c1, self.n1 = conv3(c, c), DeferredBN(c)  # the block the split cuts
        self.c2, self.n2 = conv3(c, c), DeferredBN(c)
        self.d2, self.b2 = Down(c, 2 * c), Basic(2 * c)
        self.d3, self.b3 = Down(2 * c, 4 * c), Basic(4 * c)
        self.fc = nn.Linear(4 * c, 10)

    def forward(self, x):
        r1 = self.b1(F.relu(self.bn(self.stem(x))))
        h = F.relu(self.n1(self.c1(r1)))
        h = F.relu(self.n2(self.c2(h)) + r1)
        h = self.b3(self.d3(self.b2(self.d2(h))))
        return self.fc(h.mean((2, 3)))


# ---- examples/unet.pipe ------------------------------------------------------

class Double(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1, self.bn1 = conv3(cin, cout), DeferredBN(cout)
        self.conv2, self.bn2 = conv3(cout, cout), DeferredBN(cout)

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class UNet(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc1, self.enc2, self.enc3, self.mid = Double(1, c), Double(c, 2 * c), Double(2 * c, 4 * c), Double(4 * c, 8 * c)
        self.up3, self.dec3 = nn.ConvTranspose2d(8 * c, 4 * c, 2, stride=2), Double(8 * c, 4 * c)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), Double(4 * c, 2 * c)
        self.up1, self.dec1 = nn.Conv2d(2 * c, c, 3, padding=1), Double(2 * c, c)
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        e3 = self.enc3(F.max_pool2d(e2, 2))
        h = self.mid(F.max_pool2d(e3, 2))
        h = self.dec3(torch.cat([self.up3(h), e3], 1))
        h = self.dec2(torch.cat([self.up2(h), e2], 1))
        h = self.up1(F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False))
        h = self.head(self.dec1(torch.cat([h, e1], 1)))
        return h.reshape(h.shape[0], 2, -1).transpose(1, 2)  # [B, pixels, 2 classes]


# ---- examples/vit.pipe -------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(B, T, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, T, d))


class Encoder(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2, self.fc, self.proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class PosEmbed(nn.Module):
    def __init__(self, T, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(T, d))

    def forward(self, x):
        return x + self.weight


class ViT(nn.Module):
    def __init__(self, d=64, heads=4, patch=4, tokens=64):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.pos = PosEmbed(tokens, d)
        self.h0, self.h1, self.h2, self.h3 = (Encoder(d, heads) for _ in range(4))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

    def forward(self, x):
        h = self.embed(x).flatten(2).transpose(1, 2)  # [B, tokens, d]
        h = self.h3(self.h2(self.h1(self.h0(self.pos(h)))))
        return self.head(self.ln_f(h).mean(1))


# ---- examples/digits_cnn.pipe -------------------------------------------------

class Digits(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn1 = conv3(1, 16), DeferredBN(16)
        self.c2, self.bn2 = conv3(16, 32), DeferredBN(32)
        self.c3, self.bn3 = conv3(32, 64), DeferredBN(64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.c1(x)))
        h = F.max_pool2d(F.relu(self.bn2(self.c2(h))), 2)
        h = F.relu(self.bn3(self.c3(h)))
        return self.fc(h.mean((2, 3)))


def build(name, plan, w):
    """The model, its sizes read from the initial weights (the .pipe's consts)."""
    if name == "resnet":
        return ResNet(w["stem.weight"].shape[0])
    if name == "unet":
        return UNet(w["enc1.conv1.weight"].shape[0])
    if name == "vit":
        heads = next(L["attrs"]["heads"] for L in plan["layers"] if L["kind"] == "attention")
        e = w["embed.weight"]
        return ViT(e.shape[0], heads, e.shape[2], w["pos.weight"].shape[0])
    return Digits()


MODELS = ("digits_cnn", "resnet", "unet", "vit")


# ---- training as the pipeline does it ------------------------------------------

def optimizer(model, tr):
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    groups = [{"params": decay, "weight_decay": tr["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    if tr["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=tr["lr"], momentum=tr["momentum"])
    return torch.optim.AdamW(groups, lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])


def step(model, opt, plan, X, Y, s):
    """One training step on batch s (samples s B .. s B + B - 1 modulo the data):
    the plan's micro-batches one after another; the whole batch's loss."""
    tr = plan["train"]
    B = tr["batch"]
    idx = torch.tensor([(s * B + i) % X.shape[0] for i in range(B)])
    x, y = X[idx].to(torch.get_default_dtype()), Y[idx].long()
    positions = max(1, math.prod(plan["target"]["shape"]))
    for g in opt.param_groups:
        g["lr"] = lr_at(tr, s)
    opt.zero_grad()
    total, at = 0.0, 0
    for rows in plan["microbatch_rows"]:
        out = model(x[at:at + rows])
        V = out.shape[-1]
        loss = F.cross_entropy(out.reshape(-1, V), y[at:at + rows].reshape(-1), reduction="sum") / (B * positions)
        loss.backward()
        total += loss.item()
        at += rows
    if tr.get("grad_clip", 0) > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
    opt.step()
    for m in model.modules():
        if isinstance(m, DeferredBN):
            m.commit()
    return total


def main(argv):
    ap = argparse.ArgumentParser(prog="torch_examples.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=MODELS)
    for k in ("plan", "init", "x", "y"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--loss1", type=float, required=True)
    ap.add_argument("--w1")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lossN", type=float)
    ap.add_argument("--wN")
    a = ap.parse_args(argv)
    if a.steps > 1 and (a.lossN is None or a.wN is None):
        ap.error("--steps N > 1 needs --lossN and --wN")
    try:
        plan = json.load(open(a.plan))
        X, Y = read_pgd(a.x), read_pgd(a.y)
        init = load_safetensors.load(a.init)
    except (OSError, ValueError, OracleError) as e:
        print(f"torch_examples.py: {e}", file=sys.stderr)
        return 2
    model = build(a.model, plan, init)
    res = model.load_state_dict({k: v.to(torch.float64) for k, v in init.items()}, strict=False)
    stray = [k for k in res.missing_keys if not k.endswith("num_batches_tracked")] + list(res.unexpected_keys)
    if stray:
        print(f"torch_examples.py: the {a.model} model and {a.init} differ in {stray}", file=sys.stderr)
        return 2
    model.train()
    opt = optimizer(model, plan["train"])
    fails = 0

    def report(good, text):
        nonlocal fails
        print(("ok - " if good else "not ok - ") + text)
        fails += not good

    def weights(path, after):
        w = load_safetensors.load(path)
        for k, v in model.state_dict().items():
            if k.endswith("num_batches_tracked"):
                continue
            e = rel_err(w[k], v) if k in w else float("inf")
            report(e <= 1e-4, f"{k} {list(v.shape)} after {after} (rel {e:.2e})")

    losses = [step(model, opt, plan, X, Y, 0)]
    e = abs(a.loss1 - losses[0]) / abs(losses[0])
    report(e <= 1e-5, f"the loss of step 1, {a.loss1:.10g} vs PyTorch's {losses[0]:.10g} (rel {e:.2e})")
    if a.w1:
        weights(a.w1, "1 step")
    if a.steps < 2:
        return 1 if fails else 0
    for s in range(1, a.steps):
        losses.append(step(model, opt, plan, X, Y, s))
    e = abs(a.lossN - losses[-1]) / abs(losses[-1])
    report(e <= 1e-5, f"the loss of step {a.steps}, {a.lossN:.10g} vs PyTorch's {losses[-1]:.10g} (rel {e:.2e})")
    weights(a.wN, f"{a.steps} steps")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
