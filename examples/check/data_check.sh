#!/bin/sh
# The trainer's refusals, each at once with a message and status 1 or 2, never a hang or a
# crash: a dataset path that is a FIFO, a directory or missing (the IDX reader opens
# regular files only), every numeric option outside its syntax or bounds, and the mixed
# precisions with the plain layers.
# Usage: examples/check/data_check.sh EXAMPLES_BIN   (make examples-check)
set -u
train=${1:?usage: data_check.sh EXAMPLES_BIN}/train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
# expect NAME STATUS SAYS ARGS...: train ARGS exits with STATUS within 10 s, saying SAYS
expect() {
    name=$1 want=$2 says=$3
    shift 3
    timeout 10 "$train" "$@" >"$tmp/out" 2>&1
    got=$?
    if [ "$got" = "$want" ] && grep -q -- "$says" "$tmp/out"; then
        passed=$((passed + 1))
        echo "  ok    $name"
    else
        failed=$((failed + 1))
        echo "  FAIL  $name (exit status $got, expected $want saying \"$says\")"
        sed 's/^/        | /' "$tmp/out" | tail -5
    fi
}

echo "trainer: dataset paths"
mkdir "$tmp/fifo" "$tmp/dir"
mkfifo "$tmp/fifo/train-images-idx3-ubyte.gz" "$tmp/fifo/train-labels-idx1-ubyte.gz"
mkdir "$tmp/dir/train-images-idx3-ubyte.gz"
expect "a FIFO is refused, not waited on" 1 "not a regular file (a FIFO)" --data "$tmp/fifo"
expect "a directory is refused" 1 "not a regular file (a directory)" --data "$tmp/dir"
expect "a missing file is named" 1 "train-images-idx3-ubyte.gz: No such file" --data "$tmp/none"

echo "trainer: numeric options"
for opt in "--epochs 0" "--epochs 10001" "--epochs ' 5'" "--epochs +5" "--epochs 1e3" \
    "--epochs 5.0" "--epochs ''" "--batch 1e15" "--batch 1048577" "--batch 0x40" "--limit 0" \
    "--seed -1" "--seed 1000000000000001" "--gpus 65" "--lr 0" "--lr 1e300" "--lr -0.1" \
    "--lr inf" "--lr nan" "--lr ''" "--lr ' 0.1'" "--lr 0x1p-3" "--lr 1e-400" "--lr-step -1" \
    "--lr-gamma 0" "--momentum 1" "--momentum -0.5" "--weight-decay 1001" "--min-accuracy 1.5" \
    "--min-accuracy 1e"; do
    eval "set -- $opt"
    expect "refused: $opt" 2 "bad or incomplete option '$1'" "$@"
done

echo "trainer: option combinations"
expect "bf16-mixed refuses --plain" 1 "not with --plain" --precision bf16-mixed --plain --limit 64
expect "fp16-mixed refuses --plain" 1 "not with --plain" --precision fp16-mixed --plain --limit 64

echo "trainer: $passed passed, $failed failed"
[ $failed = 0 ]
