# tests/lib_emu.sh — what the tests of the emulated CUDA runtime share
# (tests/cuda_emu_*.t; tests/gpu/emu/README.md): the emulated build, and
# merging a program's TAP into ours. Sourced after tests/lib.sh.
EMU=$TOP/build/emu

# emu_need: build/emu (make emu) is there and current; else one failed check
# with the build's tail, and exit
emu_need() {
    en_log=$(mktemp /tmp/pg-emu-make.XXXXXX)
    if ! make -C "$TOP" --no-print-directory emu >"$en_log" 2>&1; then
        ok 1 "the emulated CUDA runtime builds (make emu)"
        tail -30 "$en_log" | sed 's/^/# /'
        rm -f "$en_log"
        done_testing
    fi
    rm -f "$en_log"
}

# emu_tap PREFIX FILE: FILE's TAP lines as ours, renumbered, each name
# prefixed; its plan is checked against what it printed (a program that died
# half-way fails here)
emu_tap() {
    et_pre=$1 et_f=$2
    et_tmp=$(mktemp /tmp/pg-emu-tap.XXXXXX)
    awk -v pre="$et_pre" '/^ok [0-9]+ # SKIP / { n++; sub(/^ok [0-9]+ # SKIP /, ""); print "S " pre $0; next }
        /^ok [0-9]+ - / { n++; sub(/^ok [0-9]+ - /, ""); print "0 " pre $0; next }
        /^not ok [0-9]+ - / { n++; sub(/^not ok [0-9]+ - /, ""); print "1 " pre $0; next }
        /^1\.\.[0-9]+$/ { plan = substr($0, 4) }
        END { print "P " (plan != "" && plan + 0 == n + 0 ? 0 : 1) " " n + 0 " " (plan != "" ? plan : "none") }' "$et_f" >"$et_tmp"
    while IFS= read -r et_l; do
        case $et_l in
        "P "*) set -- $et_l
               ok "$2" "${et_pre}ran to its end ($3 checks, plan ${4:-none})" ;;
        "S "*) skip "${et_l#S }" ;;
        *) ok "${et_l%% *}" "${et_l#* }" ;;
        esac
    done <"$et_tmp"
    rm -f "$et_tmp"
}
