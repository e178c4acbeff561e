#!/bin/sh
# Mixed-precision training of the MLP on a 2000-image slice, one epoch (as the fp32 run
# of make examples-check): bf16-mixed and fp16-mixed must reach the same 60% test
# accuracy, and fp16-mixed from a loss scale of 1e7 (gradients overflow float16) must
# skip steps, say so, and still train once the scale has backed off.
# Usage: examples/check/precision_check.sh EXAMPLES_BIN OUTDIR   (make examples-check)
set -eu
train=${1:?usage: precision_check.sh EXAMPLES_BIN OUTDIR}/train
out=${2:?usage: precision_check.sh EXAMPLES_BIN OUTDIR}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
run() {
    "$train" --limit 2000 --epochs 1 --lr 0.05 --min-accuracy 0.6 "$@" >"$tmp" 2>&1 ||
        { cat "$tmp"; echo "precision check failed: train $*"; exit 1; }
    tail -n 3 "$tmp"
}
run --precision bf16-mixed --out "$out/bf16"
run --precision fp16-mixed --out "$out/fp16"
run --precision fp16-mixed --loss-scale 1e7 --out "$out/fp16-overflow"
skipped=$(sed -n 's/^loss scaling: \([0-9]*\) of.*/\1/p' "$tmp")
if [ "${skipped:-0}" -lt 1 ]; then
    echo "precision check failed: a loss scale of 1e7 skipped no step"
    exit 1
fi
echo "precision: bf16-mixed and fp16-mixed trained; the forced overflow skipped $skipped steps"
