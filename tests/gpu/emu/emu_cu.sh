#!/bin/sh
# tests/gpu/emu/emu_cu.sh SRC OUT — SRC (a runtime/cuda source or header) as
# the emulated build compiles it: every launch `k<<<cfg>>>(args)`, or
# `k<T><<<cfg>>>(args)`, becomes `k * pg_emu_cfg("k", __FILE__, __LINE__,
# cfg)(args)` (tests/gpu/cuda_emu.h hands it to the emulated stream), and a
# #line directive keeps the file and line numbers of SRC in messages. The
# configuration must sit on the launch's line; anything else with <<< or >>>
# left is refused with its line, so no launch is silently missed.
SRC=${1:?usage: emu_cu.sh SRC OUT}
OUT=${2:?usage: emu_cu.sh SRC OUT}
mkdir -p "$(dirname "$OUT")" || exit 1
{
    printf '#line 1 "%s"\n' "$SRC"
    sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\)\(<[^<>]*>\)\{0,1\}<<<\(.*\)>>>/\1\2 * pg_emu_cfg("\1", __FILE__, __LINE__, \3)/' "$SRC"
} >"$OUT.tmp" || exit 1
# (a <<< in a comment is prose: lines starting a comment or continuing one are skipped)
left=$(awk -v src="$SRC" 'NR > 1 && /<<<|>>>/ && !/^[ \t]*(\/\*|\*|\/\/)/ { print src ":" NR - 1 ": " $0 }' "$OUT.tmp")
if [ -n "$left" ]; then
    printf 'emu_cu.sh: a launch the emulated build cannot rewrite (its <<<...>>> must be on one line):\n%s\n' "$left" >&2
    rm -f "$OUT.tmp"
    exit 1
fi
mv "$OUT.tmp" "$OUT"
