# tests/lib.sh — tiny TAP helpers for the shell tests (tests/*.t, run by prove).
# Source it, call plan N (or done_testing at the end), then ok/is/like. What a
# failed is/like got goes to stderr, so that prove shows it without -v.
TOP=$(cd "$(dirname "$0")/.." && pwd)
PIPEGEN=${PIPEGEN:-$TOP/build-san/pipegen}
[ -x "$PIPEGEN" ] || PIPEGEN=$TOP/build/pipegen
# every stage a test starts checks that the messages it lent from its arena
# stayed as they were until written (runtime/core/step.c, PIPE_CHECK_SENDS)
export PIPE_CHECK_SENDS="${PIPE_CHECK_SENDS-1}"
# ... and that every GEMM weight's packed copy equals the weight at each use
# (runtime/cpu/wpack.c, PIPE_CHECK_PACKS: a weight written unmarked stops it)
export PIPE_CHECK_PACKS="${PIPE_CHECK_PACKS-1}"
_n=0; _fail=0
plan() { echo "1..$1"; }
ok() { # ok COND-EXIT-STATUS NAME
    _n=$((_n + 1))
    if [ "$1" = 0 ]; then echo "ok $_n - $2"; else echo "not ok $_n - $2"; _fail=$((_fail + 1)); fi
}
is() { # is GOT WANT NAME
    _n=$((_n + 1))
    if [ "$1" = "$2" ]; then echo "ok $_n - $3"; else
        echo "not ok $_n - $3"; _fail=$((_fail + 1))
        printf '%s\n' "# --- want" "$2" "# --- got" "$1" | sed 's/^/# /' >&2
    fi
}
like() { # like GOT REGEX NAME
    _n=$((_n + 1))
    if printf '%s' "$1" | grep -Eq -- "$2"; then echo "ok $_n - $3"; else
        echo "not ok $_n - $3"; _fail=$((_fail + 1)); printf '%s\n' "$1" | sed 's/^/# got: /' | head -20 >&2
    fi
}
skip() { # skip REASON: one skipped test
    _n=$((_n + 1))
    echo "ok $_n # SKIP $1"
}
done_testing() { echo "1..$_n"; [ "$_fail" = 0 ]; exit $?; }
# need_python MODULE...: PY is the Python of the tests ($PYTHON, else Debian's);
# without every MODULE the whole file is one visible skip
need_python() {
    PY=${PYTHON:-/usr/bin/python3}
    for _m in "$@"; do
        if ! $PY -c "import $_m" 2>/dev/null; then
            echo "1..0 # SKIP $PY cannot import $_m (Debian: apt-get install python3-torch, which brings numpy)"
            exit 0
        fi
    done
}

# cpu_of FILE: the CPU seconds (user + system) of the children in FILE, the
# output of `times` (run it in the shell that starts the children: a $(...)
# subshell started after them sees none). Guards against quadratic paths time
# CPU, not wall clock: a busy machine must not trip them.
cpu_of() {
    awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); sub("s", "", u[2]); sub("s", "", s[2]);
                   printf "%.3f\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$1"
}
