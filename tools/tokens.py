"""tools/tokens.py — text to token ids and back with a Hugging Face tokenizer,
run by `pipedata tokenize` (cmd/pd_tokenize.c) and by a stage's --tokenizer
(runtime/core/generate.c), both through runtime/core/pytool.c.

Python because the format is: `tokenizers` reads tokenizer.json (byte-level
BPE, SentencePiece-style metaspace, byte fallback, added and special tokens)
exactly as transformers does. This script only encodes and decodes; the .pgd
files, the windows, the masks and the generation are C.

    tokens.py encode --tokenizer T       the text on stdin -> its ids, one line
    tokens.py eos --tokenizer T          the end-of-text id (nothing when it has none)
    tokens.py decode --tokenizer T       a line of ids per text on stdin -> a JSON
                                           string per line (special tokens left out)
    tokens.py text --tokenizer T FILE..  each file's text -> its ids and the
                                           end-of-text id, a line per file
    tokens.py lines --tokenizer T FILE   each non-empty line -> its ids, a line each
    tokens.py pairs --tokenizer T FILE [--prompt KEY] [--response KEY]
                                           a JSON object per line -> two lines: the
                                           prompt's ids, then the response's (without
                                           the tokenizer's special tokens) and the
                                           end-of-text id

T is a tokenizer.json, or a folder holding one (with its tokenizer_config.json,
which names the end-of-text token), or a folder of an older tokenizer
(vocab.json and merges.txt), which transformers converts. Ids are encoded with
the tokenizer's own special tokens (Llama's begin-of-text), as transformers'
tokenizer(text) does. Errors name the file (and line) and exit 1.
"""
import argparse
import json
import os
import sys


class TokError(Exception):
    pass


class Tok:
    """A tokenizers.Tokenizer and its end-of-text id (None: none)."""

    def __init__(self, tok, eos):
        self.tok = tok
        self.eos = eos

    def encode(self, text, special=True):
        return self.tok.encode(text, add_special_tokens=special).ids


def eos_of(tok, folder):
    """The end-of-text id tokenizer_config.json (or special_tokens_map.json) names, or None."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                cfg = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise TokError(f"{path}: {e}")
        e = cfg.get("eos_token") if isinstance(cfg, dict) else None
        if isinstance(e, dict):
            e = e.get("content")
        if isinstance(e, str) and tok.token_to_id(e) is not None:
            return tok.token_to_id(e)
    return None


def load(path):
    from tokenizers import Tokenizer
    if os.path.isdir(path):
        tj = os.path.join(path, "tokenizer.json")
        if not os.path.exists(tj):
            if not (os.path.exists(os.path.join(path, "vocab.json")) or os.path.exists(os.path.join(path, "tokenizer.model"))):
                raise TokError(f"{path}: no tokenizer.json (nor vocab.json or tokenizer.model) in this folder")
            from transformers import AutoTokenizer  # an older tokenizer's files: transformers converts them
            t = AutoTokenizer.from_pretrained(path, use_fast=True)
            return Tok(t.backend_tokenizer, t.eos_token_id)
        folder = path
    else:
        tj, folder = path, os.path.dirname(path) or "."
    if not os.path.exists(tj):
        raise TokError(f"{tj}: no such file")
    try:
        tok = Tokenizer.from_file(tj)
    except Exception as e:  # tokenizers raises its own kinds for a file it cannot read
        raise TokError(f"{tj}: not a tokenizer.json that the tokenizers package reads ({e})")
    return Tok(tok, eos_of(tok, folder))


def ids_line(ids):
    return " ".join(str(i) for i in ids)


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise TokError(f"{path}: not UTF-8 text (byte {e.start})")
    except OSError as e:
        raise TokError(f"{path}: {e.strerror}")


def cmd_encode(t, a):
    print(ids_line(t.encode(sys.stdin.read())))


def cmd_eos(t, a):
    if t.eos is not None:
        print(t.eos)


def cmd_decode(t, a):
    for n, line in enumerate(sys.stdin, 1):
        try:
            ids = [int(x) for x in line.split()]
        except ValueError:
            raise TokError(f"decode: line {n} of the input is not token ids")
        print(json.dumps(t.tok.decode(ids, skip_special_tokens=True)))


def cmd_text(t, a):
    for path in a.files:
        ids = t.encode(read_text(path))
        print(ids_line(ids + ([t.eos] if t.eos is not None else [])))


def cmd_lines(t, a):
    for line in read_text(a.file).splitlines():
        if line.strip():
            print(ids_line(t.encode(line)))


def cmd_pairs(t, a):
    text = read_text(a.file)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except json.JSONDecodeError as e:
            raise TokError(f"{a.file}:{n}:{e.colno}: {e.msg}")
        if not isinstance(o, dict):
            raise TokError(f"{a.file}:{n}: not a JSON object")
        for k in (a.prompt, a.response):
            if not isinstance(o.get(k), str):
                raise TokError(f"{a.file}:{n}: no string \"{k}\" (each line holds \"{a.prompt}\" and \"{a.response}\")")
        print(ids_line(t.encode(o[a.prompt])))
        print(ids_line(t.encode(o[a.response], special=False) + ([t.eos] if t.eos is not None else [])))


def main(argv):
    ap = argparse.ArgumentParser(prog="tokens.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("encode", "eos", "decode", "text", "lines", "pairs"):
        p = sub.add_parser(name)
        p.add_argument("--tokenizer", required=True)
        if name == "text":
            p.add_argument("files", nargs="+")
        if name in ("lines", "pairs"):
            p.add_argument("file")
        if name == "pairs":
            p.add_argument("--prompt", default="prompt")
            p.add_argument("--response", default="response")
    a = ap.parse_args(argv)
    try:
        t = load(a.tokenizer)
        {"encode": cmd_encode, "eos": cmd_eos, "decode": cmd_decode, "text": cmd_text, "lines": cmd_lines,
         "pairs": cmd_pairs}[a.cmd](t, a)
    except TokError as e:
        print(f"tokens.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
