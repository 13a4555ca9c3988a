"""bench/hf_gen.py — the transformers side of bench/gen.sh and bench/llama_ft.sh
(the Python of `tools/deps.sh hf`):

    hf_gen.py make DIR          a random LlamaForCausalLM (d 256, 4 blocks, 8 heads,
                                  4 kv heads, SwiGLU 688, vocab 2048, seed 0) saved in DIR
    hf_gen.py prompts DIR OUT --n B --len P
                                  OUT: B prompts of P random ids (i32 [B, P], seed 1)
    hf_gen.py stream DIR OUT --tokens N
                                  OUT: a token stream of N random ids (rank 1, seed 2)
    hf_gen.py train DIR STREAM --batch B --seq T --steps S --warmup W --threads T
                                  PyTorch eager fine-tuning of DIR's model in float32 on
                                  random windows of STREAM: AdamW (lr 1e-4, betas (0.9,
                                  0.95), no decay, as `pipegen import hf` writes), grad
                                  clip 1, cross entropy; prints "torch-eager step_ms X"
                                  (the median of steps W+1..S; perf_counter around
                                  zero_grad + forward + loss + backward + clip + step)
    hf_gen.py time DIR PROMPTS --new N --threads T
                                  transformers' generate(do_sample=False, use_cache=True)
                                  of all the prompts as one batch, N new tokens each (no
                                  end of text), in float32; prints
                                  "hf-generate tokens B*N seconds S tokens_per_s X"
                                  (perf_counter around generate, after one warm-up call)
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch  # noqa: E402
from oracle import read_pgd, write_pgd  # noqa: E402


def cmd_make(a):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(a.dir, safe_serialization=True)


def cmd_prompts(a):
    import json
    vocab = json.load(open(os.path.join(a.dir, "config.json")))["vocab_size"]
    g = torch.Generator().manual_seed(1)
    write_pgd(a.out, torch.randint(0, vocab, (a.n, a.len), generator=g, dtype=torch.int32))


def cmd_stream(a):
    import json
    vocab = json.load(open(os.path.join(a.dir, "config.json")))["vocab_size"]
    g = torch.Generator().manual_seed(2)
    write_pgd(a.out, torch.randint(0, vocab, (a.tokens,), generator=g, dtype=torch.int32))


def cmd_train(a):
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.dir).train()
    s = read_pgd(a.stream).long()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(3)
    times = []
    for step in range(a.steps):
        off = torch.randint(0, s.numel() - a.seq - 1, (a.batch,), generator=g)
        x = torch.stack([s[o:o + a.seq] for o in off])
        y = torch.stack([s[o + 1:o + a.seq + 1] for o in off])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    t = sorted(times[a.warmup:])
    med = t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2
    print(f"torch-eager step_ms {med * 1000:.3f} loss {loss.item():.4f}")


def cmd_time(a):
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.dir).eval()
    model.generation_config.eos_token_id = None
    x = read_pgd(a.prompts).long()
    kw = dict(do_sample=False, use_cache=True, max_new_tokens=a.new, min_new_tokens=a.new, pad_token_id=0,
              attention_mask=torch.ones_like(x))
    with torch.no_grad():
        model.generate(x, **{**kw, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        t0 = time.perf_counter()
        y = model.generate(x, **kw)
        s = time.perf_counter() - t0
    n = (y.shape[1] - x.shape[1]) * y.shape[0]
    print(f"hf-generate tokens {n} seconds {s:.4f} tokens_per_s {n / s:.2f}")


def main(argv):
    ap = argparse.ArgumentParser(prog="hf_gen.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p = sub.add_parser("prompts")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--len", type=int, required=True)
    p = sub.add_parser("stream")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--tokens", type=int, required=True)
    p = sub.add_parser("train")
    p.add_argument("dir")
    p.add_argument("stream")
    for k in ("batch", "seq", "steps", "warmup", "threads"):
        p.add_argument("--" + k, type=int, required=True)
    p = sub.add_parser("time")
    p.add_argument("dir")
    p.add_argument("prompts")
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    a = ap.parse_args(argv)
    {"make": cmd_make, "prompts": cmd_prompts, "stream": cmd_stream, "train": cmd_train, "time": cmd_time}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
