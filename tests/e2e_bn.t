#!/bin/sh
# tests/e2e_bn.t — deferred batch norm end to end (tests/models/bn_small.pipe):
#  - running statistics equal PyTorch's BatchNorm1d fed the whole mini-batch
#    (bn0 on the model input over two steps; bn1 on the next stage, whose input
#    the pipeline makes from micro-batch statistics, after one step), and differ
#    from a per-micro-batch update;
#  - loss and saved weights (running statistics included) are bitwise equal over
#    1 and 2 stages x gpipe/1f1b x always/except_last/never: a recomputed
#    forward does not count its micro-batch twice.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/pg-e2e-bn.XXXXXX)
trap 'rm -rf "$T"' EXIT

# variant STAGES SCHEDULE CKPT: gen and build
variant() {
    n=$1; s=$2; c=$3
    d="$T/$n-$s-$c"
    del='/# S1$/d'
    [ "$n" = 2 ] && del='/^$/d'
    e2e_gen "$d" bn_small "$del" "$s" "$c" || return 1
    build_strict "$d/gen"
}

# train DIR STEPS OUT: run DIR's stages on the data files, save to OUT
train() {
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$1/gen/bin" -- --steps "$2" --threads 1 --data "$T/x.pgd" \
        --targets "$T/y.pgd" --save "$3" >"$3.out" 2>&1 || { sed 's/^/# /' "$3.out" | tail -20; return 1; }
}

cat >"$T/ref.py" <<'PYEOF'
import json, struct, sys
import torch

def write_pgd(path, t):
    with open(path, "wb") as f:
        f.write(b"PGD1" + struct.pack("<III", 1, 0, t.dim()))
        f.write(struct.pack("<%dQ" % t.dim(), *t.shape))
        f.write(t.contiguous().numpy().astype("<f4").tobytes())

def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(v["shape"])
    return out

def close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)

d = sys.argv[2]
if sys.argv[1] == "data":
    g = torch.Generator().manual_seed(1)
    write_pgd(d + "/x.pgd", torch.randn(20, 8, generator=g) * 2 + 0.5)
    write_pgd(d + "/y.pgd", torch.randn(20, 4, generator=g))
    sys.exit(0)

def rows(path):
    with open(path, "rb") as f:
        f.seek(16 + 16)
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(-1, 8 if "x" in path else 4)

x = rows(d + "/x.pgd")
w0, w1, w2 = (read_st(d + "/w%d.safetensors" % k) for k in (0, 1, 2))
fails = 0
# bn0: the model input, two steps (rows 0..9, then 10..19), whole-batch statistics
bn = torch.nn.BatchNorm1d(8, momentum=0.1)
bn.train()
bn(x[0:10]); bn(x[10:20])
for k, ref in (("bn0.running_mean", bn.running_mean), ("bn0.running_var", bn.running_var)):
    if not close(w2[k], ref):
        print("# %s after 2 steps: pipeline %s, torch %s" % (k, w2[k].tolist(), ref.tolist())); fails += 1
# bn1: its input after one step comes from micro-batch statistics in bn0 (rows 4, 3, 3)
hs = []
for a, b in ((0, 4), (4, 7), (7, 10)):
    h = torch.nn.functional.batch_norm(x[a:b], None, None, w0["bn0.weight"], w0["bn0.bias"], training=True, eps=1e-5)
    hs.append(torch.relu(torch.nn.functional.linear(h, w0["fc0.weight"], w0["fc0.bias"])))
h = torch.cat(hs)
bn1 = torch.nn.BatchNorm1d(8, momentum=0.1)
bn1.train()
bn1(h)
naive = torch.nn.BatchNorm1d(8, momentum=0.1)
naive.train()
for t in hs:
    naive(t)
for k, ref, nv in (("bn1.running_mean", bn1.running_mean, naive.running_mean),
                   ("bn1.running_var", bn1.running_var, naive.running_var)):
    if not close(w1[k], ref):
        print("# %s after 1 step: pipeline %s, torch %s" % (k, w1[k].tolist(), ref.tolist())); fails += 1
    if close(w1[k], nv):
        print("# %s equals a per-micro-batch update" % k); fails += 1
print("ok" if fails == 0 else "FAIL")
PYEOF

$PY "$T/ref.py" data "$T"
ok $? "python writes the data files"

ref=""
fails=0
for n in 1 2; do for s in gpipe 1f1b; do for c in always except_last never; do
    d="$T/$n-$s-$c"
    if ! variant $n $s $c || ! train "$d" 3 "$d/w.safetensors"; then
        echo "# $n stages, $s, checkpoint $c: failed"; fails=$((fails + 1)); continue
    fi
    grep 'final loss' "$d/w.safetensors.out" | sed 's/^\[stage [0-9]*\] //' >"$d/loss"
    if [ -z "$ref" ]; then ref=$d; continue; fi
    if ! cmp -s "$ref/loss" "$d/loss" || ! cmp -s "$ref/w.safetensors" "$d/w.safetensors"; then
        echo "# $n stages, $s, checkpoint $c differs from $(basename "$ref")"; fails=$((fails + 1))
    fi
done; done; done
is "$fails" 0 "bn_small: loss and weights with running statistics bitwise equal over 1/2 stages x gpipe/1f1b x always/except_last/never"

d="$T/2-gpipe-always"
train "$d" 0 "$T/w0.safetensors" && train "$d" 1 "$T/w1.safetensors" && train "$d" 2 "$T/w2.safetensors"
ok $? "bn_small on 2 stages trains 0, 1 and 2 steps"
out=$($PY "$T/ref.py" check "$T" 2>&1)
printf '%s\n' "$out" | grep '^#'
is "$(printf '%s\n' "$out" | tail -1)" "ok" "running statistics equal BatchNorm1d on the whole mini-batch"
# A per-micro-batch batch norm needs 2 values per feature in the smallest
# micro-batch (unbiased running variance): refused at generation, located.
sed 's/batch = 10  microbatches = 4/batch = 5  microbatches = 4/' "$TOP/tests/models/sched_bn.pipe" >"$T/bn1.pipe"
"$PIPEGEN" gen "$T/bn1.pipe" -o "$T/bn1" >"$T/bn1.err" 2>&1
is $? 1 "batch 5 in 4 micro-batches with a per-micro-batch batchnorm: error"
like "$(cat "$T/bn1.err")" 'bn1\.pipe:20:1: error: batchnorm needs at least 2 values per feature in every micro-batch, but the smallest micro-batch has 1 \(batch 5 in 4 micro-batches\)' "naming the layer and the sizes"
sed -e 's/batch = 10  microbatches = 4/batch = 5  microbatches = 4/' -e 's/bn2 = batchnorm(momentum = 0.2)/bn2 = batchnorm(deferred)/' "$TOP/tests/models/sched_bn.pipe" >"$T/bn1d.pipe"
"$PIPEGEN" gen "$T/bn1d.pipe" -o "$T/bn1d" >/dev/null 2>&1
ok $? "the same sizes with deferred batch norm generate"
done_testing
