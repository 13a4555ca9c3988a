#!/bin/sh
# tests/run_output.t — what a person reads at the end of a run under piperun:
# every stage's end-of-run lines (bubble, throughput) come once, together and
# in stage order; when the stages want more threads than the host has cores
# the loss stage says that waiting for a core counts as bubble; after a resume
# the bubble and the throughput are over the steps this run timed (the first
# step it ran warms up), not from step 2; a stage started by hand prints no
# end-of-run mark (that is piperun's).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir run-output
PIPERUN=$TOP/build/piperun
cores=$(nproc)
cd "$T" || exit 1
cp "$TOP/tests/models/mlp_small.pipe" four.pipe
sed -e '/^split/d' four.pipe >one.pipe
"$TOP/build/pipegen" build four.pipe -o four >/dev/null 2>&1 && "$TOP/build/pipegen" build one.pipe -o one >/dev/null 2>&1
ok $? "the 4-stage and the 1-stage build"

# norm: the figures of the bubble and throughput lines left out
norm() { sed 's/bubble [0-9.]*% (compute .* over steps/bubble N% (... over steps/; s/throughput: [0-9.]* samples/throughput: N samples/'; }
timeout 120 "$PIPERUN" four -- --steps 4 --threads "$cores" --checkpoint-dir ck --save-every 2 >run.out 2>run.err
ok $? "4 stages, $cores threads each, 4 steps"
is "$(tail -n 6 run.out | norm)" "[stage 0] bubble N% (... over steps 2..4)
[stage 1] bubble N% (... over steps 2..4)
[stage 2] bubble N% (... over steps 2..4)
[stage 3] bubble N% (... over steps 2..4)
[stage 3] 4 stages on $cores cores: waiting for a core counts as bubble
[stage 3] throughput: N samples/s (mean over steps 2..4)" \
    "the end-of-run lines come last, once, in stage order, naming the shared cores"
is "$(grep -c 'bubble\|throughput' run.out)" 6 "...and nowhere else"

timeout 120 "$PIPERUN" four -- --steps 7 --threads 1 --resume ck --checkpoint-dir ck >resume.out 2>resume.err
ok $? "resumed from step 4 to step 7"
like "$(cat resume.out resume.err)" "resume: continuing from ck/step-00000004 \(step 4\)" "...from step 4"
like "$(cat resume.out | norm)" "\[stage 2\] bubble N% \(\.\.\. over steps 6\.\.7\)" \
    "after a resume the bubble is over the steps this run timed (5 warms up): 6..7, not 2..7"
like "$(cat resume.out | norm)" "\[stage 3\] throughput: N samples/s \(mean over steps 6\.\.7\)" "...and the throughput too"

if [ "$cores" -ge 2 ]; then
    sed -e '/# S[123]$/d' -e 's/^layer1 = /split\nlayer1 = /' four.pipe >two.pipe
    "$TOP/build/pipegen" build two.pipe -o two >/dev/null 2>&1
    timeout 120 "$PIPERUN" two -- --steps 3 --threads 1 >two.out 2>&1
    ok $? "2 stages of 1 thread on $cores cores"
    grep -q 'waiting for a core' two.out; [ $? = 1 ]; ok $? "...no word about shared cores when each has its own"
else
    skip "one core: 2 stages always share it"
    skip "..."
fi

./one/stage0 --steps 3 >alone.out 2>alone.err
ok $? "a 1-stage model run by hand"
grep -q "$(printf '\036')" alone.out; [ $? = 1 ]; ok $? "...prints no end-of-run mark (only piperun's stages do)"
like "$(cat alone.out)" "^stage 0: bubble [0-9.]+% .*over steps 2\.\.3\)$" "...and its bubble line as before"
grep -q 'waiting for a core' alone.out; [ $? = 1 ]; ok $? "...alone on the host: no word about shared cores"
done_testing
