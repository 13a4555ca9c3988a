# tests/lib_lm.sh — shared by tests/textdata.t and tests/generate.t: build
# tests/models/lm_tiny.pipe at 1 or 2 stages and a token stream to train on.
RTLIB=$TOP/build/libpgrt_cpu.a
PIPERUN=$TOP/build/piperun
PIPEDATA=$TOP/build-san/pipedata
[ -x "$PIPEDATA" ] || PIPEDATA=$TOP/build/pipedata
CC=${CC:-cc}

# lm_build DIR STAGES TIE: generate and build lm_tiny into DIR/bin
lm_build() {
    _ld=$1; _ln=$2; _lt=$3
    mkdir -p "$_ld"
    _del=''; [ "$_ln" = 1 ] && _del='/# S1$/d' # (a `!b` here once skipped the tie line's substitution)
    sed -e "$_del" -e "s/^tie wte .*/tie wte $_lt/" "$TOP/tests/models/lm_tiny.pipe" >"$_ld/lm_tiny.pipe"
    "$PIPEGEN" gen "$_ld/lm_tiny.pipe" -o "$_ld/gen" >"$_ld/gen.out" 2>&1 || { sed 's/^/# /' "$_ld/gen.out"; return 1; }
    mkdir -p "$_ld/bin"
    for _lf in "$_ld/gen"/stage*.c; do
        $CC -std=c11 -O1 -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$_ld/gen" -o "$_ld/bin/$(basename "$_lf" .c)" "$_lf" \
            "$RTLIB" -lpthread -lm || return 1
    done
    [ "$(ls "$_ld/bin" | wc -l)" = "$_ln" ]
}

# lm_text FILE: a small, very regular text (ASCII, so tokens < 128)
lm_text() {
    _li=0
    : >"$1"
    while [ $_li -lt 40 ]; do
        echo "the cat sat on the mat. the dog ran to the log. a bird sang in the tree." >>"$1"
        _li=$((_li + 1))
    done
}

# lm_run DIR OUT [stage options]: train through piperun, output in OUT
lm_run() {
    _ld=$1; _lo=$2; shift 2
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$_ld/bin" -- --threads 1 "$@" >"$_lo" 2>&1
}
