"""tests/hf_check.py — tests/hf.t's side in transformers: tiny random Hugging
Face models, their data, and the comparisons (float64 on the torch side).

    hf_check.py make KIND DIR          gpt2 | llama_gqa | llama_mqa_tied; perturbed
                                       norms and biases, gpt2 saved in shards
    hf_check.py data DIR OUT --seq T --samples N
                                       OUT/x.pgd, OUT/y.pgd (y: the next token, a quarter -100)
    hf_check.py step DIR OUT --batch B --loss L --grads G
                                       the first batch's loss and every gradient against
                                       pipegen's, mapped by tools/hf.py's names and layouts
    hf_check.py same DIR EXPORTED OUT  from_pretrained(EXPORTED)'s logits equal DIR's
    hf_check.py prompts DIR OUT        OUT/prompts.pgd: prompts of 3, 6, 1 and 4 random ids
                                       (i32 [4, 6], -1 after each)
    hf_check.py greedy DIR OUT --gen G --new N
                                       transformers' generate(do_sample=False) of each prompt,
                                       N new tokens (no end-of-text id), in float32, equals the
                                       tokens of --gen-out G token for token
    hf_check.py multi SPEC             the commands of SPEC in this one process (importing torch
                                       and transformers takes seconds: tests/hf.t makes its ~40
                                       comparisons in 6 launches), a line each: OUTFILE, a tab,
                                       then the command and its arguments (shell-quoted); each
                                       command's output goes to OUTFILE, its exit status to
                                       OUTFILE.rc

Each comparison prints one "ok - " or "not ok - " line; the exit status is 1
when any failed.
"""
import argparse
import os
import shlex
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import hf  # noqa: E402  (tools/hf.py: the import's names and layouts)
from oracle import read_pgd, write_pgd, rel_err  # noqa: E402

torch.set_default_dtype(torch.float32)  # oracle.py's is float64: the models are made and saved in float32

IGNORE = -100
fails = 0


def report(good, text):
    global fails
    print(("ok - " if good else "not ok - ") + text)
    fails += 0 if good else 1


def cmd_make(a):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(11)
    if a.kind == "gpt2":
        cfg = GPT2Config(vocab_size=37, initializer_range=0.2, n_embd=16, n_layer=4, n_head=2, n_positions=24, layer_norm_epsilon=1e-4,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg)
    elif a.kind == "llama_gqa":
        cfg = LlamaConfig(vocab_size=37, initializer_range=0.2, hidden_size=16, intermediate_size=24, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
    elif a.kind == "llama_mqa_tied":
        cfg = LlamaConfig(vocab_size=37, initializer_range=0.2, hidden_size=16, intermediate_size=24, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64,
                          rms_norm_eps=3e-5, rope_theta=10000.0, tie_word_embeddings=True, attention_bias=True)
        model = LlamaForCausalLM(cfg)
    else:
        raise SystemExit(f"unknown kind {a.kind}")
    # initializer_range 0.2, not 0.02: with weights that small a key bias dwarfs the keys, and the
    # query gradient is then a difference of near-equal terms that float32 itself (transformers'
    # own float32 against its float64) gets only to 2e-5
    with torch.no_grad():  # norms and biases away from their 1 and 0, so that they matter
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(a.dir, safe_serialization=True, max_shard_size="20KB" if a.kind == "gpt2" else "10GB")
    return 0


def load(d):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(d).double().eval()


def vocab_of(d):
    import json
    return json.load(open(os.path.join(d, "config.json")))["vocab_size"]


def cmd_data(a):
    vocab = vocab_of(a.dir)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, vocab, (a.samples, a.seq), generator=g, dtype=torch.int32)
    y = torch.cat([x[:, 1:], torch.randint(0, vocab, (a.samples, 1), generator=g, dtype=torch.int32)], dim=1)
    y = torch.where(torch.rand(y.shape, generator=g) < 0.25, torch.full_like(y, IGNORE), y)
    write_pgd(os.path.join(a.out, "x.pgd"), x)
    write_pgd(os.path.join(a.out, "y.pgd"), y)
    return 0


