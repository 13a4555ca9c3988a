#!/usr/bin/python3
"""tests/oracle.py — the independent oracle: rebuild a pipegen model in PyTorch
(Debian's python3-torch, float64) from its plan.json alone, and check what the
stage programs computed.

    oracle.py data  PLAN OUTDIR [--samples N] [--seed S]
        write OUTDIR/x.pgd and OUTDIR/y.pgd: N seeded samples of the plan's input
        and target (f32 uniform in [-1, 1), i32 ids / classes in range)
    oracle.py accuracy PLAN --weights W --x X --y Y
        the share of samples whose largest output is the target class, by the
        model in inference (batch norm by its running statistics), printed as
        "accuracy A (K of N)"
    oracle.py check PLAN --init W0 --x X --y Y [--loss1 L --grads G]
                    [--steps N --final WN] [--grad-rtol 1e-5] [--weight-rtol 1e-4]
        W0: the runtime's initial weights (`stage --steps 0 --save W0`);
        L, G: the loss the runtime printed after 1 step and its gradients of that
        step (`--steps 1 --save-grads G`); WN: its weights after N steps.
        Prints one line per comparison, "ok - ..." or "not ok - ...", and exits 1
        if any failed, 2 on a usage or model error.

The model is built layer by layer from plan.json's `layers`, with its own code
for every layer kind (nothing is shared with the C runtime; the convolutional
kinds by torch.nn.functional): the loss of the
whole batch (mse_sum: sum of squares; mse_mean: divided by batch * target
elements; cross_entropy: mean over batch * positions) and every parameter
gradient by autograd; then N optimizer steps with torch.optim.SGD or AdamW on
the same batches the runtime used (step t reads samples t*B .. t*B+B-1 modulo
the file's sample count). Relative error of a tensor: max|a - b| / max|b|.

Batch norm (batchnorm, batchnorm2d) normalises each micro-batch by its own
statistics, as pipegen (and torchgpipe) do, so a plan with one runs its
micro-batches one at a time (plan.json's microbatch_rows); its running
statistics are updated from each micro-batch, or once per step from the whole
batch when deferred, and compared after the N steps like the weights.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import load_safetensors  # noqa: E402
from torch_layers import attention_general, conv_layer, rmsnorm, swiglu  # noqa: E402  (the convolutional and Llama kinds)

torch.set_default_dtype(torch.float64)
DT = torch.float64


class OracleError(Exception):
    pass


# ---- .pgd data files (runtime/core/pg_io.h) ---------------------------------

def read_pgd(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:4] != b"PGD1":
        raise OracleError(f"{path}: not a pipegen data file")
    ver, dt, rank = struct.unpack("<III", raw[4:16])
    if ver != 1 or dt not in (0, 2) or not 1 <= rank <= 5:
        raise OracleError(f"{path}: unsupported header (version {ver}, dtype {dt}, rank {rank})")
    dims = list(struct.unpack("<" + "Q" * rank, raw[16:16 + 8 * rank]))
    body = bytearray(raw[16 + 8 * rank:])
    numel = math.prod(dims)
    if len(body) != numel * 4:
        raise OracleError(f"{path}: {len(body)} data bytes, header says {numel * 4}")
    t = torch.frombuffer(body, dtype=torch.float32 if dt == 0 else torch.int32)
    return t.reshape(dims).clone()


def write_pgd(path, t):
    dt = 0 if t.dtype == torch.float32 else 2
    if t.dtype not in (torch.float32, torch.int32):
        raise OracleError("write_pgd: f32 or i32 only")
    hdr = b"PGD1" + struct.pack("<III", 1, dt, t.dim()) + struct.pack("<" + "Q" * t.dim(), *t.shape)
    with open(path, "wb") as f:
        f.write(hdr)
        f.write(t.contiguous().numpy().tobytes())


# ---- the model ----------------------------------------------------------------

def layer_params(layer, params):
    try:
        return [params[n] for n in layer["params"]]
    except KeyError as e:
        raise OracleError(f"layer {layer['name']}: parameter {e} missing from the weights")


def attention(h, wqkv, bqkv, wo, bo, heads, causal):
    B, T, d = h.shape
    hd = d // heads
    qkv = h @ wqkv.t() + bqkv                        # [B, T, 3d]: q | k | v
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
    split = lambda z: z.reshape(B, T, heads, hd).transpose(1, 2)  # noqa: E731  [B, h, T, hd]
    q, k, v = split(q), split(k), split(v)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)    # [B, h, T, T]
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    a = torch.softmax(s, dim=-1)
    ctx = (a @ v).transpose(1, 2).reshape(B, T, d)
    return ctx @ wo.t() + bo


def batchnorm(L, h, p, stats, running=None):
    """Training batch norm of one micro-batch h: per feature (the last dim) or,
    batchnorm2d, per channel (dim 1 of [B, C, H, W]); biased variance. Records
    the input's per-channel sums for the running statistics in stats. With
    running (the buffers by name): inference, by the running statistics."""
    dims = (0, 2, 3) if L["kind"] == "batchnorm2d" else tuple(range(h.dim() - 1))
    shape = [1, -1, 1, 1] if L["kind"] == "batchnorm2d" else [-1]
    if running is not None:
        mu = running[L["buffers"][0]].reshape(shape)
        var = running[L["buffers"][1]].reshape(shape)
    else:
        mu = h.mean(dims, keepdim=True)
        var = ((h - mu) ** 2).mean(dims, keepdim=True)
    if stats is not None:
        n = h.numel() // h.shape[1 if L["kind"] == "batchnorm2d" else -1]
        st = stats.setdefault(L["name"], [])
        st.append((h.detach().sum(dims), (h.detach() ** 2).sum(dims), n))
    y = (h - mu) / torch.sqrt(var + L["attrs"]["eps"])
    if len(p) >= 1:
        y = y * p[0].reshape(shape)
    if len(p) >= 2:
        y = y + p[1].reshape(shape)
    return y


def has_batchnorm(plan):
    return any(L["kind"] in ("batchnorm", "batchnorm2d") for L in plan["layers"])


def forward(plan, params, x, stats=None, running=None):
    """The model output for a batch x (float64, or int64 ids); with batch norm,
    micro-batch by micro-batch (stats, running: see batchnorm())."""
    if running is not None:
        return forward_rows(plan, params, x, None, running)
    if has_batchnorm(plan) and len(plan["microbatch_rows"]) > 1:
        outs, at = [], 0
        for rows in plan["microbatch_rows"]:
            outs.append(forward_rows(plan, params, x[at:at + rows], stats))
            at += rows
        return torch.cat(outs)
    return forward_rows(plan, params, x, stats)


def forward_rows(plan, params, x, stats, running=None):
    h = x
    stash = {}
    for L in plan["layers"]:
        k, at = L["kind"], L["attrs"]
        p = layer_params(L, params)
        c = conv_layer(k, at, h, p)
        if c is not None:
            h = c
        elif k in ("batchnorm", "batchnorm2d"):
            h = batchnorm(L, h, p, stats, running)
        elif k == "linear":
            h = h @ p[0].t()
            if at.get("bias", True):
                h = h + p[1]
        elif k == "relu":
            h = torch.relu(h)
        elif k == "gelu":
            c = math.sqrt(2.0 / math.pi)
            h = 0.5 * h * (1.0 + torch.tanh(c * (h + 0.044715 * h ** 3)))
        elif k == "layernorm":
            d = h.shape[-1]
            mu = h.mean(-1, keepdim=True)
            var = ((h - mu) ** 2).mean(-1, keepdim=True)
            h = (h - mu) / torch.sqrt(var + at["eps"])
            if len(p) >= 1:
                h = h * p[0]
            if len(p) >= 2:
                h = h + p[1]
            assert h.shape[-1] == d
        elif k == "embed":
            h = p[0][h.long()]
        elif k == "pos_embed":
            h = h + p[0][:h.shape[1]]
        elif k == "rmsnorm":
            h = rmsnorm(h, p[0], at["eps"])
        elif k == "swiglu":
            h = swiglu(h, p, at["bias"])
        elif k == "logits":
            h = h @ p[0].t()
        elif k == "attention" and "kv_heads" in at:
            if at.get("dropout", 0):
                raise OracleError(f"layer {L['name']}: attention dropout {at['dropout']}: the oracle only knows 0")
            h = attention_general(h, p, at)
        elif k == "attention":
            if len(p) != 4:
                raise OracleError(f"layer {L['name']}: attention wants 4 parameters, the plan lists {len(p)}")
            h = attention(h, *p, at["heads"], at["causal"])
        elif k == "dropout":
            if at["p"] != 0:
                raise OracleError(f"layer {L['name']}: dropout p = {at['p']}: the oracle only knows p = 0")
        elif k == "stash":
            stash[at["skip"]] = h
        elif k == "pop":
            s = stash.pop(at["skip"])
            if at["mode"] == "add":
                h = h + s
            elif at["mode"] == "concat":
                h = torch.cat([h, s], dim=at["dim"] + 1 if "dim" in at else -1)
            elif at["mode"] == "take":
                h = s
            else:
                raise OracleError(f"layer {L['name']}: unknown pop mode {at['mode']!r}")
        else:
            raise OracleError(f"layer {L['name']}: the oracle does not know layer kind {k!r}")
        if list(h.shape[1:]) != list(L["out"]):
            raise OracleError(f"layer {L['name']} ({k}): output {list(h.shape[1:])}, the plan says {L['out']}")
    return h


def loss_of(plan, y, t):
    kind = plan["train"]["loss"]
    B = y.shape[0]
    if kind == "mse_sum":
        return ((y - t) ** 2).sum()
    if kind == "mse_mean":
        return ((y - t) ** 2).sum() / (B * math.prod(plan["target"]["shape"]))
    if kind == "cross_entropy" and "ignore" in plan["train"]:
        V = y.shape[-1]
        t = t.reshape(-1).long()
        n = int((t != plan["train"]["ignore"]).sum())
        s = F.cross_entropy(y.reshape(-1, V), t, ignore_index=plan["train"]["ignore"], reduction="sum")
        return s / n if n else s * 0
    if kind == "cross_entropy":
        V = y.shape[-1]
        positions = math.prod(plan["target"]["shape"])
        return F.cross_entropy(y.reshape(-1, V), t.reshape(-1).long(), reduction="sum") / (B * positions)
    raise OracleError(f"unknown loss {kind!r}")


def batch(data, step, B):
    n = data.shape[0]
    idx = torch.tensor([(step * B + i) % n for i in range(B)], dtype=torch.long)
    d = data[idx]
    return d.to(DT) if d.dtype == torch.float32 else d.long()


def lr_at(tr, step):
    """README.md's learning-rate schedules: a linear warm-up over `warmup` steps,
    then constant, cosine or linear down to lr_min at `steps`, or inverse_sqrt."""
    kind, w, lr = tr.get("lr_schedule", "constant"), tr.get("warmup", 0), tr["lr"]
    if step < w:
        return lr * (step + 1) / w
    if kind == "inverse_sqrt":
        return lr * math.sqrt(max(w, 1) / (step + 1))
    if kind not in ("cosine", "linear"):
        return lr
    span = tr["steps"] - w
    p = min((step - w) / span if span > 0 else 1.0, 1.0)
    if kind == "linear":
        return tr["lr_min"] + (lr - tr["lr_min"]) * (1.0 - p)
    return tr["lr_min"] + 0.5 * (lr - tr["lr_min"]) * (1.0 + math.cos(math.pi * p))


def clip_grads(params, clip):
    """Global-norm clipping as torch.nn.utils.clip_grad_norm_: scale by clip / (norm + 1e-6) when below 1."""
    if clip <= 0:
        return
    norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values() if p.grad is not None))
    coef = clip / (norm + 1e-6)
    if coef < 1.0:
        for p in params.values():
            if p.grad is not None:
                p.grad.mul_(coef)


def rel_err(a, b):
    a = a.to(DT)
    b = b.to(DT)
    if a.shape != b.shape:
        return float("inf")
    den = b.abs().max().item() if b.numel() else 0.0
    num = (a - b).abs().max().item() if b.numel() else 0.0
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


# ---- commands -------------------------------------------------------------------

def cmd_data(a):
    plan = json.load(open(a.plan))
    g = torch.Generator().manual_seed(a.seed)
    out = {}
    for which, fname in (("input", "x.pgd"), ("target", "y.pgd")):
        spec = plan[which]
        shape = [a.samples] + list(spec["shape"])
        if spec["dtype"] == "f32":
            t = (torch.rand(shape, generator=g, dtype=torch.float32) * 2 - 1)
        elif spec["dtype"] == "i32":
            hi = id_range(plan, which)
            t = torch.randint(0, hi, shape, generator=g, dtype=torch.int32)
            if which == "target" and "ignore" in plan["train"]:  # a quarter of the positions ignored
                drop = torch.rand(shape, generator=g) < 0.25
                t = torch.where(drop, torch.full_like(t, plan["train"]["ignore"]), t)
        else:
            raise OracleError(f"{which}: dtype {spec['dtype']} not supported")
        write_pgd(os.path.join(a.outdir, fname), t)
        out[which] = t
    return 0


def id_range(plan, which):
    """ids of an i32 input index the first embed; class targets the output's last dim."""
    if which == "input":
        for L in plan["layers"]:
            if L["kind"] == "embed":
                return L["attrs"]["vocab"]
        raise OracleError("i32 input without an embed layer")
    return plan["layers"][-1]["out"][-1]


