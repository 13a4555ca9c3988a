#!/bin/sh
# tools/deps.sh — make sure what pipegen's build and tests really use is here,
# by probing for it the way the build uses it (never by a file that another
# package could also provide: the reference BLAS's cblas.h is not OpenBLAS).
#
#   tools/deps.sh build        a C compiler, re2c, lemon and its lempar.c template
#                              (the runtime has its own GEMM: no BLAS is needed)
#   tools/deps.sh test         build's, plus a Python that imports torch and sklearn
#                              ($PYTHON, default /usr/bin/python3) and the test suite's tools
#                              (prove, ip, nm, ps/pgrep, clang with libFuzzer,
#                              Open MPI's mpirun, MPICH's mpiexec.hydra, a Fortran
#                              BLAS's sgemm_ for the emulated cuBLAS of tests/gpu/emu)
#   tools/deps.sh bench        test's, plus OpenBLAS, the anchor bench/gemm.sh times
#                              the runtime's GEMM against (its cblas.h and library: a
#                              compile, link and run of openblas_set_num_threads +
#                              cblas_sgemm)
#   tools/deps.sh slurm        test's, plus a single-host Slurm for `make test-slurm`
#                              (slurmctld, slurmd, srun/sbatch/scancel, munged and
#                              mungekey; the plugins it configures: auth and cred
#                              munge, proctrack/linuxproc, task/none, select/cons_tres)
#   tools/deps.sh hf           a Python virtual environment for `pipegen import/export hf`
#                              and its tests: $PIPEGEN_VENV (default ~/.cache/pipegen/venv),
#                              made with --system-site-packages so that torch is Debian's
#                              python3-torch (1.13), holding transformers<4.45 (4.44 is the
#                              last release whose PyTorch models run on torch 1.13),
#                              safetensors and tokenizers from PyPI. `test` runs this step
#                              too but goes on without it (the tests that need it skip,
#                              saying why)
#   tools/deps.sh blas-cflags  print the compiler flags that find OpenBLAS's own
#                              cblas.h, or "none" (and exit 1) when no OpenBLAS links
#
# As root, installs what is missing (apt-get --no-install-recommends) and probes
# again; otherwise, or with --no-install, prints the one command to run and exits
# 1. From the environment: CC, PYTHON, RE2C, LEMON, LEMPAR (lemon's template), MPIRUN, BLAS_CFLAGS
# (use these flags instead of searching) and PG_BLAS_DIRS (the directories
# searched for OpenBLAS's cblas.h, instead of the usual ones).
set -u
want="${1:-build}"
install=1
[ "${2:-}" = --no-install ] && install=0
CC=${CC:-cc}
PYTHON=${PYTHON:-/usr/bin/python3}
LEMPAR=${LEMPAR:-/usr/share/lemon/lempar.c}
TMPD=""
cleanup() { [ -n "$TMPD" ] && rm -rf "$TMPD"; }
trap cleanup EXIT

tmpdir() {
    [ -n "$TMPD" ] || TMPD=$(mktemp -d "${TMPDIR:-/tmp}/pg-deps.XXXXXX") || exit 1
}

# blas_probe FLAGS: does a program that uses OpenBLAS the way bench/gemm.sh does
# compile (no implicit declarations), link and run with these include flags?
blas_probe() {
    tmpdir
    cat >"$TMPD/p.c" <<'EOF'
#include <cblas.h>
int main(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0};
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    return !(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
}
EOF
    # shellcheck disable=SC2086
    "$CC" -std=c11 -Werror=implicit-function-declaration $1 -o "$TMPD/p" "$TMPD/p.c" \
        -lopenblas -lpthread -lm >"$TMPD/p.log" 2>&1 && "$TMPD/p" >/dev/null 2>&1
}

# blas_cflags: the first include flags under which the probe passes. OpenBLAS's
# own header directory comes before the default path, where /usr/include/<triplet>/cblas.h
# may be any BLAS's (Debian's alternatives choose it).
blas_cflags() {
    if [ -n "${BLAS_CFLAGS+x}" ] && [ "$BLAS_CFLAGS" != none ]; then
        blas_probe "$BLAS_CFLAGS" && { echo "$BLAS_CFLAGS"; return 0; }
        return 1
    fi
    cands=""
    if [ -n "${PG_BLAS_DIRS+x}" ]; then
        dirs=$PG_BLAS_DIRS
    else
        if command -v pkg-config >/dev/null 2>&1; then
            d=$(pkg-config --variable=includedir openblas 2>/dev/null) && [ -n "$d" ] && cands="$d"
        fi
        dirs="/usr/include/*/openblas-pthread /usr/include/*/openblas-openmp /usr/include/*/openblas-serial
              /usr/include/openblas /usr/local/include/openblas /opt/OpenBLAS/include"
    fi
    for d in $dirs; do
        [ -f "$d/cblas.h" ] && cands="$cands $d"
    done
    for d in $cands; do
        d=${d%/}
        blas_probe "-I$d" && { echo "-I$d"; return 0; }
    done
    blas_probe "" && { echo ""; return 0; }
    return 1
}

