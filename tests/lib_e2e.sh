# tests/lib_e2e.sh — helpers shared by the end-to-end shell tests (source it
# after tests/lib.sh): compiling generated stage programs against the CPU
# runtime, and the model variants of tests/models/*.pipe they train.
RTLIB=${RTLIB:-$TOP/build/libpgrt_cpu.a}   # override to test against another runtime build
PIPERUN=$TOP/build/piperun
CC=${CC:-cc}

# build DIR [CFLAG...]: compile every stage<k>.c in DIR into DIR/bin/stage<k>,
# with the extra CFLAGs
build() {
    _bd=$1
    shift
    mkdir -p "$_bd/bin"
    for f in "$_bd"/stage*.c; do
        k=$(basename "$f" .c)
        $CC -std=c11 -O1 "$@" -I"$TOP/runtime/core" -I"$_bd" -o "$_bd/bin/$k" "$f" "$RTLIB" \
            -lpthread -lm || return 1
    done
}

# build_strict DIR: build with warnings as errors (the generated C must be clean)
build_strict() {
    build "$1" -Wall -Wextra -Werror
}

# e2e_splits N: the sed expression that keeps N - 1 of the split lines marked
# "# S1" .. "# S3" in tests/models: 1 none, 2 only S2, 3 all but S2, 4 all
e2e_splits() {
    case $1 in
        1) echo '/# S[123]$/d' ;;
        2) echo '/# S[13]$/d' ;;
        3) echo '/# S2$/d' ;;
        4) echo '' ;;
    esac
}

# e2e_gen DIR MODEL DEL SCHEDULE CKPT [SED-ARG...]: tests/models/MODEL.pipe with
# the sed expression DEL, the schedule, the checkpoint mode and then the
# SED-ARGs (-e EXPR ...) applied, into DIR/MODEL.pipe; generated into DIR/gen
# with the options in E2E_GEN_FLAGS, if any (pipegen's output, as TAP comments,
# when it fails)
e2e_gen() {
    _gd=$1 _gm=$2 _gdel=$3 _gs=$4 _gc=$5
    shift 5
    mkdir -p "$_gd"
    sed -e "$_gdel" -e "s/schedule = .*/schedule = $_gs/" -e "s/checkpoint = .*/checkpoint = $_gc/" "$@" \
        "$TOP/tests/models/$_gm.pipe" >"$_gd/$_gm.pipe"
    # shellcheck disable=SC2086 # E2E_GEN_FLAGS is a list of options
    "$PIPEGEN" gen ${E2E_GEN_FLAGS:-} "$_gd/$_gm.pipe" -o "$_gd/gen" >"$_gd/gen.out" 2>&1 ||
        { sed 's/^/# /' "$_gd/gen.out"; return 1; }
}
