#!/bin/sh
# tests/slurm.sh — `make test-slurm`: a real Slurm on this one host, set up in a
# temporary folder (munged with its own key and socket, slurmctld and slurmd
# with a slurm.conf naming this host, its cores and memory; no systemd, no
# cgroups: proctrack/linuxproc, task/none), then:
#  - srun --multi-prog of a 2-stage model (one line, `0-1 .../stage%t`) trains
#    to the same loss and weights, bitwise, as piperun's run;
#  - docs/launch.md's --multi-prog file and srun line, taken from docs/launch.md and run
#    as they stand (4 stages of a tiny language model standing in for
#    build/gpt_char), bitwise equal to piperun's run;
#  - docs/launch.md's sbatch script, taken from docs/launch.md and submitted as it
#    stands (its #SBATCH sizes overridden on sbatch's command line to fit one
#    host: 2 tasks, build/gpt_char a 2-stage build): SIGTERM to the job's steps (what --signal=TERM@60 sends) makes every
#    stage write a checkpoint and exit; the script submitted again resumes from
#    it and finishes bitwise equal to piperun's uninterrupted run;
#  - pp x dp, 2 stages x 2 replicas: srun --multi-prog of 4 tasks (tasks 0,2
#    stage0, 1,3 stage1) and docs/launch.md's pp x dp sbatch script (1 node of 4
#    tasks here), each bitwise equal to piperun --dp 2 (loss and weights).
# Not part of `make test`: it installs packages and starts daemons as root.
# Everything it starts is killed and its folder removed at exit, also on failure.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh" # free_port
. "$TOP/tests/lib_lm.sh"    # lm_build, lm_text, PIPEDATA
for v in $(env | sed -n 's/^\(\(PIPE\|SLURM\|OMPI\|PMI\|PMIX\|MPI\|MASTER\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
unset OMP_NUM_THREADS
PIPERUN=$TOP/build/piperun

T=$(mktemp -d /tmp/pg-slurm.XXXXXX) || exit 1
chmod 711 "$T" # munged wants every folder above its socket open to all (no listing)
export SLURM_CONF="$T/slurm.conf"

# every process whose environment names this test's slurm.conf (the daemons,
# slurmstepd, the job's tasks): killed by id, newest first is not needed
ours() {
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = $$ ] && continue
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && echo "$p"
    done
}
cleanup() {
    command -v scancel >/dev/null 2>&1 && [ -f "$T/slurmctld.pid" ] && timeout 20 scancel --user=root >/dev/null 2>&1
    for f in slurmd slurmctld munge/munged; do
        [ -f "$T/$f.pid" ] && kill -9 "$(cat "$T/$f.pid")" 2>/dev/null
    done
    for p in $(ours); do kill -9 "$p" 2>/dev/null; done
    for p in $(ours); do kill -9 "$p" 2>/dev/null; done
    grep -q " $T" /proc/mounts && { echo "# something is mounted under $T: left in place" >&2; return; }
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- munge and Slurm in $T -----------------------------------------------------
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/job"
chmod 755 "$T/munge" # munged wants its socket's folder open to all (the key stays 0600)
mungekey -c -k "$T/munge/munge.key" >"$T/munge/mungekey.log" 2>&1 &&
    munged --socket="$T/munge/sock" --key-file="$T/munge/munge.key" --log-file="$T/munge/munged.log" \
        --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/seed" >"$T/munge/start.log" 2>&1 &&
    munge -n -S "$T/munge/sock" | unmunge -S "$T/munge/sock" >"$T/munge/check.log" 2>&1
st=$?
ok $st "munged runs with its own key and socket (exit $st)"
[ $st = 0 ] || { cat "$T/munge/"*.log | sed 's/^/# /'; done_testing; }

HOST=$(hostname -s)
# this host as slurmd sees it: CPUs, boards, sockets, cores, threads, memory
node=$(slurmd -C 2>/dev/null | sed -n 's/^NodeName=[^ ]* //p')
case $node in *CPUs=*RealMemory=*) ;; *) node="CPUs=$(nproc)" ;; esac
cpus=$(printf '%s\n' "$node" | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
# the pp x dp batch job runs 4 tasks on this one node, and Slurm refuses more
# tasks per node than CPUs even with --overcommit: a smaller host is described
# as 4 CPUs (config_overrides: slurmd then does not drain a node that has fewer
# than slurm.conf says; the tasks share the real cores)
overrides=
if [ "${cpus:-0}" -lt 4 ]; then
    node="CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 $(printf '%s\n' "$node" | grep -o 'RealMemory=[0-9]*')"
    overrides=SlurmdParameters=config_overrides
fi
cat >"$SLURM_CONF" <<EOF
# made by tests/slurm.sh for one run; see slurm.conf(5) of Slurm 22.05
ClusterName=pgtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=30
FirstJobId=$((1000 + $$ % 50000))
$overrides
NodeName=$HOST NodeAddr=127.0.0.1 $node State=UNKNOWN
PartitionName=pg Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
: >"$T/plugstack.conf"
slurmctld -f "$SLURM_CONF" >"$T/slurmctld.start" 2>&1 && slurmd -f "$SLURM_CONF" >"$T/slurmd.start" 2>&1
st=$?
up=1
if [ $st = 0 ]; then
    i=0
    while [ $i -lt 300 ]; do
        sinfo -h -o '%t' 2>/dev/null | grep -qx idle && { up=0; break; }
        sleep 0.2; i=$((i + 1))
    done
fi
ok $up "slurmctld and slurmd run; the node $HOST is idle ($(srun --version 2>&1))"
if [ $up != 0 ]; then
    sinfo 2>&1 | sed 's/^/# /'
    tail -n 20 "$T"/slurm*.start "$T/slurmctld.log" "$T/slurmd.log" 2>&1 | sed 's/^/# /'
    done_testing
fi
srun --version | sed 's/^/# /'

# ---- the models ----------------------------------------------------------------
lm_text "$T/text.txt" && "$PIPEDATA" text "$T/text.txt" -o "$T/job/tokens.pgd" >/dev/null 2>&1
ok $? "a token stream"
lm_build "$T/lm2" 2 replicate
ok $? "tests/models/lm_tiny.pipe builds on 2 stages"
mkdir -p "$T/lm4/gen" "$T/job/build/gpt_char"
sed -e '/^pos = /a split' -e '/^h1 = /a split' "$TOP/tests/models/lm_tiny.pipe" >"$T/lm4/m.pipe"
build4() {
    "$PIPEGEN" gen "$T/lm4/m.pipe" -o "$T/lm4/gen" || return 1
    for f in "$T/lm4/gen"/stage*.c; do
        ${CC:-cc} -std=c11 -O1 -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$T/lm4/gen" \
            -o "$T/job/build/gpt_char/$(basename "$f" .c)" "$f" "$RTLIB" -lpthread -lm || return 1
    done
}
build4 >"$T/lm4/build.log" 2>&1 && [ "$(ls "$T/job/build/gpt_char" | wc -l)" = 4 ]
ok $? "... and on 4 stages (with two more splits), as docs/launch.md's build/gpt_char"

final() { grep -h 'final loss' "$@" | sed 's/^\[stage [0-9]*\( replica [0-9]*\)*\] //' | head -1; }

# readme_script NAME: docs/launch.md's sbatch script whose --job-name is NAME, as it stands
readme_script() {
    awk -v name="$1" '/^    #!\/bin\/bash$/ { f = 1; s = "" }
        f && /^    / { line = $0; sub(/^    /, "", line); s = s line "\n" }
        f && /^$/ { f = 0; if (s ~ ("--job-name=" name "\n")) { printf "%s", s; exit } }' "$TOP/docs/launch.md"
}

# waitjob JOB SECONDS: until Slurm no longer runs or queues JOB
waitjob() {
    _i=0
    while squeue -h -j "$1" 2>/dev/null | grep -q .; do
        sleep 0.5; _i=$((_i + 1)); [ $_i -ge $(($2 * 2)) ] && return 1
    done
    return 0
}

# multiprog NAME TASKS WHAT REF-OUT REF-ST [SRUN-OPTION...]: srun runs the --multi-prog
# file $T/NAME.conf, whose stages save $T/NAME.st: its loss and weights must be piperun's
multiprog() {
    _mn=$1 _mt=$2 _mw=$3 _mo=$4 _ms=$5
    shift 5
    timeout 300 srun --ntasks="$_mt" "$@" --kill-on-bad-exit=1 --multi-prog "$T/$_mn.conf" >"$T/$_mn.out" 2>&1
    _st=$?
    ok $_st "srun --ntasks=$_mt --multi-prog $_mw trains (exit $_st)"
    [ $_st = 0 ] || tail -n 20 "$T/$_mn.out" | sed 's/^/# /'
    [ -n "$(final "$_mo")" ] && [ "$(final "$T/$_mn.out")" = "$(final "$_mo")" ] && cmp -s "$_ms" "$T/$_mn.st"
    ok $? "... the same loss and weights as piperun's run, bitwise ($(final "$T/$_mn.out"))"
}

# ---- srun --multi-prog, 2 stages -------------------------------------------------
"$PIPERUN" "$T/lm2/bin" -- --steps 1000 --data "$T/job/tokens.pgd" --save "$T/ref1000.st" >"$T/ref1000.out" 2>&1
ok $? "piperun trains 2 stages for 1000 steps"
echo "0-1 $T/lm2/bin/stage%t --steps 1000 --data $T/job/tokens.pgd --save $T/mp2.st" >"$T/mp2.conf"
multiprog mp2 2 "'0-1 .../stage%t ...'" "$T/ref1000.out" "$T/ref1000.st"
like "$(cat "$T/mp2.out")" "stage 1: started as replica 0/1, rank 1/2 from SLURM_PROCID, host $HOST, master 127\\.0\\.0\\.1:[0-9]+ \\(SLURM_STEP_NODELIST\\), threads 1 \\(" \
    "... stage 1's start-up line: rank from SLURM_PROCID, master from the step's node list"

# ---- docs/launch.md's --multi-prog file and srun line, as they stand --------------------
# the block after "A `--multi-prog` file", up to the srun line after it
awk '/^A `--multi-prog` file/ { f = 1; next }
     f && /^    srun / { sub(/^    /, ""); print > "/dev/stderr"; exit }
     f && /^    / { sub(/^    /, ""); print }' "$TOP/docs/launch.md" >"$T/job/stages.conf" 2>"$T/job/srun.line"
grep -q 'stage%t' "$T/job/stages.conf" && grep -q -- '--multi-prog stages.conf' "$T/job/srun.line"
ok $? "docs/launch.md has a --multi-prog file and the srun line that runs it"
sed 's/^/#   /' "$T/job/stages.conf" "$T/job/srun.line"
# 4 tasks on this host's $cpus cores: --overcommit lets them share
(cd "$T/job" && timeout 300 sh -c "$(sed 's/^srun /srun --overcommit /' "$T/job/srun.line")") >"$T/mp4.out" 2>&1
st=$?
ok $st "docs/launch.md's srun line (with --overcommit: 4 tasks on $cpus cores) trains (exit $st)"
[ $st = 0 ] || tail -n 20 "$T/mp4.out" | sed 's/^/# /'
save=$(sed -n 's/.*--save \([^ ]*\).*/\1/p' "$T/job/stages.conf" | head -1)
steps=$(sed -n 's/.*--steps \([0-9]*\).*/\1/p' "$T/job/stages.conf" | head -1)
"$PIPERUN" "$T/lm2/bin" -- --steps "$steps" --data "$T/job/tokens.pgd" --save "$T/refmp.st" >"$T/refmp.out" 2>&1
[ -n "$(final "$T/refmp.out")" ] && [ "$(final "$T/mp4.out")" = "$(final "$T/refmp.out")" ] &&
    cmp -s "$T/refmp.st" "$T/job/$save"
ok $? "... 4 stages: the same loss and weights as piperun's 2-stage run of $steps steps, bitwise ($(final "$T/mp4.out"))"
like "$(cat "$T/mp4.out")" "stage 3: started as replica 0/1, rank 3/4 from SLURM_PROCID, host $HOST" \
    "... stage 3 is task 3"

# ---- pp x dp: 2 stages x 2 replicas, srun --multi-prog and docs/launch.md's sbatch script -----
"$PIPERUN" --dp 2 "$T/lm2/bin" -- --steps 200 --data "$T/job/tokens.pgd" --save "$T/refdp.st" >"$T/refdp.out" 2>&1
ok $? "piperun --dp 2 trains 2 stages x 2 replicas for 200 steps"
printf '%s\n' "# task  program: stage k runs as tasks k and 2 + k (rank = replica x 2 + stage)" \
    "0,2     $T/lm2/bin/stage0 --steps 200 --data $T/job/tokens.pgd --save $T/mpdp.st" \
    "1,3     $T/lm2/bin/stage1 --steps 200 --data $T/job/tokens.pgd --save $T/mpdp.st" >"$T/mpdp.conf"
multiprog mpdp 4 "(tasks 0,2 stage0; 1,3 stage1: 2 stages x 2 replicas)" "$T/refdp.out" "$T/refdp.st" --overcommit
like "$(cat "$T/mpdp.out")" "stage 0: started as replica 1/2, rank 2/4 from SLURM_PROCID, host $HOST" \
    "... task 2 is replica 1's stage 0"

readme_script ppdp >"$T/dpjob.sh"
grep -q -- '--multi-prog' "$T/dpjob.sh" && grep -q 'seq -s,' "$T/dpjob.sh" && grep -q -- '--save' "$T/dpjob.sh"
ok $? "docs/launch.md has the pp x dp sbatch script (the --multi-prog file from the task count)"
sed 's/^/#   /' "$T/dpjob.sh"
# one host: its 2 nodes of 2 tasks become 1 node of 4 tasks sharing its cores;
# build/m is the 2-stage build
mkdir -p "$T/dpjob/build" && cp "$T/dpjob.sh" "$T/dpjob/job.sh" && cp -r "$T/lm2/bin" "$T/dpjob/build/m"
# MASTER_PORT: the port derived from the job id (the gpt job above uses it) may
# be held by another program's connection on a busy host; a free one is named
job=$(cd "$T/dpjob" && sbatch --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 --cpus-per-task=1 \
    --export=ALL,MASTER_PORT="$(free_port)" job.sh 2>"$T/dpjob.err")
st=$?
ok $st "sbatch of the pp x dp script: job $job"
[ $st = 0 ] || sed 's/^/# /' "$T/dpjob.err"
if [ $st = 0 ]; then
    waitjob "$job" 300
    ok $? "... the job ends"
    out=$T/dpjob/ppdp-$job.out
    opts=$(sed -n 's/^opts="\(--steps [^"]*\)"$/\1/p' "$T/dpjob.sh" | sed "s|\$PWD|$T/dpref|g")
    mkdir -p "$T/dpref"
    # shellcheck disable=SC2086
    "$PIPERUN" --dp 2 "$T/lm2/bin" -- $opts >"$T/dpref.out" 2>&1
    ok $? "piperun --dp 2 runs the script's options ($opts)"
    [ -n "$(final "$T/dpref.out")" ] && [ "$(final "$out")" = "$(final "$T/dpref.out")" ] &&
        cmp -s "$T/dpjob/m.st" "$T/dpref/m.st"
    ok $? "... the job's loss and weights are piperun's, bitwise ($(final "$out"))"
    [ "$(grep -c 'started as replica [01]/2, rank [0-3]/4 from SLURM_PROCID' "$out")" = 4 ]
    ok $? "... its 4 tasks ran as 2 replicas of the 2 stages"
    grep -q 'final loss' "$out" || tail -n 20 "$out" | sed 's/^/# /'
fi

# ---- docs/launch.md's sbatch script, as it stands: stopped by SIGTERM, resubmitted --------
readme_script gpt >"$T/job/job.sh"
grep -q -- '--save-on-exit' "$T/job/job.sh" && grep -q -- '--signal=TERM@60' "$T/job/job.sh" &&
    grep -q -- '--multi-prog' "$T/job/job.sh"
ok $? "docs/launch.md has the sbatch script (--signal=TERM@60, --save-on-exit, srun --multi-prog)"
# one host: the script's 2 nodes of 2 tasks with 8 cores each become 1 node
# of 2 tasks with 1 core each (command-line options override #SBATCH lines;
# Slurm refuses more tasks per node than cores even with --overcommit), so
# build/gpt_char here is the 2-stage build
mkdir -p "$T/batch/build" && cp "$T/job/tokens.pgd" "$T/batch/" && cp "$T/job/job.sh" "$T/batch/" &&
    cp -r "$T/lm2/bin" "$T/batch/build/gpt_char"
SB="--nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1"
submit() { (cd "$T/batch" && sbatch --parsable $SB job.sh) 2>"$T/sbatch.err"; }
job=$(submit)
st=$?
ok $st "sbatch job.sh: job $job"
[ $st = 0 ] || { sed 's/^/# /' "$T/sbatch.err"; done_testing; }
# until the first checkpoint (--save-every), or the job ends
i=0
while [ ! -s "$T/batch/ck/LATEST" ] && [ $i -lt 1200 ] && squeue -h -j "$job" 2>/dev/null | grep -q .; do
    sleep 0.5; i=$((i + 1))
done
[ -s "$T/batch/ck/LATEST" ] && squeue -h -j "$job" 2>/dev/null | grep -q .
st=$?
ok $st "... the job trains and writes its first checkpoint (--save-every)"
[ $st = 0 ] || { tail -n 20 "$T/batch/gpt-$job.out" "$T/slurmctld.log" | sed 's/^/# /'; done_testing; }
scancel --signal=TERM "$job"
ok $? "scancel --signal=TERM $job (what --signal=TERM@60 sends the job's steps)"
waitjob "$job" 300
ok $? "... the job ends"
out1=$T/batch/gpt-$job.out
like "$(cat "$out1")" "stage 1: stopped by signal 15 after step [0-9]+ \\(checkpoint saved\\)" "... stage 1 saved a checkpoint and stopped"
s1=$(sed -n 's/.*stage 0: stopped by signal 15 after step \([0-9]*\) (checkpoint saved).*/\1/p' "$out1")
n=$(grep -c "stopped by signal 15 after step $s1 (checkpoint saved)" "$out1")
[ "$n" = 2 ] && grep -q "^step-$(printf %08d "$s1")" "$T/batch/ck/LATEST"
ok $? "... both stages stopped after step $s1 and LATEST names it"
[ "$n" = 2 ] || tail -n 20 "$out1" | sed 's/^/# /'
job2=$(submit)
st=$?
ok $st "the same script submitted again: job $job2"
[ $st = 0 ] || { sed 's/^/# /' "$T/sbatch.err"; done_testing; }
waitjob "$job2" 600
ok $? "... the job ends"
out2=$T/batch/gpt-$job2.out
like "$(cat "$out2")" "resume: continuing from .*step-$(printf %08d "$s1") \\(step $s1\\)" "... it resumed from step $s1"
opts=$(sed -n 's/^opts="\(--steps [^"]*\)"$/\1/p' "$T/batch/job.sh" | sed "s|\$PWD|$T/ref|g; s|\$CK|$T/ref/ck|g")
mkdir -p "$T/ref" && cp "$T/batch/tokens.pgd" "$T/ref/"
# shellcheck disable=SC2086
"$PIPERUN" "$T/lm2/bin" -- $opts >"$T/ref.out" 2>&1
ok $? "piperun runs the script's options uninterrupted ($opts)"
last=$(head -n 1 "$T/ref/ck/LATEST")
[ -n "$(final "$T/ref.out")" ] && [ "$(final "$out2")" = "$(final "$T/ref.out")" ]
ok $? "... the resumed job's final loss is piperun's, bitwise ($(final "$out2"))"
same=0
for k in 0 1; do
    [ -f "$T/batch/ck/$last/stage$k.safetensors" ] || same=1
done
"${PYTHON:-/usr/bin/python3}" - "$T/batch/ck/$last" "$T/ref/ck/$last" >"$T/cmp.out" 2>&1 <<'EOF' || same=1
# every tensor of the resumed job's last checkpoint equals, byte for
# byte, the tensor of that name in piperun's (2 stages)
import json, struct, sys, os
def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith('.safetensors'): continue
        b = open(os.path.join(d, f), 'rb').read()
        n = struct.unpack('<Q', b[:8])[0]
        h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k == '__metadata__': continue
            s, e = v['data_offsets']
            out[k] = b[8 + n + s:8 + n + e]
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
print(len(a), 'tensors')
sys.exit(0 if a and a == b else 1)
EOF
ok $same "... and every tensor of its last checkpoint ($last: $(cat "$T/cmp.out")) equals piperun's"
done_testing
