#!/bin/sh
# Data-parallel training (examples/check/dp_check.c and the trainer). On every build: a
# 1-rank communicator changes nothing. With two GPUs: 2 ranks as threads and as processes
# (over NVLink, and with NCCL forced onto sockets as between two hosts) end with the
# weights of one GPU trained with twice the batch, and a rank killed mid-training ends
# the run with an error, never a hang. With one GPU, the tests over sockets run with the
# two ranks sharing it as two hosts would (blob-launch --one-gpu). Tests that need two
# GPUs, a GPU, or the dataset are skipped with a count.
# Usage: sh examples/check/dp_check.sh EXAMPLES_BIN LAUNCHER OUT_DIR   (make examples-check)
set -u
bin=${1:?usage: dp_check.sh EXAMPLES_BIN LAUNCHER OUT_DIR}
launch=${2:?usage: dp_check.sh EXAMPLES_BIN LAUNCHER OUT_DIR}
out=${3:?usage: dp_check.sh EXAMPLES_BIN LAUNCHER OUT_DIR}
check=$bin/dp_check
train=$bin/train
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d)
pids=
cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/../../tools/check_kit.sh"
fail_lines=30
skipped=0
have_data() { [ -r "$data/train-images-idx3-ubyte.gz" ] && [ -r "$data/t10k-images-idx3-ubyte.gz" ]; }
# the trainer's output without the times and the output directory
normalize() { sed -e 's/  [0-9.]* s$//' -e 's/ in [0-9.]* s ([0-9.]* us per training step)//' \
    -e "s|$out/[a-z0-9-]*|OUT|g" "$1"; }
# wait_for FILE PATTERN SECONDS: until the file holds the pattern
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        [ $i -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        i=$((i + 1))
    done
}
# wait_exit PID SECONDS: the process's exit status into $st, or 255 (killed) past SECONDS
wait_exit() {
    i=0
    while kill -0 "$1" 2>/dev/null; do
        if [ $i -ge $(($2 * 10)) ]; then
            kill -KILL "$1" 2>/dev/null
            break
        fi
        sleep 0.1
        i=$((i + 1))
    done
    wait "$1"
    st=$?
}