if [ "$want" = blas-cflags ]; then
    blas_cflags || { echo none; exit 1; }
    exit 0
fi
# hf_venv: the virtual environment of `pipegen import/export hf` (above); 0
# when it imports what the step needs, else made (as root) or the command printed
VENV=${PIPEGEN_VENV:-${HOME:-/root}/.cache/pipegen/venv}
# torch.from_numpy: Debian's torch 1.13 is built against NumPy 1.x; a NumPy 2
# from PyPI in the environment (pip pulls one in for transformers when Debian's
# python3-numpy is missing) imports, but then every tensor <-> array
# conversion fails ("Numpy is not available"), so the probe converts one.
hf_probe() {
    "$VENV/bin/python3" -c 'import numpy, torch, safetensors, tokenizers, transformers
torch.from_numpy(numpy.zeros(1))
v = tuple(int(x) for x in transformers.__version__.split(".")[:2])
assert v < (4, 45), transformers.__version__' >/dev/null 2>&1
}
# --clear: an environment that fails the probe (an older one, one made before
# Debian's torch was here) is made anew; 'numpy<2' keeps pip from putting a
# NumPy that torch 1.13 cannot use in front of Debian's.
hf_venv() {
    hf_probe && return 0
    cmd="$PYTHON -m venv --clear --system-site-packages $VENV && $VENV/bin/pip install 'transformers<4.45' 'numpy<2' safetensors tokenizers"
    if [ "$(id -u)" = 0 ] && [ $install = 1 ]; then
        echo "pipegen: making $VENV (transformers<4.45, safetensors, tokenizers from PyPI)"
        mkdir -p "$(dirname "$VENV")" && "$PYTHON" -m venv --clear --system-site-packages "$VENV" >/dev/null &&
            "$VENV/bin/pip" install -q --disable-pip-version-check 'transformers<4.45' 'numpy<2' safetensors tokenizers \
                >"$VENV.log" 2>&1
        hf_probe && return 0
        echo "pipegen: $VENV does not import torch (converting a NumPy array), transformers<4.45, safetensors and tokenizers; see $VENV.log" >&2
        return 1
    fi
    echo "pipegen: no Python environment for import/export hf at $VENV; run this once:" >&2
    echo "    $cmd" >&2
    return 1
}

case "$want" in
build|test|bench|slurm|hf) ;;
*) echo "usage: tools/deps.sh build|test|bench|slurm|hf [--no-install] | blas-cflags" >&2; exit 2 ;;
esac
# after the Debian packages (torch among them): the tests of import/export hf
# skip, saying why, without it, so it is never fatal here; `deps.sh hf` is
# that step alone, after Debian's torch and NumPy (which the environment uses)
hf_step() {
    [ "$want" = hf ] && { hf_venv; return $?; }
    [ "$want" = build ] || hf_venv || echo "pipegen: (tests/hf.t will skip)" >&2
    return 0
}

