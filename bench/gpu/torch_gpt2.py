#!/usr/bin/env python3
"""bench/gpu/torch_gpt2.py — the PyTorch anchors of the GPU benchmark (bench/gpu/run.sh).

The GPT of a pipegen plan.json (examples/gpt2_small.pipe by default: token
embedding tied with the logits, learned positions, pre-LN blocks of causal
multi-head attention with a biased qkv and output projection, gelu (tanh) MLP
d -> 4d -> d, final layernorm, cross-entropy), on one CUDA GPU, the whole
batch per step, in bf16 autocast with f32 weights (the pipegen runtime's
`precision = bf16`: bf16 GEMM operands, f32 master weights and gradients),
AdamW with the plan's settings and its gradient clip. The parameter count is
checked against the plan's. Random token windows (synthetic, as the pipegen
runs without --data). `--mode eager` or `--mode compile` (torch.compile of the
model). Prints

    torch-<mode> step_ms <median ms> tokens_per_s <tokens/s> loss <last loss> params <count>

Each step (zero_grad, forward, loss, backward, clip, AdamW step) is timed with
torch.cuda.synchronize() on both sides; the median is over the steps after
the first --warmup (torch.compile compiles during the warm-up).
usage: torch_gpt2.py --plan plan.json [--mode eager|compile] [--steps 20] [--warmup 5]
"""
import argparse, json, math, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def attn(self, x):
        B, T, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        # unfused, as the pipegen runtime (no flash attention there either)
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        a = a.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.out((a @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, heads, nblocks):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.wpe = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(nblocks))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        x = F.embedding(idx, self.wte) + self.wpe
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.t()


def from_plan(path):
    p = json.load(open(path))
    t = p["train"]
    layers = p["layers"]
    emb = next(l for l in layers if l["kind"] == "embed")["attrs"]
    attn = [l for l in layers if l["kind"] == "attention"]
    if t["optimizer"] != "adamw" or t["loss"] != "cross_entropy" or not attn:
        sys.exit(f"{path}: expected a GPT with adamw and cross_entropy")
    nparams = sum(math.prod(q["shape"]) for q in p["params"] if not q["buffer"])
    return dict(vocab=emb["vocab"], d=emb["dim"], seq=p["input"]["shape"][0], heads=attn[0]["attrs"]["heads"],
                nblocks=len(attn), batch=t["batch"], lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"],
                wd=t["weight_decay"], clip=t["grad_clip"], precision=t.get("precision", "f32"), nparams=nparams)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpt2.py: no CUDA GPU visible to PyTorch")
    c = from_plan(a.plan)
    dev = torch.device("cuda")
    torch.manual_seed(1)
    m = GPT(c["vocab"], c["seq"], c["d"], c["heads"], c["nblocks"]).to(dev)
    mine = sum(q.numel() for q in m.parameters())
    if mine != c["nparams"]:
        sys.exit(f"torch model has {mine} parameters, {a.plan} says {c['nparams']}")
    decay = [q for q in m.parameters() if q.dim() >= 2]
    rest = [q for q in m.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]}, {"params": rest, "weight_decay": 0.0}],
                            lr=c["lr"], betas=c["betas"], eps=c["eps"])
    fwd = torch.compile(m) if a.mode == "compile" else m
    bf16 = c["precision"] == "bf16"
    B, T, V = c["batch"], c["seq"], c["vocab"]
    g = torch.Generator(device=dev).manual_seed(2)
    times, loss = [], float("nan")
    for _ in range(a.steps):
        x = torch.randint(0, V, (B, T), device=dev, generator=g)
        y = torch.randint(0, V, (B, T), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(x)
        l = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
        l.backward()
        if c["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(m.parameters(), c["clip"])
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        loss = l.item()
    kept = times[a.warmup:] if a.steps > a.warmup else times
    ms = statistics.median(kept)
    print(f"torch-{a.mode} step_ms {ms:.3f} tokens_per_s {B * T / (ms / 1000):.1f} loss {loss:.4f} params {mine}",
          flush=True)


if __name__ == "__main__":
    main()
