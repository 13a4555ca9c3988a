#!/bin/sh
# tests/deps.t — tools/deps.sh finds what the build really uses, and the build
# uses nothing else: the runtime needs no BLAS (it links no cblas or OpenBLAS
# symbol), so `deps.sh build` passes without one; OpenBLAS is the benchmark's
# anchor (`deps.sh bench`), and a netlib-only cblas.h (the reference BLAS's,
# which has no openblas_set_num_threads) does not pass for it; a missing re2c,
# lemon template or torch is named with the one command to run; without nvcc,
# `make test`'s CUDA step and the CUDA tests are visible skips that name the
# reason.
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/pg-deps.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$TOP" || exit 1
DEPS=$TOP/tools/deps.sh
# what the Makefile exported describes this machine; each case probes anew
unset BLAS_CFLAGS PG_BLAS_OK

# a netlib-only cblas.h: Debian's own when libblas-dev is here, else the same
# shape written out (cblas_sgemm, no OpenBLAS extensions)
mkdir -p "$T/netlib" "$T/none"
if [ -f /usr/include/x86_64-linux-gnu/cblas-netlib.h ]; then
    cp /usr/include/x86_64-linux-gnu/cblas-netlib.h "$T/netlib/cblas.h"
else
    cat >"$T/netlib/cblas.h" <<'H'
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
void cblas_sgemm(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int,
                 float, const float *, int, const float *, int, float, float *, int);
H
fi
grep -q openblas_set_num_threads "$T/netlib/cblas.h" && st=1 || st=0
ok $st "the stand-in header is netlib-only (no openblas_set_num_threads)"

flags=$("$DEPS" blas-cflags)
st=$?
if [ $st = 0 ]; then # OpenBLAS is here (installed for make bench)
    ok 0 "blas-cflags finds OpenBLAS here ($flags)"
    flags_n=$(CPATH="$T/netlib" "$DEPS" blas-cflags)
    st=$?
    [ $st = 0 ] && [ -n "$flags_n" ] && [ "$flags_n" != none ]
    ok $? "with a netlib cblas.h first on the default path, OpenBLAS's own header is still chosen ($flags_n)"
else # a machine set up by make test alone: no OpenBLAS
    [ "$flags" = none ]
    ok $? "no OpenBLAS here: blas-cflags says none (exit $st)"
    out=$("$DEPS" bench --no-install 2>&1)
    like "$out" "missing Debian packages:.* libopenblas-dev" "... and 'deps.sh bench' names libopenblas-dev"
fi

out=$(CPATH="$T/netlib" PG_BLAS_DIRS="$T/none" "$DEPS" blas-cflags 2>&1)
st=$?
[ $st = 1 ] && [ "$out" = none ]
ok $? "only a netlib cblas.h: blas-cflags says none (exit $st, '$out')"

out=$(CPATH="$T/netlib" PG_BLAS_DIRS="$T/none" "$DEPS" bench --no-install 2>&1)
st=$?
[ $st = 1 ]
ok $? "only a netlib cblas.h: 'deps.sh bench' fails (exit $st)"
like "$out" "missing Debian packages:.* libopenblas-dev" "... and names libopenblas-dev"
like "$out" "apt-get install -y --no-install-recommends .*libopenblas-dev" "... with the one command to run"
like "$out" "reference BLAS" "... and says why the BLAS that is there is not enough"
CPATH="$T/netlib" PG_BLAS_DIRS="$T/none" "$DEPS" build --no-install >"$T/b.log" 2>&1
ok $? "... while 'deps.sh build' needs no BLAS at all"

# the runtime and everything a stage links need no BLAS
make --no-print-directory BUILD="$T/b" "$T/b/libpgrt_cpu.a" >"$T/make.log" 2>&1
st=$?
ok $st "the CPU runtime library builds"
[ $st = 0 ] || tail -5 "$T/make.log" | sed 's/^/# /'
und=$(nm -u "$T/b/libpgrt_cpu.a" 2>/dev/null | grep -Ei 'cblas_|openblas|sgemm_' | sort -u | tr '\n' ' ')
[ $st = 0 ] && [ -z "$und" ]
ok $? "... and asks for no BLAS symbol (${und:-none})"
! grep -q -- '-I.*openblas\|-lopenblas' "$T/make.log"
ok $? "... and is compiled with no OpenBLAS flags"

