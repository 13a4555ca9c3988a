#!/bin/sh
# tests/docs.t — the documentation is true: every .pipe snippet in README.md,
# docs/*.md and docs/tutorial/*.md passes `pipegen check`, and the commands of
# README.md's tour and of every tutorial chapter (docs/tutorial/NN-*.md, in
# file-name order, all in one folder so a chapter goes on from the one
# before) run, from a folder outside the checkout, with the pipegen that
# `make install` put in $HOME/pipegen (HOME is a temporary folder here).
# A new page or chapter is checked by being there. What the pages follow:
#   - a code block (fenced ```pipe or with no language, or indented by 4
#     after a blank line) whose first line that is not a comment starts with
#     `model ` is a .pipe snippet; a fenced ```pipe block must be one;
#   - a fenced block of a file (```pipe, ```python, ```text) whose first line
#     is `# NAME` is written to NAME in the chapter's folder where it stands;
#   - fenced ```sh blocks run there, in order, with `sh -e`; ```sh-cuda ones
#     only where the install has the CUDA runtime, ```sh-gpu ones only where
#     nvidia-smi lists a GPU (skipped visibly otherwise); port 29500 in a
#     command is replaced by a free port (tests never use fixed ports);
#   - indented blocks and other fenced blocks (```text output) are not run.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir docs
export HOME="$T/home"
mkdir -p "$HOME" "$T/blocks"
make -s --no-print-directory -C "$TOP" install PREFIX="$HOME/pipegen" >"$T/install.log" 2>&1
ok $? "make install PREFIX=\$HOME/pipegen (the tutorial's first step)"
PATH=$HOME/pipegen/bin:/usr/bin:/bin # /usr/bin/python3: Debian's numpy and torch
export PATH
PORT=$(free_port)

# every code block of every page: $T/blocks/NNNN, and a line "NNNN LANG FILE LINE" in index
cd "$TOP" || exit 1
pages="README.md $(ls docs/*.md docs/tutorial/*.md | sort)"
# shellcheck disable=SC2086 # the page list
awk -v out="$T/blocks" '
    function open_block(lang) {
        n++; f = sprintf("%s/%04d", out, n)
        printf "%04d %s %s %d\n", n, lang, FILENAME, FNR >> (out "/index")
        printf "" > f
    }
    function end_indent() { if (ind) { close(f); ind = 0 } }
    FNR == 1 { fence = 0; end_indent(); blank = 1 }
    fence { if ($0 ~ /^```/) { close(f); fence = 0 } else print > f; blank = 0; next }
    /^```/ { end_indent(); lang = substr($0, 4); sub(/[ \t].*/, "", lang); if (lang == "") lang = "-"
             open_block(lang); fence = 1; next }
    ind && ($0 ~ /^    / || $0 ~ /^[ \t]*$/) { line = $0; sub(/^    /, "", line); print line > f; next }
    ind { end_indent() }
    blank && /^    [^ ]/ { open_block("indented"); ind = 1; line = $0; sub(/^    /, "", line); print line > f; next }
    { blank = ($0 ~ /^[ \t]*$/) }
' $pages
[ -s "$T/blocks/index" ]
ok $? "the pages have code blocks ($(wc -l <"$T/blocks/index"))"

# first_code BLOCK: its first line that is neither blank nor a comment
first_code() { grep -v '^[[:space:]]*\(#\|$\)' "$1" | head -n 1; }

# ---- every .pipe snippet passes pipegen check ------------------------------------
nsnip=0
while read -r id lang file line; do
    b=$T/blocks/$id
    case $lang in pipe | indented | -) ;; *) continue ;; esac # not output (```text), commands or code
    case $(first_code "$b") in model\ *) ;; *)
        [ "$lang" = pipe ] && { ok 1 "$file:$line: a \`\`\`pipe block is a model (it starts with 'model NAME')"; }
        continue ;;
    esac
    nsnip=$((nsnip + 1))
    cp "$b" "$T/snippet.pipe"
    out=$(pipegen check "$T/snippet.pipe" 2>&1 </dev/null)
    st=$?
    ok $st "$file:$line: the .pipe snippet passes pipegen check"
    [ $st = 0 ] || printf '%s\n' "$out" | head -20 | sed 's/^/# /'
done <"$T/blocks/index"
[ "$nsnip" -ge 5 ]
ok $? "...$nsnip snippets in all"

# ---- the tour and the tutorial run ----------------------------------------------------
have_cuda=0; [ -f "$HOME/pipegen/lib/pipegen/libpgrt_cuda.a" ] && have_cuda=1
have_gpu=0; nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1
# run_page WORKDIR FILE...: the file blocks and the commands of the pages, in order
run_page() {
    _w=$1
    shift
    mkdir -p "$_w"
    for _p in "$@"; do
        grep " $_p " "$T/blocks/index" >"$T/page.index"
        while read -r id lang file line; do
            b=$T/blocks/$id
            name=$(head -n 1 "$b" | sed -n 's/^# \([A-Za-z0-9_.-]*\.[A-Za-z0-9]*\)$/\1/p')
            case $lang in
            pipe | python | text) [ -n "$name" ] && cp "$b" "$_w/$name" ;;
            sh | sh-cuda | sh-gpu)
                if [ "$lang" = sh-cuda ] && [ $have_cuda = 0 ]; then
                    skip "$file:$line: needs the CUDA runtime, which this checkout did not build"; continue
                fi
                if [ "$lang" = sh-gpu ] && [ $have_gpu = 0 ]; then
                    skip "$file:$line: needs a GPU"; continue
                fi
                sed "s/29500/$PORT/g" "$b" >"$T/cmd.sh"
                (cd "$_w" && timeout 600 sh -e "$T/cmd.sh") </dev/null >"$T/cmd.out" 2>&1
                st=$?
                ok $st "$file:$line: the commands run ($(head -n 1 "$b"))"
                [ $st = 0 ] || { sed 's/^/#   /' "$b"; tail -n 25 "$T/cmd.out" | sed 's/^/# /'; }
                ;;
            esac
        done <"$T/page.index"
    done
}
run_page "$T/tour" README.md
# shellcheck disable=SC2046 # the chapters, in order
run_page "$T/tutorial" $(ls docs/tutorial/[0-9]*.md | sort)
# ---- the stage options: --help and docs/runtime.md's list name the same ones ------------
help=$("$T/tutorial/digits/stage0" --help 2>&1)
opts=$(printf '%s\n' "$help" | grep '^  --' | grep -o -- '--[a-z][a-z-]*' | sort -u) # the options' lines
[ "$(printf '%s\n' "$opts" | wc -l)" -ge 20 ]
ok $? "a stage's --help lists its options ($(printf '%s\n' "$opts" | wc -l))"
section=$(sed -n '/^## Stage options/,/^### /p' "$TOP/docs/runtime.md")
missing=""
for o in $opts; do printf '%s\n' "$section" | grep -qE -- "$o([^a-z-]|\$)" || missing="$missing $o"; done
is "$missing" "" "every option of a stage's --help is in docs/runtime.md's Stage options"
unknown=""
for o in $(printf '%s\n' "$section" | grep -o '`--[a-z][a-z-]*' | tr -d '`' | sort -u); do
    printf '%s\n' "$opts" | grep -qx -- "$o" || unknown="$unknown $o"
done
is "$unknown" "" "every option docs/runtime.md's Stage options names is in a stage's --help"
[ "$(ls docs/tutorial/[0-9]*.md | wc -l)" -ge 7 ]
ok $? "the tutorial has its chapters"
done_testing