def cmd_check(a):
    plan = json.load(open(a.plan))
    tr = plan["train"]
    if tr.get("grad_clip", 0) and tr["grad_clip"] > 0:
        clip = tr["grad_clip"]
    else:
        clip = 0.0
    meta = {p["name"]: p for p in plan["params"] if not p["buffer"]}
    init = load_safetensors.load(a.init)
    missing = [p["name"] for p in plan["params"] if p["name"] not in init]
    if missing:
        raise OracleError(f"{a.init}: missing {missing}")
    params = {n: init[n].to(DT).clone().requires_grad_(True) for n in meta}
    buffers = {p["name"]: init[p["name"]].to(DT).clone() for p in plan["params"] if p["buffer"]}
    X, Y = read_pgd(a.x), read_pgd(a.y)
    B = tr["batch"]
    fails = 0

    def report(good, text):
        nonlocal fails
        print(("ok - " if good else "not ok - ") + text)
        if not good:
            fails += 1

    # step 1: loss and gradients of batch 0
    y = forward(plan, params, batch(X, 0, B))
    loss = loss_of(plan, y, batch(Y, 0, B))
    loss.backward()
    clip_grads(params, clip)  # the runtime saves the gradients the optimizer sees
    if a.loss1 is not None:
        e = abs(a.loss1 - loss.item()) / abs(loss.item()) if loss.item() != 0 else abs(a.loss1)
        report(e <= a.grad_rtol, f"step-1 loss {a.loss1:.10g} vs oracle {loss.item():.10g} (rel {e:.2e})")
    if a.grads:
        g = load_safetensors.load(a.grads)
        for n, p in params.items():
            if n not in g:
                report(False, f"gradient of {n}: missing from {os.path.basename(a.grads)}")
                continue
            ref = p.grad if p.grad is not None else torch.zeros_like(p)
            e = rel_err(g[n], ref)
            report(e <= a.grad_rtol, f"step-1 gradient of {n} {list(p.shape)} (rel {e:.2e})")

    # N steps with torch's optimizer on the runtime's batches
    if a.steps:
        for p in params.values():
            p.grad = None
        # a torch parameter group per weight-decay rate: each parameter's own
        # (plan.json: its `weight_decay = V for` group's, or the default rule's)
        rates = {}
        for n in meta:
            wd = meta[n]["weight_decay"] if "weight_decay" in meta[n] else (tr["weight_decay"] if meta[n]["decay"] else 0.0)
            rates.setdefault(wd, []).append(params[n])
        groups = [{"params": ps, "weight_decay": wd} for wd, ps in rates.items()]
        if tr["optimizer"] == "sgd":
            opt = torch.optim.SGD(groups, lr=tr["lr"], momentum=tr["momentum"])
        elif tr["optimizer"] == "adamw":
            opt = torch.optim.AdamW(groups, lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])
        elif tr["optimizer"] == "adam":
            if any(wd != 0 for wd in rates):
                raise OracleError("adam with a weight decay: pipegen refuses that model")
            opt = torch.optim.Adam(groups, lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"])
        else:
            raise OracleError(f"unknown optimizer {tr['optimizer']!r}")
        for s in range(a.steps):
            for gr in opt.param_groups:
                gr["lr"] = lr_at(tr, s)
            opt.zero_grad(set_to_none=False)
            stats = {}
            loss = loss_of(plan, forward(plan, params, batch(X, s, B), stats), batch(Y, s, B))
            loss.backward()
            clip_grads(params, clip)
            opt.step()
            running_update(plan, buffers, stats)
        w = load_safetensors.load(a.final)
        for n, p in params.items():
            if n not in w:
                report(False, f"weights of {n} after {a.steps} steps: missing from {os.path.basename(a.final)}")
                continue
            e = rel_err(w[n], p.detach())
            moved = rel_err(init[n], p.detach())
            report(e <= a.weight_rtol, f"weights of {n} after {a.steps} steps (rel {e:.2e}; moved {moved:.2e})")
        for n, v in buffers.items():
            e = rel_err(w[n], v) if n in w else float("inf")
            report(e <= a.weight_rtol, f"running statistic {n} after {a.steps} steps (rel {e:.2e})")
    return 1 if fails else 0


def running_update(plan, buffers, stats):
    """Batch norm's running mean and unbiased variance: from each micro-batch in
    order, or (deferred) once from the whole batch's sums."""
    for L in plan["layers"]:
        if L["name"] not in stats:
            continue
        rm, rv = buffers[L["buffers"][0]], buffers[L["buffers"][1]]
        mom = L["attrs"]["momentum"]
        parts = stats[L["name"]]
        if L["attrs"]["deferred"]:
            parts = [(sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))]
        for sm, sq, n in parts:
            mu = sm / n
            var = ((sq - sm * mu) / (n - 1)).clamp(min=0)
            rm.mul_(1 - mom).add_(mom * mu)
            rv.mul_(1 - mom).add_(mom * var)


