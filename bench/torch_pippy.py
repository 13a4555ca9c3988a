"""bench/torch_pippy.py — the torch.distributed.pipelining anchor of bench/pippy.sh.

One rank of a 2-process pipeline (gloo, CPU) training the model of a pipegen
plan.json with its very chunks and placement: the plan's layers (linear, relu,
gelu, layernorm, embed, pos_embed, causal attention, logits, stash/pop within
a chunk; the convolutional kinds and batchnorm2d; Llama's rmsnorm, swiglu and
attention with rope, kv_heads and no bias, these and the convolutional kinds
by the test oracle's own definitions, tools/torch_layers.py) become one
nn.Module per chunk, chunk c going to the rank the plan
puts it on (loop: c mod P; V: ranks r holds r and 2P-1-r), wrapped in
torch.distributed.pipelining.PipelineStage and run by one of

    Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble

with the plan's micro-batch count. The loss is the plan's (mse(sum): summed,
scale_grads=False; cross_entropy: mean per micro-batch, scale_grads=True, the
batch mean), the optimizer the plan's (SGD with momentum, or AdamW with its
decay on the parameters the plan marks), a parameter the plan ties across
ranks has its gradient summed over them (all_reduce) and shares one Parameter
between the chunks of one rank, and grad_clip clips by the global norm (an
all_reduce of the ranks' sums of squares). Initial values and data are
random: they do not change the work.

A step: a barrier, then zero_grad, schedule.step, the tie sums, the clip and
the optimizer step, timed with perf_counter on each rank; its compute is the
time inside the stages' forward_one_chunk, backward_one_chunk and
backward_weight_one_chunk (the F, B and W of each chunk and micro-batch). Rank
0 prints

    torch-SCHEDULE step_ms <median over steps after --warmup of the slower rank's step>
        bubble <mean over ranks of 1 - compute / step, %> ranks <each rank's bubble>

usage (2 processes): RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p
    torch_pippy.py --plan plan.json --schedule 1F1B|Interleaved1F1B|InterleavedZeroBubble|ZBVZeroBubble
                   --steps S --warmup W
or, one process, `torch_pippy.py --plan plan.json --check`: the chunks chained
on one random micro-batch in float64 against tests/oracle.py's forward of the
plan with the same parameters; prints "torch_pippy check: ok ..." and exits 0
when every output is within 1e-9 relative, else says by how much and exits 1.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining as pp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_layers import attention_general, conv_layer, rmsnorm, swiglu  # noqa: E402  (as the test oracle's)


def fail(msg):
    print("torch_pippy: " + msg, file=sys.stderr)
    sys.exit(1)


class Chunk(nn.Module):
    """The plan's layers of one chunk, applied in order to one current tensor."""

    def __init__(self, layers, params):
        super().__init__()
        self.layers = layers
        self.p = nn.ParameterDict({k.replace(".", "__"): v for k, v in params.items()})

    def par(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, x):
        stash = {}
        for L in self.layers:
            k, a, ps = L["kind"], L["attrs"], L["params"]
            c = conv_layer(k, a, x, [self.par(n) for n in ps if n])
            if c is not None:
                x = c
            elif k == "batchnorm2d":  # the micro-batch's statistics (the running ones are left alone)
                x = F.batch_norm(x, None, None, self.par(ps[0]), self.par(ps[1]), True, 0.0, a["eps"])
            elif k == "linear":
                x = F.linear(x, self.par(ps[0]), self.par(ps[1]) if len(ps) > 1 and ps[1] else None)
            elif k == "relu":
                x = F.relu(x)
            elif k == "gelu":
                x = F.gelu(x, approximate="tanh")
            elif k == "layernorm":
                x = F.layer_norm(x, x.shape[-1:], self.par(ps[0]), self.par(ps[1]), a["eps"])
            elif k == "embed":
                x = F.embedding(x.long(), self.par(ps[0]))
            elif k == "pos_embed":
                x = x + self.par(ps[0])
            elif k == "logits":
                x = x @ self.par(ps[0]).t()
            elif k == "attention" and "kv_heads" in a:
                if a.get("dropout", 0):
                    fail("attention dropout %s: the benchmark runs without dropout" % a["dropout"])
                x = attention_general(x, [self.par(n) for n in ps], a)
            elif k == "rmsnorm":
                x = rmsnorm(x, self.par(ps[0]), a["eps"])
            elif k == "swiglu":
                x = swiglu(x, [self.par(n) for n in ps], a["bias"])
            elif k == "attention":
                B, T, D = x.shape
                h = a["heads"]
                q, kk, v = F.linear(x, self.par(ps[0]), self.par(ps[1])).split(D, dim=2)
                q, kk, v = (t.view(B, T, h, D // h).transpose(1, 2) for t in (q, kk, v))
                y = F.scaled_dot_product_attention(q, kk, v, is_causal=bool(a["causal"]))
                x = F.linear(y.transpose(1, 2).reshape(B, T, D), self.par(ps[2]), self.par(ps[3]))
            elif k == "stash":
                stash[a["skip"]] = x
            elif k == "pop":
                s = stash.pop(a["skip"])
                if a["mode"] == "take":
                    x = s
                else:
                    x = x + s if a["mode"] == "add" else torch.cat([x, s], dim=a["dim"] + 1 if "dim" in a else -1)
            else:
                fail("layer kind %s is not supported by the torch side of the benchmark" % k)
        return x


def init_param(p):
    t = torch.empty(p["shape"])
    if p["init"] == "zeros":
        return t.zero_()
    if p["init"] == "ones":
        return t.fill_(1.0)
    if p["init"] == "uniform":
        return t.uniform_(-p["scale"], p["scale"])
    return t.normal_(0.0, p["scale"])


def build_chunks(plan, chunks, params):
    """One Chunk per chunk id in chunks (in order), their parameters made in
    params (name -> Parameter) where absent, so chunks of one rank share one."""
    pinfo = {p["name"]: p for p in plan["params"]}
    modules = []
    for c in chunks:
        layers = [L for L in plan["layers"] if L["chunk"] == c]
        stashed = {L["attrs"]["skip"] for L in layers if L["kind"] == "stash"}
        for L in layers:
            if L["kind"] == "pop" and L["attrs"]["skip"] not in stashed:
                fail("skip %s crosses chunks: not supported by the torch side" % L["attrs"]["skip"])
        used = {}
        for L in layers:
            for n in L["params"]:
                if n and n not in params:
                    params[n] = nn.Parameter(init_param(pinfo[n]))
                if n:
                    used[n] = params[n]
        modules.append(Chunk(layers, used))
    return modules


def random_batch(plan, rows):
    """rows random samples of the plan's input and target (ids and classes in range)."""
    inp, tgt = plan["input"], plan["target"]
    if inp["dtype"] == "i32":
        vocab = next(L["attrs"]["vocab"] for L in plan["layers"] if L["kind"] == "embed")
        x = torch.randint(0, vocab, [rows] + inp["shape"])
    else:
        x = torch.randn([rows] + inp["shape"])
    if tgt["dtype"] == "i32":
        y = torch.randint(0, plan["layers"][-1]["out"][-1], [rows] + tgt["shape"])
    else:
        y = torch.randn([rows] + tgt["shape"])
    return x, y


def check(plan_path):
    """--check: the chunks chained against tests/oracle.py's forward, float64."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import oracle  # noqa: E402  (sets float64 as the default dtype)
    plan = json.load(open(plan_path))
    torch.manual_seed(1)
    params = {}
    modules = build_chunks(plan, range(plan["partition"]["nchunks"]), params)
    x, _ = random_batch(plan, plan["microbatch_rows"][0])
    h = x
    with torch.no_grad():
        for mod in modules:
            h = mod(h)
        ref = oracle.forward_rows(plan, {n: p.data for n, p in params.items()}, x, None)
    err = float((h - ref).abs().max() / ref.abs().max())
    kinds = sorted({L["kind"] for L in plan["layers"]})
    if h.dtype != torch.float64 or not err <= 1e-9:
        fail("check: the chunks' output differs from tests/oracle.py's by %.3g relative (%s, kinds %s)"
             % (err, h.dtype, " ".join(kinds)))
    print("torch_pippy check: ok, %d chunks equal tests/oracle.py's forward (max rel err %.2g; kinds %s)"
          % (len(modules), err, " ".join(kinds)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--schedule", choices=["1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if args.check:
        check(args.plan)
        return
    if args.schedule is None:
        fail("--schedule is required (or --check)")
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    plan = json.load(open(args.plan))
    part, train = plan["partition"], plan["train"]
    if part["nstages"] != world:
        fail("the plan has %d stages, this run %d processes" % (part["nstages"], world))
    nchunks, m = part["nchunks"], train["microbatches"]
    chunk_rank = {c["chunk"]: c["stage"] for c in part["chunks"]}
    mine = sorted(c for c in chunk_rank if chunk_rank[c] == rank)
    torch.manual_seed(1 + rank)
    pinfo = {p["name"]: p for p in plan["params"]}
    params = {}  # one Parameter per name on this rank: chunks of one rank share it
    modules = build_chunks(plan, mine, params)
    dev = torch.device("cpu")
    stages = [pp.PipelineStage(mod, c, nchunks, dev) for c, mod in zip(mine, modules)]

    loss_name = train["loss"]
    if loss_name == "mse_sum":
        loss_fn, scale = (lambda out, tgt: ((out - tgt) ** 2).sum()), False
    elif loss_name == "mse_mean":
        loss_fn, scale = (lambda out, tgt: ((out - tgt) ** 2).mean()), True
    else:
        ign = train.get("ignore", -100)
        loss_fn, scale = (lambda out, tgt: F.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.reshape(-1).long(),
                                                           ignore_index=ign)), True
    cls = {"1F1B": pp.Schedule1F1B, "Interleaved1F1B": pp.ScheduleInterleaved1F1B,
           "InterleavedZeroBubble": pp.ScheduleInterleavedZeroBubble,
           "ZBVZeroBubble": pp.ScheduleZBVZeroBubble}[args.schedule]
    if args.schedule == "1F1B":
        if len(stages) != 1:
            fail("1F1B runs one chunk per rank, the plan has %d here" % len(stages))
        sched = cls(stages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=scale)
    else:
        sched = cls(stages, n_microbatches=m, loss_fn=loss_fn, scale_grads=scale)

    # the plan's optimizer over this rank's parameters
    decay = [p for n, p in params.items() if pinfo[n]["decay"]]
    rest = [p for n, p in params.items() if not pinfo[n]["decay"]]
    groups = [{"params": decay, "weight_decay": train["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    if train["optimizer"] == "sgd":
        opt = torch.optim.SGD(groups, lr=train["lr"], momentum=train["momentum"])
    else:
        opt = torch.optim.AdamW(groups, lr=train["lr"], betas=(train["beta1"], train["beta2"]), eps=train["eps"])
    tied = [n for n in params if pinfo[n]["tie"] != "none" and len(pinfo[n]["stages"]) > 1]

    # F, B and W time of this rank's stages
    compute = [0.0]

    def timed(fn):
        def wrap(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                compute[0] += time.perf_counter() - t0
        return wrap

    for st in stages:
        for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            setattr(st, name, timed(getattr(st, name)))

    # a fixed random batch of the plan's shapes
    x, y = random_batch(plan, train["batch"])
    first, last = 0 in mine, nchunks - 1 in mine

    steps, bubbles = [], []
    for s in range(args.steps):
        dist.barrier()
        compute[0] = 0.0
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        kw = {}
        if last:
            kw["target"] = y
            kw["losses"] = []
        if first:
            sched.step(x, **kw)
        else:
            sched.step(**kw)
        for n in tied:
            g = params[n].grad if params[n].grad is not None else torch.zeros_like(params[n])
            dist.all_reduce(g)
            params[n].grad = g
        if train["grad_clip"] > 0:
            sq = torch.zeros(1)
            for n, p in params.items():
                if p.grad is not None and (n not in tied or pinfo[n]["owner"] == rank):
                    sq += p.grad.pow(2).sum()
            dist.all_reduce(sq)
            coef = train["grad_clip"] / (math.sqrt(sq.item()) + 1e-6)
            if coef < 1:
                for p in params.values():
                    if p.grad is not None:
                        p.grad.mul_(coef)
        opt.step()
        dt = time.perf_counter() - t0
        if s >= args.warmup:
            steps.append(dt)
            bubbles.append(1.0 - compute[0] / dt)
    per_rank = [None] * world
    dist.all_gather_object(per_rank, (steps, bubbles))
    if rank == 0:
        slow = [max(r[0][i] for r in per_rank) for i in range(len(steps))]
        rb = [statistics.median(r[1]) for r in per_rank]
        print("torch-%s step_ms %.3f bubble %.1f ranks %s" % (args.schedule, statistics.median(slow) * 1000,
              100 * sum(rb) / len(rb), " ".join("%.1f" % (100 * b) for b in rb)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
