#!/bin/sh
# tests/launchers.t — the launchers users already have, for real on this host:
#  - Open MPI's mpirun, MPMD (one app context per stage, PIPE_MASTER given to
#    each with -x), trains a 2-stage model to the same loss and weights,
#    bitwise, as piperun;
#  - the same inside what an sbatch allocation leaves in the environment:
#    every rank inherits SLURM_PROCID=0 and SLURM_NTASKS=1; the ranks come from
#    Open MPI's variables, the master from SLURM_JOB_NODELIST (one host here:
#    loopback) and a port derived from SLURM_JOB_ID;
#  - srun's variables (SLURM_PROCID/SLURM_NTASKS, SLURM_STEP_NODELIST in its
#    compressed form, SLURM_JOB_ID/SLURM_STEP_ID) by hand: the master is the
#    node list's first host;
#  - processes that say they span several hosts with nothing naming the master
#    are refused at once, saying what to set.
# Every process prints its start-up line (rank and where it came from, master,
# threads); the checks read it.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh" # gen_mlp, free_port, fault_tmpdir, wait_exit
fault_tmpdir launchers
# what launched `make test` must not leak into the runs below
for v in $(env | sed -n 's/^\(\(PIPE\|SLURM\|OMPI\|PMI\|PMIX\|MPI\|MASTER\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
unset OMP_NUM_THREADS
if [ "$(id -u)" = 0 ]; then # Open MPI refuses root without both
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
B=$T/m2/bin
HOST=$(hostname)

# final LOG: the 'final loss' line of LOG, without piperun's prefix
final() { grep 'final loss' "$1" | sed 's/^\[stage [0-9]*\] //'; }

# job_with_free_port: a Slurm job id whose derived master port (20000 +
# (job * 8 + step) % 20000, step 0) nobody listens on now
job_with_free_port() {
    "${PYTHON:-/usr/bin/python3}" -c '
import random, socket
for _ in range(200):
    j = random.randrange(1000, 10**6)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 20000 + (j * 8) % 20000)); print(j); break
    except OSError: pass
    finally: s.close()'
}

gen_mlp "$T/m2" 2
ok $? "tests/models/mlp_small.pipe builds on 2 stages"
"$PIPERUN" "$B" -- --steps 4 --save "$T/ref.st" >"$T/ref.out" 2>&1
ok $? "2 stages train through piperun"
ref=$(final "$T/ref.out")

MPIRUN=${MPIRUN:-mpirun}
if ! "$MPIRUN" --version 2>/dev/null | grep -q 'Open MPI'; then
    ok 1 "Open MPI's mpirun is here (Debian's openmpi-bin: tools/deps.sh test installs it)"
    done_testing
fi
"$MPIRUN" --version 2>&1 | head -1 | sed 's/^/# /'

# ---- mpirun MPMD, the README's line: -x in every app context ---------------
port=$(free_port)
timeout 120 "$MPIRUN" --oversubscribe --bind-to none \
    -np 1 -x PIPE_MASTER="127.0.0.1:$port" "$B/stage0" --steps 4 --save "$T/mpi.st" : \
    -np 1 -x PIPE_MASTER="127.0.0.1:$port" "$B/stage1" --steps 4 --save "$T/mpi.st" >"$T/mpi.out" 2>&1
