"""tools/hf.py — Hugging Face checkpoints into and out of pipegen, run by
`pipegen import hf` and `pipegen export hf` (codegen/cli/cmd_hf.c).

Python because the formats are Python's: `transformers` reads and writes the
configs and builds the models that `from_pretrained` checks, `safetensors`
reads (possibly sharded) checkpoints and writes pipegen's weight files. The
pipegen runtime stays C: this script only renames, transposes and writes.

    hf.py import DIR -o OUT [--stages N] [--seq T] [--name NAME]
        DIR: config.json and model.safetensors, or model-0000i-of-0000n.safetensors
        with model.safetensors.index.json. Writes OUT/<name>.pipe and
        OUT/<name>.safetensors (pipegen's names and layouts, f32), and copies
        the folder's tokenizer files (tokenizer.json and its company) into OUT.
    hf.py export WEIGHTS PLAN -o DIR
        WEIGHTS: a --save file; PLAN: the model's plan.json (pipegen writes it
        to a temporary file). Writes DIR/config.json and DIR/model.safetensors.
    hf.py map-grads MODEL.pipe-DIR ...  (tests: see to_pipegen)

Model types: gpt2 (GPT2LMHeadModel) and llama (LlamaForCausalLM); mistral
(without a sliding window shorter than the sequence) and the Llama-shaped
qwen2-free configs are read as llama. Every refusal names the config field or
tensor and exits 1.
"""
import argparse
import json
import math
import os
import sys

EXIT_INPUT = 1


class HFError(Exception):
    pass


# ---- reading a Hugging Face folder --------------------------------------------

