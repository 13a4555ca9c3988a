# tests/lib_fault.sh — helpers for the fault-injection tests (tests/fault_*.t);
# source after tests/lib.sh and tests/lib_e2e.sh.
export OPENBLAS_NUM_THREADS=1

# gen_mlp DIR STAGES: tests/models/mlp_small.pipe cut to 1..4 stages, generated
# and compiled into DIR/bin.
gen_mlp() {
    case $2 in 1) del='/# S[123]$/d' ;; 2) del='/# S[13]$/d' ;; 3) del='/# S2$/d' ;; *) del='' ;; esac
    mkdir -p "$1"
    sed -e "$del" "$TOP/tests/models/mlp_small.pipe" >"$1/m.pipe"
    "$PIPEGEN" gen "$1/m.pipe" -o "$1" >"$1/gen.log" 2>&1 && build "$1"
}

# free_port: a loopback port nobody listens on right now
free_port() {
    "${PYTHON:-/usr/bin/python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_stage BIN K WORLD MASTER LOG [args...]: run BIN/stageK by hand in the
# background (no piperun); its pid goes to LOG.pid
start_stage() {
    _b=$1 _k=$2 _w=$3 _m=$4 _l=$5
    shift 5
    PIPE_RANK=$_k PIPE_WORLD=$_w PIPE_MASTER=$_m "$_b/stage$_k" --threads 1 "$@" >"$_l" 2>&1 &
    echo $! >"$_l.pid"
}

# wait_exit PID SECONDS: wait for our child PID to exit within SECONDS; sets WX
# to its exit status, or to "hung" (and kills it) when it did not
wait_exit() {
    _t=0
    while grep -q '^[0-9]* ([^)]*) [RSDt]' "/proc/$1/stat" 2>/dev/null; do
        sleep 0.1; _t=$((_t + 1))
        if [ $_t -ge $(($2 * 10)) ]; then kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; WX=hung; return; fi
    done
    wait "$1"; WX=$?
}

# wait_for FILE REGEX SECONDS: until FILE has a line matching REGEX
wait_for() {
    _t=0
    while ! grep -Eq -- "$2" "$1" 2>/dev/null; do
        sleep 0.1; _t=$((_t + 1)); [ $_t -ge $(($3 * 10)) ] && return 1
    done
    return 0
}

# elapsed_since T0 (from `date +%s.%N`)
elapsed_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# fault_tmpdir NAME: T becomes a new /tmp/pg-NAME.XXXXXX; at exit every process
# named by a $T/*.pid file is killed, any file system mounted on a folder of T
# unmounted, and T removed
fault_tmpdir() {
    T=$(mktemp -d "/tmp/pg-$1.XXXXXX") || exit 1
    trap fault_cleanup EXIT
}
fault_cleanup() {
    for f in "$T"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    for d in "$T"/*/; do mountpoint -q "$d" 2>/dev/null && umount "$d"; done
    rm -rf "$T"
}

# ns_pair NS ADDR_A ADDR_B: two network namespaces NSa and NSb ("two hosts")
# joined by a veth pair NSva/NSvb with ADDR_A and ADDR_B (/24), links and
# loopbacks up; one TAP line says so (a skip where namespaces cannot be made
# here at all: not root, no permission). Returns 0 when they are ready. Undo
# with ns_pair_del NS (in the test's exit trap).
ns_pair() {
    if ! ip netns add "${1}a" 2>"$T/ns.err"; then
        skip "network namespaces not permitted: $(cat "$T/ns.err")"
        return 1
    fi
    ip netns add "${1}b" && ip link add "${1}va" type veth peer name "${1}vb" &&
        ip link set "${1}va" netns "${1}a" && ip link set "${1}vb" netns "${1}b" &&
        ip -n "${1}a" addr add "$2/24" dev "${1}va" && ip -n "${1}b" addr add "$3/24" dev "${1}vb" &&
        ip -n "${1}a" link set "${1}va" up && ip -n "${1}b" link set "${1}vb" up &&
        ip -n "${1}a" link set lo up && ip -n "${1}b" link set lo up
    _st=$?
    ok $_st "two namespaces (hosts $2 and $3) joined by a veth pair"
    return $_st
}
ns_pair_del() {
    ip netns del "${1}a" 2>/dev/null
    ip netns del "${1}b" 2>/dev/null
}