st=$?
ok $st "mpirun -np 1 stage0 : -np 1 stage1 trains (exit $st)"
[ $st = 0 ] || tail -20 "$T/mpi.out" | sed 's/^/# /'
[ -n "$ref" ] && [ "$(final "$T/mpi.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/mpi.st"
ok $? "... the same loss and weights as piperun's run, bitwise ($(final "$T/mpi.out"))"
like "$(cat "$T/mpi.out")" "stage 1: started as replica 0/1, rank 1/2 from OMPI_COMM_WORLD_RANK, host $HOST, master 127\\.0\\.0\\.1:$port \\(PIPE_MASTER\\), threads [0-9]+ \\([0-9]+ cores / 2 processes on this host, OMPI_COMM_WORLD_LOCAL_SIZE\\)" \
    "... stage 1's start-up line: rank from Open MPI, master, threads from the cores per local rank"

# ---- the same inside an sbatch allocation's variables ------------------------
job=$(job_with_free_port)
jport=$((20000 + (job * 8) % 20000))
SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_JOB_ID=$job SLURM_JOB_NODELIST=$HOST SLURM_NODELIST=$HOST SLURM_NNODES=1 \
    timeout 120 "$MPIRUN" --oversubscribe --bind-to none \
    -np 1 "$B/stage0" --steps 4 --save "$T/sb.st" : -np 1 "$B/stage1" --steps 4 --save "$T/sb.st" >"$T/sb.out" 2>&1
st=$?
ok $st "mpirun with SLURM_PROCID=0 and SLURM_NTASKS=1 in every rank (as sbatch leaves them) trains (exit $st)"
[ $st = 0 ] || tail -20 "$T/sb.out" | sed 's/^/# /'
[ -n "$ref" ] && [ "$(final "$T/sb.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/sb.st"
ok $? "... the same loss and weights as piperun's run, bitwise"
like "$(cat "$T/sb.out")" "stage 1: started as replica 0/1, rank 1/2 from OMPI_COMM_WORLD_RANK \\(not SLURM_PROCID=0\\), host $HOST, master 127\\.0\\.0\\.1:$jport \\(SLURM_JOB_NODELIST\\)" \
    "... stage 1 says its rank is Open MPI's, not Slurm's, and its master the job's port on loopback"

# ---- srun's variables by hand: the master from SLURM_STEP_NODELIST ------------
job=$(job_with_free_port)
jport=$((20000 + (job * 8) % 20000))
for k in 0 1; do
    SLURM_PROCID=$k SLURM_NTASKS=2 SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_STEP_NUM_NODES=2 \
        SLURM_STEP_NODELIST='localhost,nohost-b[01-02]' SLURM_JOB_NODELIST='a[1-9]' \
        "$B/stage$k" --steps 4 --save "$T/srun.st" >"$T/srun.$k.out" 2>&1 &
    echo $! >"$T/srun.$k.pid"
done
wait_exit "$(cat "$T/srun.0.pid")" 120; x0=$WX
wait_exit "$(cat "$T/srun.1.pid")" 120; x1=$WX
[ "$x0" = 0 ] && [ "$x1" = 0 ]
ok $? "two stages with srun's variables train (exits $x0, $x1)"
[ -n "$ref" ] && [ "$(final "$T/srun.1.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/srun.st"
ok $? "... the same loss and weights as piperun's run, bitwise"
like "$(cat "$T/srun.1.out")" "stage 1: started as replica 0/1, rank 1/2 from SLURM_PROCID, host $HOST, master localhost:$jport \\(SLURM_STEP_NODELIST\\)" \
    "... the master is the first host of 'localhost,nohost-b[01-02]', the port from job $job"

# ---- several hosts, no master: refused at once ---------------------------------
t0=$(date +%s.%N)
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=1 SLURM_PROCID=0 SLURM_NTASKS=1 \
    timeout 30 "$B/stage1" --steps 1 >"$T/nomaster.out" 2>&1
st=$?
el=$(elapsed_since "$t0")
[ $st = 1 ] && awk -v e="$el" 'BEGIN { exit !(e < 10) }'
ok $? "ranks on several hosts with nothing naming the master: exit 1 at once (exit $st after ${el} s)"
like "$(cat "$T/nomaster.out")" "stage 1: the 2 processes run on several hosts \\(OMPI_COMM_WORLD_LOCAL_SIZE=1 of OMPI_COMM_WORLD_SIZE=2\\) and nothing names the master: set PIPE_MASTER=host:port" \
    "... saying what to set"
SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_JOB_ID=5 SLURM_STEP_NODELIST='n[1-' timeout 30 "$B/stage1" --steps 1 \
    >"$T/badlist.out" 2>&1
st=$?
[ $st = 1 ]; ok $? "a bad SLURM_STEP_NODELIST: exit 1 (exit $st)"
like "$(cat "$T/badlist.out")" "stage 1: SLURM_STEP_NODELIST: 'n\\[1-' at character 5: expected a number after '-'" \
    "... naming the variable and the place"
done_testing