# missing_now: the Debian packages whose probe fails, in $missing
missing_now() {
    missing=""
    command -v "$CC" >/dev/null 2>&1 || missing="$missing build-essential"
    command -v "${RE2C:-re2c}" >/dev/null 2>&1 || missing="$missing re2c"
    { command -v "${LEMON:-lemon}" >/dev/null 2>&1 && [ -f "$LEMPAR" ]; } || missing="$missing lemon"
    [ "$want" = build ] && return 0
    "$PYTHON" -c 'import torch' >/dev/null 2>&1 || missing="$missing python3-torch"
    if [ "$want" = hf ]; then
        missing=""
        "$PYTHON" -c 'import torch' >/dev/null 2>&1 || missing=" python3-torch"
        "$PYTHON" -c 'import numpy' >/dev/null 2>&1 || missing="$missing python3-numpy"
        return 0
    fi
    # scikit-learn ships the 8 x 8 digits (tools/digits_to_pgd.py, tests/e2e_digits.t)
    "$PYTHON" -c 'import sklearn.datasets' >/dev/null 2>&1 || missing="$missing python3-sklearn"
    # the suite's own tools: prove (perl), ip for the cut-link test, nm
    # (binutils), ps and pgrep (procps), clang with libFuzzer for tests/fuzz.t
    command -v prove >/dev/null 2>&1 || missing="$missing perl"
    command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
    command -v nm >/dev/null 2>&1 || missing="$missing binutils"
    { command -v ps && command -v pgrep; } >/dev/null 2>&1 || missing="$missing procps"
    # gdb for tests/debug_gdb.t (a chunk function's tensors are locals a debugger shows)
    command -v "${GDB:-gdb}" >/dev/null 2>&1 || missing="$missing gdb"
    # Open MPI's mpirun for tests/launchers.t (MPICH's takes other options)
    "${MPIRUN:-mpirun}" --version 2>/dev/null | grep -q 'Open MPI' || missing="$missing openmpi-bin"
    # MPICH's Hydra, by its own name: Debian's mpich registers /usr/bin/mpirun
    # at priority 40, below Open MPI's 50, so mpirun stays Open MPI's
    "${HYDRA:-mpiexec.hydra}" --version 2>/dev/null | grep -q 'HYDRA' || missing="$missing mpich"
    fuzzer_probe || missing="$missing clang libclang-rt-dev"
    # the emulated cuBLAS (tests/gpu/emu/cublas_emu.cc) computes with any BLAS's sgemm_
    f77_blas_probe || missing="$missing libblas-dev"
    if [ "$want" = slurm ]; then
        for p in slurmctld slurmd; do command -v $p >/dev/null 2>&1 || missing="$missing $p"; done
        { command -v srun && command -v sbatch && command -v scancel && command -v squeue; } >/dev/null 2>&1 ||
            missing="$missing slurm-client"
        { command -v munged && command -v mungekey && command -v munge; } >/dev/null 2>&1 || missing="$missing munge"
        for p in auth_munge cred_munge proctrack_linuxproc task_none select_cons_tres; do
            found=0
            for f in /usr/lib/*/slurm-wlm/$p.so /usr/lib/slurm/$p.so /usr/lib64/slurm/$p.so; do
                [ -f "$f" ] && found=1
            done
            [ $found = 1 ] || { missing="$missing slurm-wlm-basic-plugins"; break; }
        done
        return 0
    fi
    [ "$want" = bench ] || return 0
    case "$missing" in
    *build-essential*) missing="$missing libopenblas-dev" ;;
    *) blas_cflags >/dev/null || missing="$missing libopenblas-dev" ;;
    esac
    return 0
}

# f77_blas_probe: does a C program calling the Fortran sgemm_ link with -lblas and run?
f77_blas_probe() {
    tmpdir
    cat >"$TMPD/b.c" <<'EOF'
#include <stddef.h>
void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *, const float *,
            const int *, const float *, const int *, const float *, float *, const int *, size_t, size_t);
int main(void)
{
    const int n = 1;
    const float one = 1.0f, zero = 0.0f, a = 2.0f, b = 3.0f;
    float c = 0.0f;
    sgemm_("N", "N", &n, &n, &n, &one, &a, &n, &b, &n, &zero, &c, &n, 1, 1);
    return c != 6.0f;
}
EOF
    "$CC" -o "$TMPD/b" "$TMPD/b.c" -lblas >"$TMPD/b.log" 2>&1 && "$TMPD/b"
}

# fuzzer_probe: does clang link a libFuzzer target under ASan/UBSan?
fuzzer_probe() {
    command -v "${CLANG:-clang}" >/dev/null 2>&1 || return 1
    tmpdir
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$TMPD/f.c"
    "${CLANG:-clang}" -fsanitize=fuzzer,address,undefined -o "$TMPD/f" "$TMPD/f.c" >"$TMPD/f.log" 2>&1
}

missing_now
[ -z "$missing" ] && { hf_step; exit $?; }
if [ "$want" != build ] && [ "$PYTHON" != /usr/bin/python3 ]; then
    case "$missing" in *python3-torch*)
        echo "pipegen: $PYTHON cannot import torch; Debian's python3-torch is for /usr/bin/python3 (unset PYTHON to use it)" >&2 ;;
    esac
fi
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ] && [ $install = 1 ]; then
    echo "pipegen: installing missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq >/dev/null && $cmd >/dev/null; } || {
        echo "pipegen: '$cmd' failed; run it by hand and look at its output" >&2; exit 1; }
    before=$missing
    missing_now
    if [ -n "$missing" ]; then
        echo "pipegen: installed$before, but still missing:$missing" >&2
        case "$missing" in *libopenblas-dev*)
            echo "pipegen: a program using OpenBLAS (cblas.h + -lopenblas) does not build and run; the probe says:" >&2
            [ -n "$TMPD" ] && sed 's/^/    /' "$TMPD/p.log" >&2 ;;
        esac
        exit 1
    fi
    hf_step
    exit $?
fi
echo "pipegen: missing Debian packages:$missing" >&2
case "$missing" in *libopenblas-dev*)
    echo "pipegen: (OpenBLAS: no cblas.h that declares openblas_set_num_threads links with -lopenblas here;" >&2
    echo "pipegen:  the reference BLAS's libblas-dev is not enough)" >&2 ;;
esac
if [ "$(id -u)" = 0 ]; then
    echo "pipegen: install them, then try again:" >&2
    echo "    apt-get update && $cmd" >&2
else
    echo "pipegen: run this once as root, then try again:" >&2
    echo "    sudo apt-get update && sudo $cmd" >&2
fi
exit 1