def cmd_step(a):
    from safetensors.torch import load_file
    model = load(a.dir)
    x = read_pgd(os.path.join(a.out, "x.pgd"))[:a.batch].long()
    y = read_pgd(os.path.join(a.out, "y.pgd"))[:a.batch].long()
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                             ignore_index=IGNORE)
    loss.backward()
    e = abs(a.loss - loss.item()) / abs(loss.item())
    report(e <= 1e-5, f"loss {a.loss:.10g} vs transformers {loss.item():.10g} in float64 (rel {e:.2e})")
    cfg, _ = hf.read_config(a.dir)
    m = hf.describe(cfg, a.dir)
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}
    if m["tied"]:  # one tensor in the model, under both names in its state dict
        grads.setdefault("lm_head.weight", grads[hf.mapping(m)[0][1]])
    ours, _ = hf.to_pipegen(m, grads, "the float64 model's gradients")
    g = load_file(a.grads)
    for n, ref in ours.items():
        if n not in g:
            report(False, f"gradient of {n}: missing from {os.path.basename(a.grads)}")
            continue
        e = rel_err(g[n], ref)
        report(e <= 1e-5, f"gradient of {n} {list(ref.shape)} (rel {e:.2e})")
    return 0


def cmd_same(a):
    x = read_pgd(os.path.join(a.out, "x.pgd"))[:4].long()
    with torch.no_grad():
        ref = load(a.dir)(x).logits
        got = load(a.exported)(x).logits
    e = (got - ref).abs().max().item()
    report(e == 0.0, f"export -> from_pretrained: logits equal the original model's (max |diff| {e:.1e})")
    return 0


PROMPT_LENS = (3, 6, 1, 4)


def cmd_prompts(a):
    vocab = vocab_of(a.dir)
    g = torch.Generator().manual_seed(7)
    p = torch.full((len(PROMPT_LENS), max(PROMPT_LENS)), -1, dtype=torch.int32)
    for i, n in enumerate(PROMPT_LENS):
        p[i, :n] = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32)
    write_pgd(os.path.join(a.out, "prompts.pgd"), p)
    return 0


def cmd_greedy(a):
    import json
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.dir).eval()  # float32, as pipegen computes
    model.generation_config.eos_token_id = None  # run every prompt to N new tokens, as --generate without --stop
    p = read_pgd(os.path.join(a.out, "prompts.pgd")).long()
    got = {}
    for line in open(a.gen):
        o = json.loads(line)
        got[o["prompt"]] = o
    for i, n in enumerate(PROMPT_LENS):
        x = p[i:i + 1, :n]
        with torch.no_grad():
            ref = model.generate(x, do_sample=False, max_new_tokens=a.new, min_new_tokens=a.new,
                                 pad_token_id=0)[0, n:].tolist()
        o = got.get(i)
        if o is None:
            report(False, f"prompt {i}: not in {os.path.basename(a.gen)}")
            continue
        same = o["prompt_tokens"] == x[0].tolist() and o["tokens"] == ref and o["stop"] == "length"
        report(same, f"prompt {i} ({n} tokens): {a.new} greedy tokens {o['tokens']} "
               f"{'equal' if same else 'differ from'} transformers' {ref}")
    return 0


def cmd_multi(a):
    global fails
    worst = 0
    for n, line in enumerate(open(a.spec), 1):
        if not line.strip():
            continue
        out, tab, rest = line.rstrip("\n").partition("\t")
        if not tab:
            raise SystemExit(f"{a.spec}:{n}: want OUTFILE, a tab, then the command")
        argv = shlex.split(rest)
        if argv and argv[0] == "multi":
            raise SystemExit(f"{a.spec}:{n}: multi inside multi")
        outer, saved = fails, sys.stdout
        fails = 0
        with open(out, "w") as f:
            sys.stdout = f
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse's usage errors, a command's own refusal
                rc = e.code if isinstance(e.code, int) else 1
                if not isinstance(e.code, int) and e.code is not None:
                    print(e.code)
            except Exception:  # one command's failure is its own, the others still run
                traceback.print_exc(file=f)
                rc = 1
            finally:
                sys.stdout = saved
        with open(out + ".rc", "w") as f:
            f.write(f"{rc}\n")
        fails = outer
        worst = max(worst, 1 if rc else 0)
    return worst


def main(argv):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("kind")
    p.add_argument("dir")
    p = sub.add_parser("data")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--samples", type=int, default=8)
    p = sub.add_parser("step")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--loss", type=float, required=True)
    p.add_argument("--grads", required=True)
    p = sub.add_parser("same")
    p.add_argument("dir")
    p.add_argument("exported")
    p.add_argument("out")
    p = sub.add_parser("prompts")
    p.add_argument("dir")
    p.add_argument("out")
    p = sub.add_parser("greedy")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--gen", required=True)
    p.add_argument("--new", type=int, required=True)
    p = sub.add_parser("multi")
    p.add_argument("spec")
    a = ap.parse_args(argv)
    if a.cmd == "multi":
        return cmd_multi(a)
    rc = {"make": cmd_make, "data": cmd_data, "step": cmd_step, "same": cmd_same, "prompts": cmd_prompts,
          "greedy": cmd_greedy}[a.cmd](a)
    return 1 if fails or rc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
