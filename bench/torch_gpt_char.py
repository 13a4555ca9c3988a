#!/usr/bin/python3
"""bench/torch_gpt_char.py — the PyTorch eager anchor for the gpt_char benchmark.

The model of examples/gpt_char.pipe written in PyTorch: a token embedding tied
with the output projection, a learned position embedding, pre-LN transformer
blocks (causal multi-head attention with one qkv projection, gelu(tanh) MLP of
4*d), a final layernorm, cross-entropy over every position; AdamW with the
.pipe's betas, eps and weight decay, grad-norm clipping. Trained on random
windows of a byte stream (the same text the pipegen runs read), whole batch per
step, on --threads threads. Prints

    torch-eager  step_ms <median ms>  loss <last loss>

Each step is timed whole (zero_grad, forward, loss, backward, clip, step); the
median is over the steps after the first --warmup.
usage: torch_gpt_char.py --threads N --batch B --seq T --d D --heads H --layers L
                         --steps S --warmup W --lr LR --text FILE
"""
import argparse, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(D, dim=2)
        q = q.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // self.heads))
        a = a.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, idx):
        x = self.wte(idx) + self.pos
        for b in self.blocks:
            x = b(x, self.mask)
        return self.ln_f(x) @ self.wte.weight.t()  # logits, tied with the embedding


def main():
    ap = argparse.ArgumentParser()
    for k, t in (("threads", int), ("batch", int), ("seq", int), ("d", int), ("heads", int), ("layers", int),
                 ("steps", int), ("warmup", int), ("lr", float), ("text", str)):
        ap.add_argument("--" + k, type=t, required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    data = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.long)
    m = GPT(256, a.seq, a.d, a.heads, a.layers)
    decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in m.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(2)
    times, loss = [], float("nan")
    for s in range(a.steps):
        o = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
        x = torch.stack([data[i:i + a.seq] for i in o])
        y = torch.stack([data[i + 1:i + a.seq + 1] for i in o])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = m(x)
        l = F.cross_entropy(logits.view(-1, 256), y.view(-1))
        l.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        loss = l.item()
    print("torch-eager step_ms %.3f loss %.4f" % (statistics.median(times[a.warmup:]), loss))


if __name__ == "__main__":
    main()