out=$(RE2C=/nonexistent/re2c "$DEPS" build --no-install 2>&1)
st=$?
[ $st = 1 ]
ok $? "no re2c: deps.sh build fails"
like "$out" "missing Debian packages: re2c$" "... naming re2c alone"
out=$(LEMPAR=/nonexistent/lempar.c "$DEPS" build --no-install 2>&1)
like "$out" "missing Debian packages: lemon$" "no lemon template (lempar.c): lemon is named"

printf '#!/bin/sh\nexit 1\n' >"$T/py" && chmod +x "$T/py"
out=$(PYTHON="$T/py" "$DEPS" test --no-install 2>&1)
st=$?
[ $st = 1 ]
ok $? "a Python without torch: deps.sh test fails"
like "$out" "missing Debian packages: python3-torch" "... naming python3-torch"
like "$out" "$T/py cannot import torch" "... and saying which Python could not import it"
out=$(PYTHON="$T/py" "$DEPS" build --no-install 2>&1)
ok $? "torch is not needed to build"

# deps.sh hf (the environment of import/export hf): Debian's torch and NumPy
# first; an environment whose torch cannot convert a NumPy array (a NumPy 2
# from PyPI in front of Debian's 1.x, which torch 1.13 was built against) is
# not taken as ready, and the command to make it anew pins numpy<2
out=$(PYTHON="$T/py" PIPEGEN_VENV="$T/venv" "$DEPS" hf --no-install 2>&1)
st=$?
[ $st = 1 ]
ok $? "a Python without torch: deps.sh hf fails (exit $st)"
like "$out" "missing Debian packages: python3-torch python3-numpy$" "... naming python3-torch and python3-numpy"
mkdir -p "$T/venv/bin"
cat >"$T/venv/bin/python3" <<'PY'
#!/bin/sh
# an environment that imports everything but whose torch cannot take a NumPy array
case "$2" in *from_numpy*) echo "RuntimeError: Numpy is not available" >&2; exit 1 ;; esac
exit 0
PY
chmod +x "$T/venv/bin/python3"
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    out=$(PYTHON=/usr/bin/python3 PIPEGEN_VENV="$T/venv" "$DEPS" hf --no-install 2>&1)
    st=$?
    [ $st = 1 ]
    ok $? "an environment whose torch cannot convert a NumPy array is not ready (exit $st)"
    like "$out" "venv --clear --system-site-packages $T/venv && .*pip install .*'numpy<2'" \
        "... and the command printed makes it anew, with numpy<2"
else
    ok 1 "Debian's torch and NumPy are here (deps.sh test installs them)"
fi

out=$(MPIRUN=/nonexistent/mpirun "$DEPS" test --no-install 2>&1)
st=$?
[ $st = 1 ]
ok $? "no mpirun: deps.sh test fails (exit $st)"
like "$out" "missing Debian packages: openmpi-bin$" "... naming openmpi-bin alone"
printf '#!/bin/sh\necho "HYDRA build details:"\n' >"$T/mpich" && chmod +x "$T/mpich"
out=$(MPIRUN="$T/mpich" "$DEPS" test --no-install 2>&1)
like "$out" "missing Debian packages: openmpi-bin$" "an mpirun that is not Open MPI's: openmpi-bin is named"
out=$(MPIRUN=/nonexistent/mpirun "$DEPS" build --no-install 2>&1)
ok $? "mpirun is not needed to build"

"$DEPS" test --no-install >"$T/all.log" 2>&1
ok $? "everything the suite needs is here"

# no CUDA toolkit: make's CUDA step and the CUDA tests say so and skip
out=$(make --no-print-directory NVCC=/nonexistent/bin/nvcc cuda-if-found 2>&1)
st=$?
ok $st "make cuda-if-found without nvcc succeeds"
like "$out" "SKIP the CUDA builds: nvcc not found at /nonexistent/bin/nvcc" "... and says why it built nothing"
for t in cuda_compile cuda_link; do
    out=$(NVCC=/nonexistent/bin/nvcc sh "tests/$t.t" 2>&1)
    like "$out" "^1\.\.0 # SKIP nvcc not found at /nonexistent/bin/nvcc" "tests/$t.t without nvcc is a skip naming the path"
done
done_testing
