#!/bin/sh
# tests/ppdp_plan.t — `pipegen plan`'s pp x dp table against figures computed
# here from plan.json alone, and against what the runtime itself reports:
#  - per stage and D: the arena and its parameters, gradients and optimizer
#    state (plan.json's memory), the reduction's chunk buffers ((D-1) x 64 Ki
#    floats: the other replicas' copies of a chunk of the shard), batch-norm
#    sums (D x 2 x max(C,1) doubles), send rings (D-1 rings of the buffers'
#    sums and message headers: the gradients are lent, not copied), the
#    process total and the bytes replica 0 sends per step ((D-1) shards out and
#    its summed shard to D-1 replicas), n being the stage's reduced floats: its
#    trained parameters but a transmitted tie's copy on a user;
#  - gpt_tiny (wte tied by transmit across 2 stages) and bn_small (deferred
#    batch norm buffers) trained by piperun --dp D report the same bytes sent,
#    buffers and send rings on every stage (the runtime's end-of-run line);
#  - the default table lists D = 1, 2, 4, 8 and names the counts the runtime
#    refuses; --dp D of such a count is an error, --dp of no count a usage error.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/pg-ppdp-plan.XXXXXX)
trap '[ -n "$KEEP" ] || rm -rf "$T"' EXIT

# expect PLAN.json D...: the table rows, computed here ("stage k D in bn rings total sent")
expect() {
    "$PY" - "$@" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
Ds = [int(x) for x in sys.argv[2:]]
for st in plan["stages"]:
    k = st["stage"]
    n = bufs = cmax = nparams = 0
    for p in plan["params"]:
        if k not in p["stages"]:
            continue
        numel = 1
        for x in p["shape"]:
            numel *= x
        nparams += 1
        if p["buffer"]:
            bufs += numel
            cmax = max(cmax, numel)
        elif not (p["tie"] in ("transmit", "replicate") and p["owner"] != k):
            n += numel                     # a tied copy on a user: its owner's sum comes to it
    mem = st["memory"]
    print("stage %d arena %d %d %d %d n %d" % (k, st["arena_bytes"], mem["parameters"], mem["gradients"],
                                               mem["optimizer state"], n))
    for D in Ds:
        if D == 1:
            print("stage %d D 1 0 0 0 %d 0" % (k, st["arena_bytes"]))
            continue
        shards = (D - 1) * 65536 * 4
        bn = D * 2 * max(cmax, 1) * 8
        chunks = (-(-n // D)) // 65536
        msgs = 2 * (chunks + 3 * nparams + 4) + nparams + 8  # buckets: nparams + 1 at most
        ring = bufs * 8 + msgs * 16 + 4096
        mine = n // D                      # replica 0's shard: [0, n / D)
        sent = ((D - 1) * mine + (n - mine)) * 4
        print("stage %d D %d %d %d %d %d %d" % (k, D, shards, bn, (D - 1) * ring,
                                                st["arena_bytes"] + shards + bn + (D - 1) * ring, sent))
EOF
}

# table PLAN-OUTPUT: the same rows as pipegen plan printed them
table() {
    awk '/^pp x dp:/ { on = 1; next } !on { next }
         /^stage [0-9]+: arena/ { k = $2; sub(":", "", k); gsub(/[(),;]/, "")
                                   print "stage " k " arena " $4 " " $7 " " $9 " " $12 " n " $13; next }
         /^ +[0-9]+ / { print "stage " k " D " $1 " " $2 " " $3 " " $4 " " $5 " " $6; next }
         /^ +D / { next }
         { on = 0 }' "$1"
}

# gpt_tiny on 2 stages with wte tied by transmit (the user's copy is not
# reduced), bn_small on 2 stages with batch 12 (deferred batch norm buffers)
e2e_gen "$T/gpt" gpt_tiny '/# S[13]$/d' 1f1b except_last -e 's/tie wte replicate/tie wte transmit/' &&
    e2e_gen "$T/bn" bn_small '/^$/d' 1f1b except_last -e 's/batch = 10  microbatches = 3/batch = 12  microbatches = 3/'
ok $? "gpt_tiny (tie transmit) and bn_small generate on 2 stages"

for m in gpt bn; do
    "$PIPEGEN" plan "$T/$m/"*.pipe >"$T/$m.plan" 2>&1
    ok $? "pipegen plan $m"
done
is "$(table "$T/gpt.plan")" "$(expect "$T/gpt/gen/plan.json" 1 2)" \
    "gpt_tiny: the default table (D = 1, 2) holds the figures computed from plan.json"
like "$(cat "$T/gpt.plan")" '^D = 4 left out: 4 replicas do not divide the batch of 6 rows' \
    "... and names D = 4, which does not divide the batch of 6"
like "$(cat "$T/gpt.plan")" 'D = 8 left out: 8 replicas do not divide the batch of 6 rows' "... and D = 8"
is "$(table "$T/bn.plan")" "$(expect "$T/bn/gen/plan.json" 1 2 4)" \
    "bn_small: the default table (D = 1, 2, 4) holds the figures computed from plan.json"
like "$(cat "$T/bn.plan")" 'D = 8 left out: 8 replicas do not divide the batch of 12 rows' "... and names D = 8"
"$PIPEGEN" plan "$T/bn/"*.pipe --dp 4 >"$T/bn4.plan" 2>&1
is "$(table "$T/bn4.plan")" "$(expect "$T/bn/gen/plan.json" 4)" "pipegen plan --dp 4: the table of D = 4 alone"
# the same model with wte replicated: stage 1's copy is stepped but not reduced
# either (its owner, stage 0, sends it the sum over the stages and the replicas)
e2e_gen "$T/rep" gpt_tiny '/# S[13]$/d' 1f1b except_last && "$PIPEGEN" plan "$T/rep/"*.pipe >"$T/rep.plan" 2>&1
nt=$(table "$T/gpt.plan" | awk '$2 == 1 && $3 == "arena" { print $NF }')
nr=$(table "$T/rep.plan" | awk '$2 == 1 && $3 == "arena" { print $NF }')
n0t=$(table "$T/gpt.plan" | awk '$2 == 0 && $3 == "arena" { print $NF }')
n0r=$(table "$T/rep.plan" | awk '$2 == 0 && $3 == "arena" { print $NF }')
is "$((nr - nt))/$((n0r - n0t))" 0/0 "a user's copy of a tie is not reduced, transmitted or replicated ($nt and $nr floats on stage 1), the owner's is ($n0t, $n0r)"

# the runtime's own figures: piperun --dp D, every stage of replica 0 reports
# its bytes sent, buffers and send rings after the last step
runtime() { # runtime DIR D: "stage k D buffers rings sent" per stage
    "$PIPERUN" --dp "$2" "$1/gen/bin" -- --steps 3 --threads 1 >"$1/run$2.out" 2>&1 ||
        { sed 's/^/# /' "$1/run$2.out" | tail -20; return 1; }
    sed -n 's/^\[stage \([0-9]*\) replica 0\] gradient reduction over \([0-9]*\) replicas: \([0-9]*\) bytes sent per step .*; buffers \([0-9]*\) bytes, send rings \([0-9]*\) x \([0-9]*\) bytes$/\1 \2 \4 \5 \6 \3/p' \
        "$1/run$2.out" | awk '{ print "stage " $1 " D " $2 " " $3 " " $4 * $5 " " $6 }' | sort
}
fromplan() { # fromplan PLAN-OUTPUT D: the same columns from pipegen plan's table
    table "$1" | awk -v D="$2" '$3 == "D" && $4 == D { print $1 " " $2 " D " $4 " " $5 + $6 " " $7 " " $9 }' | sort
}
build_strict "$T/gpt/gen" && build_strict "$T/bn/gen"
ok $? "both build"
got=$(runtime "$T/gpt" 2)
is "$got" "$(fromplan "$T/gpt.plan" 2)" "gpt_tiny, 2 stages x 2 replicas: the runtime reports the plan's buffers, send rings and bytes sent"
for D in 2 4; do
    got=$(runtime "$T/bn" $D)
    is "$got" "$(fromplan "$T/bn.plan" $D)" "bn_small, 2 stages x $D replicas: the runtime reports the plan's figures"
done
[ "$(runtime "$T/bn" 4 | wc -l)" = 2 ]
ok $? "... one line per stage"

# refusals
got=$("$PIPEGEN" plan "$T/gpt/"*.pipe --dp 4 2>&1); rc=$?
is "$rc" 1 "pipegen plan --dp 4 of a batch of 6 fails"
like "$got" '^pipegen plan: --dp 4: 4 replicas do not divide the batch of 6 rows of .*gpt_tiny.pipe: the runtime refuses a run of 4 replicas$' \
    "... saying why, before any table"
got=$("$PIPEGEN" plan "$T/gpt/"*.pipe --dp 3 2>&1); rc=$?
is "$rc" 1 "pipegen plan --dp 3 of a batch of 6 in 3 micro-batches fails"
like "$got" '3 replicas leave 2 rows each, fewer than the 3 micro-batches of .*gpt_tiny.pipe' "... saying why"
got=$("$PIPEGEN" plan "$T/gpt/"*.pipe --dp 0 2>&1); rc=$?
is "$rc" 2 "pipegen plan --dp 0 is a usage error"
like "$got" "--dp wants a replica count in 1..256, not '0'" "... naming the count"
done_testing