def read_config(d):
    path = os.path.join(d, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise HFError(f"{d}: no config.json (a Hugging Face model folder has config.json and model.safetensors)")
    except json.JSONDecodeError as e:
        raise HFError(f"{path}:{e.lineno}:{e.colno}: {e.msg}")
    if not isinstance(cfg, dict):
        raise HFError(f"{path}: not a JSON object")
    return cfg, path


def read_tensors(d):
    """Every tensor of the folder's checkpoint, by name, as float32 torch tensors."""
    from safetensors import safe_open
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(single):
        files = [single]
    elif os.path.exists(index):
        try:
            with open(index) as f:
                wm = json.load(f)["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise HFError(f"{index}: not a safetensors index (no weight_map): {e}")
        files = sorted({os.path.join(d, v) for v in wm.values()})
        for p in files:
            if not os.path.exists(p):
                raise HFError(f"{index}: names shard {os.path.basename(p)}, which is not in {d}")
    elif os.path.exists(os.path.join(d, "pytorch_model.bin")):
        raise HFError(f"{d}: only pytorch_model.bin, no model.safetensors: save the model with "
                      f"save_pretrained(..., safe_serialization=True) first")
    else:
        raise HFError(f"{d}: no model.safetensors or model.safetensors.index.json")
    out = {}
    for p in files:
        try:
            with safe_open(p, framework="pt") as f:
                for k in f.keys():
                    out[k] = f.get_tensor(k).float()
        except Exception as e:  # safetensors raises its own error types
            raise HFError(f"{p}: cannot read it as safetensors: {e}")
    return out


def need(cfg, path, key, kind=int, default=None):
    v = cfg.get(key, default)
    if v is None or (kind is int and (not isinstance(v, int) or isinstance(v, bool) or v <= 0)) or \
            (kind is float and not isinstance(v, (int, float))):
        raise HFError(f"{path}: {key} = {v!r}: expected a positive integer" if kind is int else
                      f"{path}: {key} = {v!r}: expected a number")
    return v


# ---- the two families: config -> description -----------------------------------

def describe(cfg, path):
    """The model as pipegen will write it: a dict of sizes and flags."""
    mt = cfg.get("model_type")
    if mt == "gpt2":
        d = need(cfg, path, "n_embd")
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise HFError(f"{path}: activation_function = {act!r}: pipegen's gelu is the tanh form (gelu_new)")
        for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                          ("add_cross_attention", False)):
            if cfg.get(key, want) != want:
                raise HFError(f"{path}: {key} = {cfg[key]!r}: pipegen's attention needs {want}")
        return {
            "type": "gpt2", "vocab": need(cfg, path, "vocab_size"), "d": d, "layers": need(cfg, path, "n_layer"),
            "heads": need(cfg, path, "n_head"), "kv_heads": need(cfg, path, "n_head"),
            "inner": cfg.get("n_inner") or 4 * d, "positions": need(cfg, path, "n_positions"),
            "eps": need(cfg, path, "layer_norm_epsilon", float, 1e-5),
            "tied": cfg.get("tie_word_embeddings", True),
            "embd_pdrop": cfg.get("embd_pdrop", 0.1), "attn_pdrop": cfg.get("attn_pdrop", 0.1),
            "resid_pdrop": cfg.get("resid_pdrop", 0.1),
        }
    if mt in ("llama", "mistral"):
        d = need(cfg, path, "hidden_size")
        heads = need(cfg, path, "num_attention_heads")
        kv = cfg.get("num_key_value_heads") or heads
        if cfg.get("hidden_act", "silu") != "silu":
            raise HFError(f"{path}: hidden_act = {cfg['hidden_act']!r}: pipegen's swiglu is silu-gated")
        if cfg.get("rope_scaling") is not None:
            raise HFError(f"{path}: rope_scaling = {cfg['rope_scaling']!r}: pipegen's rope is the default "
                          f"(unscaled) rotary embedding")
        hd = cfg.get("head_dim") or d // heads
        if d % heads or hd * heads != d:
            raise HFError(f"{path}: head_dim = {hd} with hidden_size = {d} and num_attention_heads = {heads}: "
                          f"pipegen's attention has head size hidden_size / num_attention_heads")
        if heads % kv:
            raise HFError(f"{path}: num_key_value_heads = {kv} does not divide num_attention_heads = {heads}")
        if mt == "mistral" and cfg.get("sliding_window") is not None:
            sw = cfg["sliding_window"]
            return dict(_llama(cfg, path, d, heads, kv), type="mistral", sliding_window=sw)
        return _llama(cfg, path, d, heads, kv)
    if mt == "qwen2":
        raise HFError(f"{path}: model_type = 'qwen2': its q, k, v projections have biases and its o projection "
                      f"none, which attention(bias = ...) cannot express")
    raise HFError(f"{path}: model_type = {mt!r}: pipegen imports gpt2 and llama (and Llama-shaped mistral)")


def _llama(cfg, path, d, heads, kv):
    if cfg.get("mlp_bias", False):
        raise HFError(f"{path}: mlp_bias = true: pipegen's swiglu and down projection are bias-free "
                      f"for Llama")
    return {
        "type": "llama", "vocab": need(cfg, path, "vocab_size"), "d": d, "layers": need(cfg, path, "num_hidden_layers"),
        "heads": heads, "kv_heads": kv, "inner": need(cfg, path, "intermediate_size"),
        "positions": need(cfg, path, "max_position_embeddings"), "eps": need(cfg, path, "rms_norm_eps", float, 1e-6),
        "theta": need(cfg, path, "rope_theta", float, 10000.0), "tied": cfg.get("tie_word_embeddings", False),
        "bias": bool(cfg.get("attention_bias", False)), "attn_pdrop": cfg.get("attention_dropout", 0.0),
    }


# ---- names and layouts ----------------------------------------------------------

def mapping(m):
    """[(pipegen name, hf name, transpose)] of every parameter."""
    out = []
    if m["type"] == "gpt2":
        out.append(("wte" if m["tied"] else "tok.weight", "transformer.wte.weight", False))
        out.append(("wpe.weight", "transformer.wpe.weight", False))
        for i in range(m["layers"]):
            h, p = f"h{i}.", f"transformer.h.{i}."
            for ours, theirs, t in (("ln_1.weight", "ln_1.weight", False), ("ln_1.bias", "ln_1.bias", False),
                                    ("attn.qkv.weight", "attn.c_attn.weight", True),
                                    ("attn.qkv.bias", "attn.c_attn.bias", False),
                                    ("attn.proj.weight", "attn.c_proj.weight", True),
                                    ("attn.proj.bias", "attn.c_proj.bias", False),
                                    ("ln_2.weight", "ln_2.weight", False), ("ln_2.bias", "ln_2.bias", False),
                                    ("fc.weight", "mlp.c_fc.weight", True), ("fc.bias", "mlp.c_fc.bias", False),
                                    ("proj.weight", "mlp.c_proj.weight", True),
                                    ("proj.bias", "mlp.c_proj.bias", False)):
                out.append((h + ours, p + theirs, t))
        out.append(("ln_f.weight", "transformer.ln_f.weight", False))
        out.append(("ln_f.bias", "transformer.ln_f.bias", False))
    else:
        out.append(("wte" if m["tied"] else "tok.weight", "model.embed_tokens.weight", False))
        for i in range(m["layers"]):
            h, p = f"h{i}.", f"model.layers.{i}."
            out.append((h + "ln1.weight", p + "input_layernorm.weight", False))
            for x in "qkvo":
                out.append((h + f"attn.{x}.weight", p + f"self_attn.{x}_proj.weight", False))
                if m["bias"]:
                    out.append((h + f"attn.{x}.bias", p + f"self_attn.{x}_proj.bias", False))
            out.append((h + "ln2.weight", p + "post_attention_layernorm.weight", False))
            out.append((h + "mlp.gate.weight", p + "mlp.gate_proj.weight", False))
            out.append((h + "mlp.up.weight", p + "mlp.up_proj.weight", False))
            out.append((h + "down.weight", p + "mlp.down_proj.weight", False))
        out.append(("norm.weight", "model.norm.weight", False))
    if not m["tied"]:
        out.append(("head.weight", "lm_head.weight", False))
    return out


def hf_key(tensors, name):
    """GPT-2 checkpoints saved by the original code have no 'transformer.' prefix."""
    if name in tensors:
        return name
    if name.startswith("transformer.") and name[len("transformer."):] in tensors:
        return name[len("transformer."):]
    return None


def to_pipegen(m, tensors, where):
    out = {}
    used = set()
    for ours, theirs, t in mapping(m):
        k = hf_key(tensors, theirs)
        if k is None:
            raise HFError(f"{where}: no tensor '{theirs}' (a {m['type']} model with {m['layers']} layers has one)")
        v = tensors[k]
        out[ours] = (v.t() if t else v).contiguous()
        used.add(k)
    return out, used


def split_points(nblocks, stages):
    """Block i's stage: whole blocks, as even as can be (the first stages take the extra ones)."""
    if stages < 1 or stages > nblocks:
        raise HFError(f"--stages {stages}: the model has {nblocks} transformer blocks; pipegen's import puts "
                      f"whole blocks on each stage, so 1 to {nblocks} stages")
    per, extra = divmod(nblocks, stages)
    at, cut = 0, []
    for s in range(stages - 1):
        at += per + (1 if s < extra else 0)
        cut.append(at)
    return cut


def fmt(x):
    r = repr(float(x))
    return r


# ---- writing the .pipe ------------------------------------------------------------

def pipe_text(m, name, src, seq, stages):
    L = []
    w = L.append
    w(f"# {name}.pipe — written by `pipegen import hf` from {src} ({m['type']}):")
    w(f"# {m['layers']} blocks, width {m['d']}, {m['heads']} heads" +
      (f" ({m['kv_heads']} key/value heads)" if m["kv_heads"] != m["heads"] else "") +
      f", vocabulary {m['vocab']}. The weights are {name}.safetensors (--load).")
    w("# Edit the train block (batch, optimizer, stages) freely; the layers and their")
    w("# names are what the weights and `pipegen export hf` expect.")
    w(f"model {name}")
    w(f"const vocab = {m['vocab']}")
    w(f"const seq = {seq}")
    w(f"const d = {m['d']}")
    w("input  tokens : i32[seq]")
    w("target next   : i32[seq]")
    if m["tied"]:
        w("param wte : f32[vocab, d] (init = normal(0.02))")
    w("train {")
    w("  batch = 8  microbatches = 4  schedule = 1f1b  checkpoint = except_last")
    w("  loss = cross_entropy(ignore = -100)")
    w("  optimizer = adamw(lr = 1e-4, betas = (0.9, 0.95), weight_decay = 0.0)  grad_clip = 1.0  seed = 0")
    w("}")
    if m["type"] == "gpt2":
        ad = m["attn_pdrop"]
        rd = m["resid_pdrop"]
        w("block gpt2(d, heads, inner) {")
        w(f"  stash res1  ln_1 = layernorm({fmt(m['eps'])})")
        w(f"  attn = attention(heads, causal{', dropout = ' + fmt(ad) if ad else ''})" +
          (f"  dropout({fmt(rd)})" if rd else "") + "  pop res1 add")
        w(f"  stash res2  ln_2 = layernorm({fmt(m['eps'])})")
        w("  fc = linear(d -> inner)  gelu  proj = linear(inner -> d)" + (f"  dropout({fmt(rd)})" if rd else "") +
          "  pop res2 add")
        w("}")
        w("tok = embed(wte)" if m["tied"] else "tok = embed(vocab -> d)")
        w(f"wpe = pos_embed({m['positions']}, d)" + (f"  dropout({fmt(m['embd_pdrop'])})" if m["embd_pdrop"] else ""))
        call = f"gpt2(d, {m['heads']}, {m['inner']})"
        final = [f"ln_f = layernorm({fmt(m['eps'])})"]
    else:
        ad = m["attn_pdrop"]
        w("block llama(d, heads, kv, inner) {")
        w(f"  stash res1  ln1 = rmsnorm({fmt(m['eps'])})")
        w(f"  attn = attention(heads, causal, kv_heads = kv, rope = {fmt(m['theta'])}, bias = "
          f"{'true' if m['bias'] else 'false'}, separate_qkv = true{', dropout = ' + fmt(ad) if ad else ''})")
        w("  pop res1 add")
        w(f"  stash res2  ln2 = rmsnorm({fmt(m['eps'])})")
        w("  mlp = swiglu(d -> inner)  down = linear(inner -> d, bias = false)  pop res2 add")
        w("}")
        w("tok = embed(wte)" if m["tied"] else "tok = embed(vocab -> d)")
        call = f"llama(d, {m['heads']}, {m['kv_heads']}, {m['inner']})"
        final = [f"norm = rmsnorm({fmt(m['eps'])})"]
    cuts = split_points(m["layers"], stages)
    for i in range(m["layers"]):
        if i in cuts:
            w("split")
        w(f"h{i} = {call}")
    L.extend(final)
    w("head = logits(wte)" if m["tied"] else "head = logits(d -> vocab)")
    if m["tied"] and stages > 1:
        w("tie wte replicate")
    return "\n".join(L) + "\n"


def cmd_import(a):
    from safetensors.torch import save_file
    cfg, cpath = read_config(a.dir)
    m = describe(cfg, cpath)
    if m["type"] == "mistral":
        sw = m["sliding_window"]
        seq_chk = a.seq or min(m["positions"], 256)
        if sw < seq_chk:
            raise HFError(f"{cpath}: sliding_window = {sw} is below the sequence length {seq_chk}: pipegen's "
                          f"attention sees the whole window (import with --seq {sw} or less)")
        m["type"] = "llama"
    seq = a.seq or min(m["positions"], 256)
    if seq > m["positions"] and m["type"] == "gpt2":
        raise HFError(f"--seq {seq}: the model has {m['positions']} positions (n_positions)")
    name = a.name or "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in
                             os.path.basename(os.path.normpath(a.dir))) or "model"
    if not (name[0].isalpha() or name[0] == "_"):
        name = "m_" + name
    tensors = read_tensors(a.dir)
    weights, used = to_pipegen(m, tensors, a.dir)
    ignored = sorted(k for k in tensors if k not in used and not k.endswith((".attn.bias", ".attn.masked_bias"))
                     and not (m["tied"] and k == "lm_head.weight"))
    if ignored:
        raise HFError(f"{a.dir}: {len(ignored)} tensor(s) a {m['type']} model of this config does not have, "
                      f"first: {', '.join(ignored[:3])}")
    os.makedirs(a.out, exist_ok=True)
    pipe = os.path.join(a.out, name + ".pipe")
    st = os.path.join(a.out, name + ".safetensors")
    with open(pipe + ".tmp", "w") as f:
        f.write(pipe_text(m, name, os.path.basename(os.path.normpath(a.dir)), seq, a.stages))
    save_file(weights, st + ".tmp")
    os.replace(pipe + ".tmp", pipe)
    os.replace(st + ".tmp", st)
    print(f"{pipe}\n{st}")
    for t in copy_tokenizer(a.dir, a.out):
        print(t)
    return 0


