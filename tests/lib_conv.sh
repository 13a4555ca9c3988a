# tests/lib_conv.sh — the bitwise matrix of convolutional networks, shared by
# tests/e2e_conv.t (a sample, in make test) and tests/conv_matrix.sh (all of it,
# make test-matrix). Needs lib.sh and lib_e2e.sh, and $T (a temporary folder).
#
# A variant is a model generated for P stages under a schedule and a checkpoint
# mode, then trained 3 steps with T threads per stage and D replicas; its final
# loss line and saved weights (running statistics included) must be the bytes
# of the reference's with the same D (results do not depend on P, the split,
# the schedule, the checkpoint mode or the threads; across D the gradient sums
# are grouped otherwise, README "What holds").

# conv_keep N: the sed expression that keeps N - 1 of conv_small.pipe's split
# lines "# K1" .. "# K7" (N in 1, 2, 3, 4, 6, 8: 8 keeps them all)
conv_keep() {
    case $1 in
        1) echo '/# K[1-7]$/d' ;;
        2) echo '/# K[123567]$/d' ;;
        3) echo '/# K[13467]$/d' ;;
        4) echo '/# K[1357]$/d' ;;
        6) echo '/# K[47]$/d' ;;
        8) echo '/# K9$/d' ;;
    esac
}

# conv_chunks P SCHEDULE: the model's pieces (2 per stage under interleaved(2), zbv)
conv_chunks() {
    case $2 in interleaved*|zbv) echo $(($1 * 2)) ;; *) echo "$1" ;; esac
}

# conv_gen MODEL P SCHEDULE CKPT: generate and build into $T/MODEL-P-SCHEDULE-CKPT
# (once; later calls reuse it). conv_small keeps its marked splits; an example
# (examples/MODEL.pipe) loses its split lines and gets `stages = P` (the
# balancer's split), with the batch made small: CONV_EX_BATCH, default 8 in 4.
conv_gen() {
    _m=$1 _p=$2 _s=$3 _c=$4
    _d="$T/$_m-$_p-$_s-$_c"
    [ -f "$_d/built" ] && return 0
    mkdir -p "$_d"
    if [ "$_m" = conv_small ]; then
        e2e_gen "$_d" conv_small "$(conv_keep "$(conv_chunks "$_p" "$_s")")" "$_s" "$_c" || return 1
    else
        sed -e '/^split$/d' -e "s/batch = [0-9]*  microbatches = [0-9]*/${CONV_EX_BATCH:-batch = 8  microbatches = 4}/" \
            -e "s/\bschedule = [a-z0-9()]*/schedule = $_s/" -e "s/checkpoint = [a-z_]*/checkpoint = $_c/" \
            -e "s/^train {/train {\n  stages = $_p/" "$TOP/examples/$_m.pipe" >"$_d/$_m.pipe"
        "$PIPEGEN" gen "$_d/$_m.pipe" -o "$_d/gen" >"$_d/gen.out" 2>&1 || { sed 's/^/# /' "$_d/gen.out"; return 1; }
    fi
    build_strict "$_d/gen" >"$_d/build.out" 2>&1 || { sed 's/^/# /' "$_d/build.out" | head -20; return 1; }
    touch "$_d/built"
}

# conv_run MODEL P SCHEDULE CKPT THREADS D: train 3 steps; the loss line and the
# weights into $T/MODEL-P-SCHEDULE-CKPT/t<THREADS>d<D>.{loss,st}
conv_run() {
    _d="$T/$1-$2-$3-$4"
    _o="$_d/t$5d$6"
    conv_gen "$1" "$2" "$3" "$4" || return 1
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" --dp "$6" "$_d/gen/bin" -- --steps 3 --threads "$5" --save "$_o.st" \
        >"$_o.out" 2>&1 || { sed 's/^/# /' "$_o.out" | tail -20; return 1; }
    grep 'final loss' "$_o.out" | sed 's/^\[stage [0-9]*\( replica 0\)\{0,1\}\] //' >"$_o.loss"
}

# conv_same MODEL "P:SCHEDULE:CKPT:THREADS:D ..." : the first is the reference; one
# TAP line per other variant, ok when its loss and weights are the reference's bytes
conv_same() {
    _m=$1 _ref=""
    for _v in $2; do
        IFS=: read -r _p _s _c _t _dd <<EOF2
$_v
EOF2
        if ! conv_run "$_m" "$_p" "$_s" "$_c" "$_t" "$_dd"; then
            ok 1 "$_m: $_p stage(s), $_s, checkpoint $_c, $_t thread(s), --dp $_dd trains"
            continue
        fi
        _o="$T/$_m-$_p-$_s-$_c/t${_t}d$_dd"
        if [ -z "$_ref" ]; then
            _ref=$_o _rv=$_v
            [ -s "$_o.loss" ]
            ok $? "$_m: reference $_p stage(s), $_s, checkpoint $_c, $_t thread(s), --dp $_dd: $(cat "$_o.loss")"
            continue
        fi
        cmp -s "$_ref.loss" "$_o.loss" && cmp -s "$_ref.st" "$_o.st"
        ok $? "$_m: $_p stage(s) ($(conv_chunks "$_p" "$_s") chunks), $_s, checkpoint $_c, $_t thread(s), --dp $_dd: the loss and weights of $_rv, bitwise"
    done
}