def cmd_accuracy(a):
    plan = json.load(open(a.plan))
    w = load_safetensors.load(a.weights)
    missing = [p["name"] for p in plan["params"] if p["name"] not in w]
    if missing:
        raise OracleError(f"{a.weights}: missing {missing}")
    params = {p["name"]: w[p["name"]].to(DT) for p in plan["params"] if not p["buffer"]}
    running = {p["name"]: w[p["name"]].to(DT) for p in plan["params"] if p["buffer"]}
    X, Y = read_pgd(a.x), read_pgd(a.y)
    if X.shape[0] != Y.shape[0]:
        raise OracleError(f"{a.x} holds {X.shape[0]} samples but {a.y} {Y.shape[0]}")
    with torch.no_grad():
        out = forward(plan, params, X.to(DT), running=running)
    good = int((out.argmax(-1) == Y.long()).sum())
    print(f"accuracy {good / Y.numel():.4f} ({good} of {Y.numel()})")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="oracle.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("plan")
    d.add_argument("outdir")
    d.add_argument("--samples", type=int, default=32)
    d.add_argument("--seed", type=int, default=1)
    e = sub.add_parser("accuracy")
    e.add_argument("plan")
    e.add_argument("--weights", required=True)
    e.add_argument("--x", required=True)
    e.add_argument("--y", required=True)
    c = sub.add_parser("check")
    c.add_argument("plan")
    c.add_argument("--init", required=True)
    c.add_argument("--x", required=True)
    c.add_argument("--y", required=True)
    c.add_argument("--loss1", type=float)
    c.add_argument("--grads")
    c.add_argument("--steps", type=int, default=0)
    c.add_argument("--final")
    c.add_argument("--grad-rtol", type=float, default=1e-5)
    c.add_argument("--weight-rtol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if a.cmd == "check" and a.steps and not a.final:
        ap.error("--steps needs --final")
    try:
        return {"data": cmd_data, "accuracy": cmd_accuracy, "check": cmd_check}[a.cmd](a)
    except (OracleError, OSError, ValueError, KeyError) as e:
        print(f"oracle.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
