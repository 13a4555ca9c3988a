#!/bin/sh
# tests/install.t — pipegen outside the checkout: `make install PREFIX=DIR` puts
# pipegen, piperun, pipedata, the runtime and its headers under DIR; from a
# folder outside the checkout `DIR/bin/pipegen build MODEL.pipe -o OUT`
# generates, compiles and links every stage into OUT in one command, keyed on
# OUT (a 2-stage and a 4-stage build of one model in two folders never meet),
# says what it wrote, replaces the binaries only when every stage compiled,
# removes an older build's extra stages; the install can be moved as a whole;
# a pipegen with no runtime beside it says where it looked; --cuda links the
# CUDA runtime when it was built (nothing here runs it: no GPU).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir install
P=$T/prefix
W=$T/work # the user's own folder, outside the checkout
mkdir -p "$W"

make -s --no-print-directory -C "$TOP" install PREFIX="$P" >"$T/install.log" 2>&1
ok $? "make install PREFIX=DIR"
like "$(cat "$T/install.log")" "^installed into $P: bin/ \(pipegen, piperun, pipedata\), lib/pipegen/ \(the CPU" \
    "...says in one line what it installed where"
for f in bin/pipegen bin/piperun bin/pipedata lib/pipegen/libpgrt_cpu.a include/pipegen/pg_stage.h \
    include/pipegen/pg_contract.h include/pipegen/pg_ops.h share/pipegen/examples/mlp.pipe share/doc/pipegen/README.md; do
    [ -f "$P/$f" ] || echo "# missing: $P/$f"
done
[ -x "$P/bin/pipegen" ] && [ -x "$P/bin/piperun" ] && [ -x "$P/bin/pipedata" ] && [ -f "$P/lib/pipegen/libpgrt_cpu.a" ] &&
    [ -f "$P/include/pipegen/pg_stage.h" ] && [ -f "$P/share/pipegen/examples/mlp.pipe" ]
ok $? "...the programs, the runtime, its headers, the examples"

cd "$W" || exit 1
sed -e '/# S[13]$/d' "$TOP/tests/models/mlp_small.pipe" >two.pipe # 2 stages
cp "$TOP/tests/models/mlp_small.pipe" four.pipe                    # 4 stages
PATH=$P/bin:$PATH
export PATH

out=$(pipegen build two.pipe -o builds/two 2>&1)
ok $? "pipegen build two.pipe -o builds/two (missing parents made)"
is "$out" "wrote 5 files to builds/two/c/: plan.json, mlp_small.h, stage0.c, stage1.c, pipegen-files.txt
built 2 stages in builds/two/: stage0, stage1 (linked with $P/lib/pipegen/libpgrt_cpu.a); run them with: piperun builds/two" \
    "...says what it generated and what it built, one line each, with the installed runtime"
is "$(ls builds/two | tr '\n' ' ')" "c stage0 stage1 " "...the stage binaries in the output folder, the C in c/"
pipegen build four.pipe -o builds/four >/dev/null 2>&1
ok $? "a 4-stage build of the same model into another folder"
is "$(ls builds/four | tr '\n' ' ')" "c stage0 stage1 stage2 stage3 " "...4 binaries there"
is "$(ls builds/two | tr '\n' ' ')" "c stage0 stage1 " "...and the 2-stage build is untouched"

piperun builds/two -- --steps 3 --threads 1 --save two.st >two.log 2>&1
ok $? "piperun runs the 2-stage build"
piperun builds/four -- --steps 3 --threads 1 --save four.st >four.log 2>&1
ok $? "...and the 4-stage one"
loss() { sed -n 's/.*final loss \([0-9.e+-]*\).*/\1/p' "$1"; }
is "$(loss four.log)" "$(loss two.log)" "...to the same final loss, bitwise ($(loss two.log))"
cmp -s two.st four.st
ok $? "...and the same saved weights"

# the older build's extra stages go when the folder is rebuilt with fewer
sed -e '/^split/d' two.pipe >one.pipe
out=$(pipegen build one.pipe -o builds/four 2>&1)
ok $? "rebuilding the 4-stage folder with 1 stage"
like "$out" "removed from the previous generation: stage1.c, stage2.c, stage3.c" "...gen removes the stale C"
like "$out" "removed the stages of the previous build: stage[1-3], stage[1-3], stage[1-3]$" "...build removes the stale binaries, saying so"
is "$(ls builds/four | tr '\n' ' ')" "c stage0 " "...one binary left"

