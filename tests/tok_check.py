"""tests/tok_check.py — the oracle of tests/tokenize.t: a tiny tokenizer made
with the `tokenizers` package, and transformers' own reading of it
(PreTrainedTokenizerFast) against what `pipedata tokenize` and a stage's
--tokenizer wrote.

    tok_check.py make DIR              DIR/tokenizer.json (byte-level BPE trained on
                                         a small text, ids < 128 so that a vocabulary-256
                                         model takes them) and tokenizer_config.json
                                         (its end-of-text token)
    tok_check.py text DIR OUT.pgd F..  OUT is each file's ids then the end-of-text id
    tok_check.py prompts DIR OUT.pgd F OUT's row i is the i-th non-empty line's ids, -1 after
    tok_check.py pairs DIR X Y F SEQ   X and Y are the pairs of F (JSONL) as inputs and
                                         targets, prompt and padding targets -100
    tok_check.py gen DIR GEN.jsonl     each line's text is the decoding of its prompt and
                                         new tokens (special tokens left out)

Each comparison prints one "ok - " or "not ok - " line; the exit status is 1
when any failed.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import read_pgd  # noqa: E402

TEXT = ("the cat sat on the mat. the dog ran to the log. a bird sang in the tree. "
        "caf\u00e9 na\u00efve r\u00e9sum\u00e9.\n")
fails = 0


def report(good, what):
    global fails
    fails += not good
    print(("ok - " if good else "not ok - ") + what)


def hf(d):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), eos_token="<|endoftext|>",
                                   clean_up_tokenization_spaces=False)  # tokenizers' own decoding


def cmd_make(a):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    os.makedirs(a[0], exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=120, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator([TEXT] * 10, tr)
    assert tok.get_vocab_size() <= 128
    tok.save(os.path.join(a[0], "tokenizer.json"))
    with open(os.path.join(a[0], "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|endoftext|>"}, f)
    with open(os.path.join(a[0], "text.txt"), "w") as f:
        f.write(TEXT * 8)


def cmd_text(a):
    t = hf(a[0])
    want = []
    for path in a[2:]:
        want += t(open(path, encoding="utf-8").read())["input_ids"] + [t.eos_token_id]
    got = read_pgd(a[1]).tolist()
    report(got == want, f"{len(got)} ids equal transformers' tokenizer ({len(want)}), each file then end of text")


def cmd_prompts(a):
    t = hf(a[0])
    lines = [x for x in open(a[2], encoding="utf-8").read().splitlines() if x.strip()]
    got = read_pgd(a[1]).tolist()
    report(len(got) == len(lines), f"{len(got)} rows for {len(lines)} prompts")
    for i, (row, line) in enumerate(zip(got, lines)):
        ids = t(line)["input_ids"]
        want = ids + [-1] * (len(row) - len(ids))
        report(row == want, f"prompt {i}: {row} is {want}")


def cmd_pairs(a):
    t = hf(a[0])
    seq = int(a[4])
    x, y = read_pgd(a[1]).tolist(), read_pgd(a[2]).tolist()
    rows = []
    for line in open(a[3], encoding="utf-8"):
        if not line.strip():
            continue
        o = json.loads(line)
        p = t(o["prompt"])["input_ids"]
        r = t(o["response"], add_special_tokens=False)["input_ids"] + [t.eos_token_id]
        if len(p) >= seq + 1:
            continue  # no room for the response: left out
        s = (p + r)[:seq + 1]
        tg = [-100 if k < len(p) else s[k] for k in range(1, len(s))]
        rows.append((s[:seq] + [0] * (seq - len(s[:seq])), tg + [-100] * (seq - len(tg))))
    report(len(x) == len(rows) and len(y) == len(rows), f"{len(x)} pairs kept of the file's ({len(rows)})")
    for i, (xr, yr) in enumerate(rows):
        if i < len(x):
            report(x[i] == xr and y[i] == yr, f"pair {i}: inputs {x[i]} targets {y[i]} (want {xr} {yr})")


def cmd_gen(a):
    t = hf(a[0])
    n = 0
    for line in open(a[1]):
        o = json.loads(line)
        want = t.decode(o["prompt_tokens"] + o["tokens"], skip_special_tokens=True)
        report(o["text"] == want, f"prompt {o['prompt']}: text {o['text']!r} is the decoding {want!r}")
        n += 1
    report(n > 0, f"{n} samples")


def main(argv):
    {"make": cmd_make, "text": cmd_text, "prompts": cmd_prompts, "pairs": cmd_pairs, "gen": cmd_gen}[argv[0]](argv[1:])
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
