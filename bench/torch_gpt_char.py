#!/usr/bin/python3
"""bench/torch_gpt_char.py — the PyTorch eager anchor for the gpt_char benchmark.

The model of examples/gpt_char.pipe written in PyTorch, read from the plan.json
that `pipegen gen` wrote for it (vocab, seq, d, heads, the number of blocks,
batch, AdamW's lr, betas, eps and weight decay, which parameters decay, the
gradient clip): a token embedding wte tied with the output projection, a
learned position embedding, pre-LN transformer blocks (layernorm, causal
multi-head attention with one biased qkv projection and a biased output
projection, residual add; layernorm, linear d -> 4d, gelu (tanh form),
linear 4d -> d, residual add), a final layernorm, logits = x wte^T,
cross-entropy over every position, float32. The parameter names and shapes are
checked against the plan's, so the two programs train the same model (initial
values and the learning-rate schedule differ; they do not change the work).

Trained on random windows of seq + 1 bytes of --text (the byte stream the
pipegen runs read through build/pipedata), the whole batch per step, on
--threads threads (torch.set_num_threads). Prints

    torch-eager threads N step_ms <median ms> loss <last loss>

Each step is timed whole (zero_grad, forward, loss, backward, clip, AdamW
step); the median is over the steps after the first --warmup.
usage: torch_gpt_char.py --plan plan.json --text FILE --threads N --steps S --warmup W
"""
import argparse, json, math, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        B, T, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(x).split(D, dim=2)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        a = a.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class PosEmbed(nn.Module):
    def __init__(self, seq, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(seq, d) * 0.02)


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, heads, blocks):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.pos = PosEmbed(seq, d)
        self.names = blocks
        for n in blocks:
            setattr(self, n, Block(d, heads))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, idx):
        x = F.embedding(idx, self.wte) + self.pos.weight
        for n in self.names:
            x = getattr(self, n)(x, self.mask)
        return self.ln_f(x) @ self.wte.t()  # logits by the tied table


def from_plan(path):
    """The model's sizes and training settings from a pipegen plan.json, checked
    to be the gpt_char shape (embed, pos_embed, blocks, layernorm, logits)."""
    p = json.load(open(path))
    t = p["train"]
    if t["optimizer"] != "adamw" or t["loss"] != "cross_entropy" or t.get("precision", "f32") != "f32":
        sys.exit(f"{path}: expected adamw, cross_entropy and f32, got {t['optimizer']}, {t['loss']}, {t.get('precision')}")
    kinds = [l["kind"] for l in p["layers"]]
    emb = next(l for l in p["layers"] if l["kind"] == "embed")["attrs"]
    attn = [l for l in p["layers"] if l["kind"] == "attention"]
    if not attn or any(not l["attrs"]["causal"] for l in attn) or len({l["attrs"]["heads"] for l in attn}) != 1:
        sys.exit(f"{path}: expected causal attention with one head count")
    if kinds.count("gelu") != len(attn) or kinds[:2] != ["embed", "pos_embed"] or kinds[-1] != "logits":
        sys.exit(f"{path}: not a gpt_char-shaped model (layer kinds {kinds})")
    return dict(vocab=emb["vocab"], d=emb["dim"], seq=p["input"]["shape"][0], heads=attn[0]["attrs"]["heads"],
                blocks=[l["name"].split(".")[0] for l in attn], batch=t["batch"], lr=t["lr"],
                betas=(t["beta1"], t["beta2"]), eps=t["eps"], wd=t["weight_decay"], clip=t["grad_clip"],
                params={q["name"]: (tuple(q["shape"]), q["decay"]) for q in p["params"] if not q["buffer"]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    c = from_plan(a.plan)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = GPT(c["vocab"], c["seq"], c["d"], c["heads"], c["blocks"])
    mine = {n: tuple(q.shape) for n, q in m.named_parameters()}
    want = {n: s for n, (s, _) in c["params"].items()}
    if mine != want:
        sys.exit(f"parameters differ from {a.plan}: torch only {sorted(set(mine.items()) - set(want.items()))}, "
                 f"plan only {sorted(set(want.items()) - set(mine.items()))}")
    decay = [q for n, q in m.named_parameters() if c["params"][n][1]]
    rest = [q for n, q in m.named_parameters() if not c["params"][n][1]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]}, {"params": rest, "weight_decay": 0.0}],
                            lr=c["lr"], betas=c["betas"], eps=c["eps"])
    data = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.long)
    if int(data.max()) >= c["vocab"]:
        sys.exit(f"{a.text}: byte values reach {int(data.max())}, outside the vocabulary {c['vocab']}")
    g = torch.Generator().manual_seed(2)
    B, T, V = c["batch"], c["seq"], c["vocab"]
    times, loss = [], float("nan")
    for _ in range(a.steps):
        o = torch.randint(0, len(data) - T - 1, (B,), generator=g)
        w = torch.stack([data[i:i + T + 1] for i in o.tolist()])
        x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        l = F.cross_entropy(m(x).view(-1, V), y.view(-1))
        l.backward()
        if c["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(m.parameters(), c["clip"])
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        loss = l.item()
    kept = times[a.warmup:] if a.steps > a.warmup else times
    print(f"torch-eager threads {torch.get_num_threads()} step_ms {statistics.median(kept):.3f} loss {loss:.4f}",
          flush=True)


if __name__ == "__main__":
    main()