echo "data parallel, one rank"
expect "dp_check one: a 1-rank communicator trains as none" 0 "$check" one
small="--limit 2000 --epochs 2 --lr 0.05"
if have_data; then
    # shellcheck disable=SC2086
    "$train" --device cpu $small --out "$out/plain" >"$out/plain.txt" 2>&1
    # shellcheck disable=SC2086
    RANK=0 WORLD_SIZE=1 "$train" --device cpu $small --out "$out/rank" >"$out/rank.txt" 2>&1
    normalize "$out/plain.txt" >"$tmp/plain"
    normalize "$out/rank.txt" >"$tmp/rank"
    if diff "$tmp/plain" "$tmp/rank" >"$tmp/out" 2>&1 && grep -q 'test accuracy' "$tmp/rank"; then
        pass "train on the CPU as rank 0 of 1 (RANK=0 WORLD_SIZE=1): the same output"
    else
        cat "$out/plain.txt" "$out/rank.txt" >>"$tmp/out"
        fail "train on the CPU as rank 0 of 1 (RANK=0 WORLD_SIZE=1): the same output"
    fi
    : >"$tmp/out"
    same=true
    for f in "$out"/plain/*.npy "$out/plain/curve.svg"; do
        cmp "$f" "$out/rank/$(basename "$f")" >>"$tmp/out" 2>&1 || same=false
    done
    if $same; then pass "... the same weights and curve, byte for byte"; else
        fail "... the same weights and curve, byte for byte"; fi
else
    skipped=$((skipped + 2))
    echo "skipped: 2 tests (they need Fashion-MNIST in $data)"
fi

gpu_tests=9
gpus=$("$check" gpus 2>/dev/null || echo 0)
sockets="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1"
if [ "$gpus" -ge 2 ]; then
    hows="threads nvlink sockets" one_gpu=
elif [ "$gpus" = 1 ]; then
    hows=sockets one_gpu=--one-gpu
    # two "hosts" on one machine: sockets on the loopback interface, unless one is chosen
    export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_IB_DISABLE=1
    skipped=$((skipped + 4))
    echo "skipped: 4 tests as threads or over NVLink (they need two GPUs; 1 found)"
fi
if [ "$gpus" -lt 1 ]; then
    skipped=$((skipped + gpu_tests))
    echo "skipped: $gpu_tests tests (they need a GPU; none found)"
else
    echo "data parallel, two ranks${one_gpu:+ sharing one GPU as two hosts}"
    for how in $hows; do
        # shellcheck disable=SC2086
        case $how in
        threads) expect "dp_check threads: 2 threads = 1 GPU with twice the batch" 0 "$check" threads ;;
        nvlink) expect "dp_check rank: 2 processes = 1 GPU with twice the batch (NVLink)" 0 \
            env BLOB_COMM_BUCKET_MB=1 "$launch" --nproc 2 "$check" rank ;;
        sockets) expect "dp_check rank: 2 processes = 1 GPU with twice the batch (sockets)" 0 \
            env BLOB_COMM_BUCKET_MB=1 $sockets "$launch" --nproc 2 $one_gpu "$check" rank ;;
        esac
    done
    if ! have_data; then
        n=$((gpus >= 2 ? 6 : 4))
        skipped=$((skipped + n))
        echo "skipped: $n tests (they need Fashion-MNIST in $data)"
    else
        # 3200 images: 50 steps of 64, or of 2 x 32
        run="--limit 3200 --epochs 1 --lr 0.05"
        # shellcheck disable=SC2086
        "$train" $run --batch 64 --out "$out/one" >"$out/one.txt" 2>&1 ||
            echo "        (train on one GPU failed: see $out/one.txt)"
        for how in $hows; do
            # shellcheck disable=SC2086
            case $how in
            threads) set -- "$train" --gpus 2 ;;
            nvlink) set -- "$launch" --nproc 2 "$train" ;;
            sockets) set -- env $sockets "$launch" --nproc 2 $one_gpu "$train" ;;
            esac
            # shellcheck disable=SC2086
            "$@" $run --batch 32 --out "$out/$how" >"$out/$how.txt" 2>&1
            st=$?
            "$check" compare mlp "$out/$how" "$out/one" 1e-3 >"$tmp/out" 2>&1 && [ $st = 0 ]
            ok=$?
            cat "$out/$how.txt" >>"$tmp/out"
            if [ $ok = 0 ]; then pass "train, 2 x 32 ($how) = 1 x 64: weights to 1e-3 (float32)"
            else fail "train, 2 x 32 ($how) = 1 x 64: weights to 1e-3 (float32)"; fi
        done

        # A rank killed mid-training, the ranks started by hand as on two hosts: the
        # other one fails by the deadline (+ 5 s) with a message.
        timeout=3
        long="--limit 3200 --epochs 10000 --batch 32"
        start_rank() {
            # shellcheck disable=SC2046,SC2086
            env BLOB_COMM_TIMEOUT=$timeout $(rank_env "$1") WORLD_SIZE=2 \
                BLOB_COMM_ID_FILE="$tmp/id" "$train" $long --out "$out/killed" \
                >"$tmp/rank$1" 2>&1 &
        }
        start_rank 0
        pid0=$!
        start_rank 1
        pid1=$!
        pids="$pids $pid0 $pid1"
        if wait_for "$tmp/rank0" 'epoch  2/' 120; then
            kill -KILL "$pid1"
            t0=$(now)
            wait_exit "$pid0" $((timeout + 20))
            t=$(elapsed "$t0")
            cat "$tmp/rank0" >"$tmp/out"
            if [ $st = 1 ] && has 'train: rank 0: '; then
                pass "a rank SIGKILLed mid-training: the other fails with a message"
            else
                echo "exit status $st" >>"$tmp/out"
                fail "a rank SIGKILLed mid-training: the other fails with a message"
            fi
            if below "$t" $((timeout + 5)); then pass "... within the deadline + 5 s ($t s)"; else
                fail "... within the deadline + 5 s ($t s)"; fi
        else
            cat "$tmp/rank0" "$tmp/rank1" >"$tmp/out"
            fail "a rank SIGKILLed mid-training: training did not get under way"
            failed=$((failed + 1))
            kill -KILL "$pid0" "$pid1" 2>/dev/null
        fi
        wait 2>/dev/null

        # The same through the launcher: it ends the run and fails with the killed
        # rank's status.
        # shellcheck disable=SC2086
        BLOB_COMM_TIMEOUT=$timeout "$launch" --nproc 2 $one_gpu --grace 2 "$train" $long \
            --out "$out/killed" >"$tmp/launch" 2>&1 &
        lpid=$!
        pids="$pids $lpid"
        if wait_for "$tmp/launch" 'epoch  2/' 120; then
            victim=
            for d in /proc/[0-9]*; do # RANK=1 under its keeper, the launcher's child
                keeper=$(cut -d' ' -f4 "$d/stat" 2>/dev/null)
                [ -n "$keeper" ] && [ "$(cut -d' ' -f4 "/proc/$keeper/stat" 2>/dev/null)" = "$lpid" ] ||
                    continue
                if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx 'RANK=1'; then
                    victim=${d#/proc/}
                fi
            done
            [ -n "$victim" ] && kill -KILL "$victim"
            t0=$(now)
            wait_exit "$lpid" $((timeout + 20))
            t=$(elapsed "$t0")
            cat "$tmp/launch" >"$tmp/out"
            if [ -n "$victim" ] && [ $st = 137 ] && below "$t" $((timeout + 5)); then
                pass "blob-launch: rank 1 SIGKILLed mid-training: the launcher exits 137 ($t s)"
            else
                echo "exit status $st after $t s (rank 1: ${victim:-not found})" >>"$tmp/out"
                fail "blob-launch: rank 1 SIGKILLed mid-training: the launcher exits 137 ($t s)"
            fi
        else
            cp "$tmp/launch" "$tmp/out"
            fail "blob-launch: rank 1 SIGKILLed mid-training: training did not get under way"
            kill -TERM "$lpid" 2>/dev/null
            wait_exit "$lpid" 10
        fi
    fi
fi

echo "dp: $passed passed, $failed failed${skipped:+, $skipped skipped}"
[ $failed = 0 ]