# The files of a Hugging Face tokenizer, copied beside the imported model so
# that `--tokenizer OUT` and `pipedata tokenize --tokenizer OUT` find them.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "tokenizer.model", "added_tokens.json")


def copy_tokenizer(src, out):
    import shutil
    done = []
    for f in TOKENIZER_FILES:
        p = os.path.join(src, f)
        if os.path.isfile(p) and os.path.realpath(p) != os.path.realpath(os.path.join(out, f)):
            shutil.copyfile(p, os.path.join(out, f + ".tmp"))
            os.replace(os.path.join(out, f + ".tmp"), os.path.join(out, f))
            done.append(os.path.join(out, f))
    return done


# ---- export: plan.json + a --save file -> a Hugging Face folder ------------------------

def blocks_of(plan):
    """Walk plan.json's layers: the embedding, the blocks, the final norm and head."""
    layers = [L for L in plan["layers"] if L["kind"] != "dropout"]
    drops = [L for L in plan["layers"] if L["kind"] == "dropout"]
    i = 0

    def take(kind, what):
        nonlocal i
        if i >= len(layers) or layers[i]["kind"] != kind:
            got = f"{layers[i]['name']} ({layers[i]['kind']})" if i < len(layers) else "the end of the model"
            raise HFError(f"export hf: expected {what} ({kind}) but found {got}; export knows the layer order "
                          f"`pipegen import hf` writes (GPT-2 and Llama blocks)")
        i += 1
        return layers[i - 1]
    emb = take("embed", "the token embedding")
    pos = take("pos_embed", "GPT-2's position table") if i < len(layers) and layers[i]["kind"] == "pos_embed" else None
    blocks = []
    while i < len(layers) and layers[i]["kind"] == "stash":
        b = {}
        take("stash", "a block's first residual")
        b["ln1"] = layers[i]
        if layers[i]["kind"] not in ("layernorm", "rmsnorm"):
            take("layernorm", "the attention's norm")
        i += 1
        b["attn"] = take("attention", "the attention")
        take("pop", "the attention's residual add")
        take("stash", "the MLP's residual")
        b["ln2"] = layers[i]
        if layers[i]["kind"] not in ("layernorm", "rmsnorm"):
            take("layernorm", "the MLP's norm")
        i += 1
        if i < len(layers) and layers[i]["kind"] == "swiglu":
            b["swiglu"] = take("swiglu", "the gated MLP")
            b["down"] = take("linear", "the down projection")
        else:
            b["fc"] = take("linear", "the MLP's first linear")
            take("gelu", "the MLP's gelu")
            b["proj"] = take("linear", "the MLP's projection")
        take("pop", "the MLP's residual add")
        blocks.append(b)
    if not blocks:
        raise HFError("export hf: no transformer blocks after the embedding")
    norm = layers[i] if i < len(layers) else None
    if norm is None or norm["kind"] not in ("layernorm", "rmsnorm"):
        take("layernorm", "the final norm")
    i += 1
    head = take("logits", "the output head")
    if i != len(layers):
        raise HFError(f"export hf: {layers[i]['name']} ({layers[i]['kind']}) after the head")
    return emb, pos, blocks, norm, head, drops


