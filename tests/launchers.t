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
#  - MPICH's Hydra (mpiexec.hydra, MPMD) inside an allocation's variables:
#    the ranks from PMI_RANK/PMI_SIZE;
#  - two "hosts" (network namespaces joined by veth): srun's variables with
#    the node list naming the hosts' addresses, and MASTER_ADDR with Open MPI's
#    variables, each bitwise equal to piperun's run; with nothing naming the
#    master both stages stop at once;
#  - processes that say they span several hosts with nothing naming the master
#    are refused at once, saying what to set.
# Every process prints its start-up line (rank and where it came from, master,
# threads); the checks read it.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh" # gen_mlp, free_port, fault_tmpdir, wait_exit
fault_tmpdir launchers
NS=pgl$$
trap 'ns_pair_del "$NS"; fault_cleanup' EXIT
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

# ---- mpirun MPMD, docs/launch.md's line: -x in every app context ---------------
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

# ---- MPICH's Hydra (mpiexec.hydra), MPMD: ranks from PMI_RANK/PMI_SIZE ----------
HYDRA=${HYDRA:-mpiexec.hydra}
if ! "$HYDRA" --version 2>/dev/null | grep -q 'HYDRA build details'; then
    ok 1 "MPICH's mpiexec.hydra is here (Debian's mpich: tools/deps.sh test installs it)"
else
    job=$(job_with_free_port) # a job id whose port is free: sbatch's variables again
    jport=$((20000 + (job * 8) % 20000))
    SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_JOB_ID=$job SLURM_JOB_NODELIST=$HOST SLURM_NNODES=1 \
        timeout 120 "$HYDRA" -n 1 "$B/stage0" --steps 4 --save "$T/hy.st" : \
        -n 1 "$B/stage1" --steps 4 --save "$T/hy.st" >"$T/hy.out" 2>&1
    st=$?
    ok $st "mpiexec.hydra -n 1 stage0 : -n 1 stage1 trains, inside sbatch's variables (exit $st)"
    [ $st = 0 ] || tail -20 "$T/hy.out" | sed 's/^/# /'
    [ -n "$ref" ] && [ "$(final "$T/hy.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/hy.st"
    ok $? "... the same loss and weights as piperun's run, bitwise"
    like "$(cat "$T/hy.out")" "stage 1: started as replica 0/1, rank 1/2 from PMI_RANK \\(not SLURM_PROCID=0\\), host $HOST, master 127\\.0\\.0\\.1:$jport \\(SLURM_JOB_NODELIST\\), threads [0-9]+ \\([0-9]+ cores / 2 processes on this host, MPI_LOCALNRANKS\\)" \
        "... stage 1's start-up line: rank from Hydra's PMI_RANK, threads from MPI_LOCALNRANKS"
fi

# ---- two hosts: network namespaces joined by veth ------------------------------
# stage k runs on "host" 10.252.0.(k+1) (its own network stack: stage 0 listens
# on 10.252.0.1 only, nothing crosses through loopback); the launcher's
# variables say the ranks span two hosts, and the master comes from them
if ns_pair "$NS" 10.252.0.1 10.252.0.2; then
    # on_hosts NAME RANKVAR ENV...: stage k in namespace a/b with ENV and
    # RANKVAR=k, both waited for; exits in $x0, $x1
    on_hosts() {
        _name=$1; _rv=$2; shift 2
        for k in 0 1; do
            h=$(printf 'a\nb' | sed -n "$((k + 1))p")
            env "$@" "$_rv=$k" ip netns exec "$NS$h" "$B/stage$k" --steps 4 \
                --save "$T/$_name.st" >"$T/$_name.$k.out" 2>&1 &
            echo $! >"$T/$_name.$k.pid"
        done
        wait_exit "$(cat "$T/$_name.0.pid")" 120; x0=$WX
        wait_exit "$(cat "$T/$_name.1.pid")" 120; x1=$WX
    }
    job=$(job_with_free_port)
    jport=$((20000 + (job * 8 + 3) % 20000))
    on_hosts xh SLURM_PROCID SLURM_NTASKS=2 SLURM_JOB_ID=$job SLURM_STEP_ID=3 SLURM_STEP_NUM_NODES=2 SLURM_NTASKS_PER_NODE=1 \
        SLURM_STEP_NODELIST='10.252.0.[1-2]' SLURM_JOB_NODELIST='10.252.0.[1-2]'
    [ "$x0" = 0 ] && [ "$x1" = 0 ]
    ok $? "srun's variables on two hosts, the node list '10.252.0.[1-2]': the stages train (exits $x0, $x1)"
    [ "$x1" = 0 ] || tail -n 5 "$T/xh.0.out" "$T/xh.1.out" | sed 's/^/# /'
    [ -n "$ref" ] && [ "$(final "$T/xh.1.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/xh.st"
    ok $? "... the same loss and weights as piperun's run, bitwise"
    like "$(cat "$T/xh.1.out")" "stage 1: started as replica 0/1, rank 1/2 from SLURM_PROCID, host [^,]*, master 10\\.252\\.0\\.1:$jport \\(SLURM_STEP_NODELIST\\)" \
        "... the master is the list's first host, not loopback, on job $job step 3's port"
    on_hosts xm OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=1 MASTER_ADDR=10.252.0.1 \
        MASTER_PORT=29517
    [ "$x0" = 0 ] && [ "$x1" = 0 ] && [ -n "$ref" ] && [ "$(final "$T/xm.1.out")" = "$ref" ] && cmp -s "$T/ref.st" "$T/xm.st"
    ok $? "Open MPI's variables on two hosts, MASTER_ADDR=10.252.0.1: bitwise piperun's run (exits $x0, $x1)"
    like "$(cat "$T/xm.1.out")" "stage 1: started as replica 0/1, rank 1/2 from OMPI_COMM_WORLD_RANK, host [^,]*, master 10\\.252\\.0\\.1:29517 \\(MASTER_ADDR\\)" \
        "... stage 1's start-up line names MASTER_ADDR"
    t0=$(date +%s.%N)
    on_hosts xn SLURM_PROCID SLURM_NTASKS=2 SLURM_JOB_ID=$job SLURM_NTASKS_PER_NODE=1
    el=$(elapsed_since "$t0")
    [ "$x0" = 1 ] && [ "$x1" = 1 ] && awk -v e="$el" 'BEGIN { exit !(e < 20) }'
    ok $? "two hosts, nothing names the master (no node list): both exit 1 at once (exits $x0, $x1 after ${el} s)"
    like "$(cat "$T/xn.0.out")" "stage 0: the 2 processes run on several hosts \\(SLURM_NTASKS_PER_NODE=1 of SLURM_NTASKS=2\\) and nothing names the master: set PIPE_MASTER" \
        "... stage 0 says what to set"
fi

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
