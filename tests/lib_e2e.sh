# tests/lib_e2e.sh — helpers shared by the end-to-end shell tests (source it
# after tests/lib.sh): compiling generated stage programs against the CPU runtime.
RTLIB=${RTLIB:-$TOP/build/libpgrt_cpu.a}   # override to test against another runtime build
PIPERUN=$TOP/build/piperun
CC=${CC:-cc}

# build DIR: compile every stage<k>.c in DIR into DIR/bin/stage<k>
build() {
    mkdir -p "$1/bin"
    for f in "$1"/stage*.c; do
        k=$(basename "$f" .c)
        $CC -std=c11 -O1 -I"$TOP/runtime/core" -I"$1" -o "$1/bin/$k" "$f" "$RTLIB" -lopenblas -lpthread -lm || return 1
    done
}