def export_config(plan, emb, pos, blocks, norm, head, drops):
    b0 = blocks[0]
    at = b0["attn"]["attrs"]
    vocab, d = emb["attrs"]["vocab"], emb["attrs"]["dim"]
    tied = head["params"][0] == emb["params"][0]
    seq = plan["input"]["shape"][0]
    drop = max([L["attrs"]["p"] for L in drops] + [0.0])
    if "swiglu" in b0:
        from transformers import LlamaConfig
        return "llama", LlamaConfig(
            vocab_size=vocab, hidden_size=d, intermediate_size=b0["swiglu"]["attrs"]["out"],
            num_hidden_layers=len(blocks), num_attention_heads=at["heads"],
            num_key_value_heads=at.get("kv_heads", at["heads"]), max_position_embeddings=max(seq, 2048),
            rms_norm_eps=norm["attrs"]["eps"], rope_theta=at.get("rope", 10000.0), tie_word_embeddings=tied,
            attention_bias=at.get("bias", True), attention_dropout=at.get("dropout", 0.0), mlp_bias=False,
            torch_dtype="float32")
    from transformers import GPT2Config
    if pos is None:
        raise HFError("export hf: a GPT-2 model needs its pos_embed after the embedding")
    return "gpt2", GPT2Config(
        vocab_size=vocab, n_embd=d, n_layer=len(blocks), n_head=at["heads"], n_positions=pos["attrs"]["seq"],
        n_inner=b0["fc"]["attrs"]["out_features"], layer_norm_epsilon=norm["attrs"]["eps"], activation_function="gelu_new",
        tie_word_embeddings=tied, resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=at.get("dropout", 0.0),
        torch_dtype="float32")