# a stage that does not compile: nothing replaced, not even the stages that did
cksum builds/two/stage0 builds/two/stage1 >before.sum
sed -e 's/lr = 1e-3/lr = 2e-3/' two.pipe >two_lr.pipe # another stage0 than the one built
printf '#!/bin/sh\ncase "$*" in *stage1.c*) echo "failcc: not stage1" >&2; exit 3;; esac\nexec cc "$@"\n' >failcc
chmod +x failcc
out=$(CC=./failcc pipegen build two_lr.pipe -o builds/two 2>&1)
is "$?" 1 "a stage that does not compile: exit 1"
like "$out" "pipegen build: compiling builds/two/c/stage1.c failed \(./failcc exited with 3\); nothing in builds/two was replaced" \
    "...naming the file and the compiler"
cksum builds/two/stage0 builds/two/stage1 | cmp -s - before.sum
ok $? "...the binaries of the last build are intact, stage0 too"
is "$(ls builds/two | tr '\n' ' ')" "c stage0 stage1 " "...and no temporary is left"

out=$(pipegen build two.pipe 2>&1)
is "$?" 2 "build without -o: exit 2"
is "$out" "usage: pipegen build FILE -o DIR [--cuda] [--balance PROFILE] [--guard-bytes N]" "...with the usage"

# the install moved as a whole still finds its runtime
mv "$P" "$T/moved"
out=$("$T/moved/bin/pipegen" build two.pipe -o builds/moved 2>&1)
ok $? "an install moved elsewhere builds"
like "$out" "linked with $T/moved/lib/pipegen/libpgrt_cpu.a" "...with the runtime beside it"
mv "$T/moved" "$P"

# a pipegen with no runtime beside it
mkdir -p "$T/lonely/bin" && cp "$P/bin/pipegen" "$T/lonely/bin/"
out=$("$T/lonely/bin/pipegen" build two.pipe -o builds/lonely 2>&1)
is "$?" 1 "a pipegen with no runtime beside it: exit 1"
is "$out" "pipegen build: no CPU runtime for this pipegen: neither $T/lonely/bin/../lib/pipegen/libpgrt_cpu.a (installed by make install) nor $T/lonely/bin/libpgrt_cpu.a (a checkout's build) exists; run make, or make install PREFIX=DIR and use DIR/bin/pipegen" \
    "...saying where it looked and what to do"
[ ! -e builds/lonely ]; ok $? "...and writes nothing"

# --cuda: the CUDA runtime, when this checkout built it
if [ -f "$P/lib/pipegen/libpgrt_cuda.a" ]; then
    out=$(pipegen build two.pipe -o builds/cuda --cuda 2>&1)
    ok $? "pipegen build --cuda links against the installed CUDA runtime"
    like "$out" "built 2 stages in builds/cuda/: stage0, stage1 \(linked with $P/lib/pipegen/libpgrt_cuda.a\)" "...saying so"
    nm builds/cuda/stage0 | grep -q cublas
    ok $? "...a stage calls cuBLAS"
else
    skip "no CUDA runtime was built here (build-cuda/libpgrt_cuda.a): pipegen build --cuda not tried"
    skip "..."
    skip "..."
fi
rm -f "$P/lib/pipegen/libpgrt_cuda.a"
out=$(pipegen build two.pipe -o builds/nocuda --cuda 2>&1)
is "$?" 1 "--cuda with no CUDA runtime installed: exit 1"
like "$out" "^pipegen build: no CUDA runtime for this pipegen: neither $P/bin/../lib/pipegen/libpgrt_cuda.a \(installed by make install\) nor .*; build it on a machine with the CUDA toolkit \(make CUDA=1 build-cuda/libpgrt_cuda.a\), then make install" \
    "...saying how to get one"

# in the checkout, build/pipegen links against the checkout's runtime
out=$("$TOP/build/pipegen" build two.pipe -o builds/tree 2>&1)
ok $? "a checkout's build/pipegen builds too"
like "$out" "linked with $TOP/build/libpgrt_cpu.a" "...with the checkout's runtime"
done_testing