def check_block(kind, b, i):
    """Refuse what the Hugging Face class cannot hold."""
    at = b["attn"]["attrs"]
    if kind == "gpt2":
        if "kv_heads" in at or b["ln1"]["kind"] != "layernorm" or not at["causal"]:
            raise HFError(f"export hf: block {i} ({b['attn']['name']}): GPT-2 wants causal multi-head attention "
                          f"with one qkv projection and layernorms")
    elif not (at["causal"] and at.get("separate_qkv") and b["ln1"]["kind"] == "rmsnorm"):
        raise HFError(f"export hf: block {i} ({b['attn']['name']}): Llama wants causal attention with "
                      f"separate_qkv = true and rmsnorms")


def cmd_export(a):
    import torch
    from safetensors.torch import load_file
    try:
        with open(a.plan) as f:
            plan = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise HFError(f"{a.plan}: {e}")
    emb, pos, blocks, norm, head, drops = blocks_of(plan)
    kind, cfg = export_config(plan, emb, pos, blocks, norm, head, drops)
    for i, b in enumerate(blocks):
        check_block(kind, b, i)
    try:
        w = load_file(a.weights)
    except Exception as e:
        raise HFError(f"{a.weights}: cannot read it as safetensors: {e}")
    m = describe(cfg.to_dict(), "the exported config")
    m["tied"] = cfg.tie_word_embeddings
    # the plan's own names: blocks h0..hN-1 as import writes them, or whatever the plan says
    names = {p["name"] for p in plan["params"]}
    sd = {}
    for (ours, theirs, t), real in zip(mapping(m), plan_names(m, emb, pos, blocks, norm, head)):
        if real not in w:
            raise HFError(f"{a.weights}: no tensor '{real}' (the model {plan['model']} has it: is this its --save file?)")
        v = w[real]
        sd[theirs] = (v.t() if t else v).contiguous()
        names.discard(real)
    if names:
        raise HFError(f"export hf: parameters {sorted(names)[:3]} of {plan['model']} have no place in a {kind} model")
    from transformers import GPT2LMHeadModel, LlamaForCausalLM
    model = (GPT2LMHeadModel if kind == "gpt2" else LlamaForCausalLM)(cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias", "lm_head.weight"))]
    if missing or unexpected:
        raise HFError(f"export hf: the {kind} model's tensors differ: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    with torch.no_grad():
        model.save_pretrained(a.out, safe_serialization=True)
    print(a.out)
    return 0


def plan_names(m, emb, pos, blocks, norm, head):
    """The plan's parameter names in mapping(m)'s order (the user may have renamed layers)."""
    out = [emb["params"][0]]
    if m["type"] == "gpt2":
        out.append(pos["params"][0])
    for b in blocks:
        if m["type"] == "gpt2":
            out += b["ln1"]["params"] + b["attn"]["params"] + b["ln2"]["params"] + b["fc"]["params"] + b["proj"]["params"]
        else:
            out += b["ln1"]["params"] + b["attn"]["params"] + b["ln2"]["params"] + b["swiglu"]["params"] + \
                b["down"]["params"]
    out += norm["params"]
    if not m["tied"]:
        out.append(head["params"][0])
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="pipegen import/export hf")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("import")
    i.add_argument("dir")
    i.add_argument("-o", dest="out", required=True)
    i.add_argument("--stages", type=int, default=1)
    i.add_argument("--seq", type=int, default=0)
    i.add_argument("--name")
    e = sub.add_parser("export")
    e.add_argument("weights")
    e.add_argument("plan")
    e.add_argument("-o", dest="out", required=True)
    a = ap.parse_args(argv)
    try:
        return cmd_import(a) if a.cmd == "import" else cmd_export(a)
    except HFError as err:
        print(f"pipegen: {err}", file=sys.stderr)
        return EXIT_INPUT
    except ImportError as err:
        print(f"pipegen: {err}: the import/export step needs transformers and safetensors "
              f"(tools/deps.sh hf makes a virtual environment with them)", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
