#!/bin/sh
# The launcher's tests (every build), then the multi-process communicator tests, which
# need a GPU and NCCL and are skipped with a count otherwise: on two GPUs over NVLink,
# shared memory and sockets, each with a rank killed mid-run under eager and replayed
# collectives; on one GPU shared by the ranks as by two hosts (over sockets); on four
# GPUs also as two hosts of two GPUs each, sockets between them.
# Usage: test/comm/run.sh BUILD_DIR   (make check-comm)
set -u
build=${1:?usage: run.sh BUILD_DIR}
launch=$build/tools/blob-launch
probe=$build/test/comm_probe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../../tools/check_kit.sh"

echo "launcher"
expect "every rank gets its variables" 0 "$launch" --nproc 3 sh -c \
    'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $BLOB_COMM_ID_FILE"'
if [ "$(grep -c ' 3 3 0 127.0.0.1 /' "$tmp/out")" = 3 ] && has '^0 0 ' && has '^1 1 ' && has '^2 2 ' &&
    [ "$(awk '{ print $7 }' "$tmp/out" | sort -u | wc -l)" = 1 ]; then
    pass "ranks 0..2 of 3, one rendezvous file"
else
    fail "ranks 0..2 of 3, one rendezvous file"
fi
expect "two hosts: global ranks of node 1" 0 "$launch" --nproc 2 --nnodes 2 --node-rank 1 \
    --rendezvous "$tmp/id" sh -c 'echo "rank $RANK of $WORLD_SIZE"'
if has 'rank 2 of 4' && has 'rank 3 of 4'; then pass "ranks 2 and 3 of 4"; else fail "ranks 2 and 3 of 4"; fi
expect "the first failed rank's status" 3 "$launch" --nproc 2 sh -c 'exit $((RANK * 3))'
t0=$(now)
expect "a failing rank stops the others" 7 "$launch" --nproc 3 --grace 1 sh -c \
    'if [ "$RANK" = 1 ]; then sleep 0.2; exit 7; fi; sleep 30'
t=$(elapsed "$t0")
if below "$t" 3; then pass "... within 3 s ($t s)"; else fail "... within 3 s ($t s)"; fi
t0=$(now)
expect "ranks that ignore SIGTERM get SIGKILL after the grace period" 9 "$launch" --nproc 2 \
    --grace 1 sh -c 'if [ "$RANK" = 0 ]; then sleep 0.2; exit 9; fi; trap "" TERM; sleep 30'
t=$(elapsed "$t0")
if below "$t" 4; then pass "... within 4 s ($t s)"; else fail "... within 4 s ($t s)"; fi
expect "a rank killed by a signal" 137 "$launch" --nproc 2 sh -c \
    'if [ "$RANK" = 1 ]; then kill -KILL $$; fi; sleep 30'
"$launch" --nproc 2 sh -c 'trap "echo got TERM \$RANK; exit 0" TERM; echo up; while :; do sleep 0.1; done' \
    >"$tmp/out" 2>&1 &
pid=$!
i=0
while [ "$(grep -c up "$tmp/out")" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid
wait $pid
st=$?
if [ $st = 143 ] && has 'got TERM 0' && has 'got TERM 1'; then pass "SIGTERM is forwarded to every rank"; else
    echo "        exit status $st" >>"$tmp/out"; fail "SIGTERM is forwarded to every rank"; fi
expect "--one-gpu: every rank on GPU 0, a host of its own to NCCL" 0 "$launch" --nproc 2 --one-gpu \
    sh -c 'echo "rank $RANK local $LOCAL_RANK host $NCCL_HOSTID"'
if has 'rank 0 local 0 host blob-launch-host-0' && has 'rank 1 local 0 host blob-launch-host-1'; then
    pass "... LOCAL_RANK 0 and two host ids"; else fail "... LOCAL_RANK 0 and two host ids"; fi
expect "a program that cannot run" 127 "$launch" --nproc 2 "$tmp/no-such-program"
expect "no --nproc" 2 "$launch" true
expect "no program" 2 "$launch" --nproc 2
expect "several hosts without a rendezvous file" 2 "$launch" --nproc 1 --nnodes 2 --node-rank 0 true
printf 'blobcomm, a stale record' >"$tmp/id"
expect "node 0 removes a stale rendezvous file first" 0 "$launch" --nproc 1 --rendezvous "$tmp/id" \
    sh -c 'test ! -e "$BLOB_COMM_ID_FILE"'
if [ ! -e "$tmp/id" ]; then pass "... and the file is gone after"; else fail "... and the file is gone after"; fi
expect "its temporary directory is removed" 0 "$launch" --nproc 1 sh -c 'echo "$BLOB_COMM_ID_FILE"'
if [ ! -e "$(dirname "$(cat "$tmp/out")")" ]; then pass "... at the end"; else fail "... at the end"; fi
. "$(dirname "$0")/launch.sh"

# Two GPUs: the ranks over NVLink, then over sockets as between two hosts. One GPU: the
# ranks share it as two hosts would (blob-launch --one-gpu), over sockets.
gpus=$("$probe" gpus 2>/dev/null || echo 0)
# Tests per transport: 3 collectives, 2 kills (eager; the communicator's choice) of 4
# checks each, and over NVLink and shared memory a fifth (the survivor names the rank
# that ended) and that the choice was to replay; 5 failures at the start; 6 tests as two
# hosts of two GPUs.
p2p_tests=14 socket_tests=11 start_tests=5 two_host_tests=6
if [ "$gpus" -ge 2 ]; then
    transports="nvlink shm sockets" one_gpu=
elif [ "$gpus" = 1 ]; then
    transports=sockets one_gpu=--one-gpu
    echo "skipped: $((2 * p2p_tests)) multi-process tests over NVLink and shared memory (they need two GPUs; 1 found)"
else
    transports=
    echo "skipped: $((2 * p2p_tests + socket_tests + start_tests + two_host_tests)) multi-process tests (they need a GPU and NCCL; $gpus GPUs found)"
fi
if [ "$gpus" -ge 1 ] && [ "$gpus" -lt 4 ]; then
    echo "skipped: $two_host_tests multi-process tests as two hosts of two GPUs (they need four GPUs; $gpus found)"
fi
# two "hosts" on one machine: the loopback interface, unless one is chosen
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
# kill_test NAME LAUNCH_ARGS... -- PROBE_ARGS...: rank 1 SIGKILLs itself at step 5 of
# 20; the launcher fails with 137, rank 0 fails within the deadline + 5 s, naming the
# step, with its weights those of step 4.
kill_test() {
    name=$1
    shift
    t0=$(now)
    expect "a rank SIGKILLed mid-run: the launcher fails ($name)" 137 \
        "$launch" --nproc 2 $one_gpu --grace 20 "$probe" train 20 1 5 "$@"
    if has 'rank 0: step 5 failed after'; then pass "... the other rank gets an error ($name)"; else
        fail "... the other rank gets an error ($name)"; fi
    t=$(sed -n 's/^rank 0: step 5 failed after \([0-9.]*\) s.*/\1/p' "$tmp/out")
    if [ -n "$t" ] && below "$t" $((timeout + 5)); then pass "... within the deadline + 5 s ($t s)"; else
        fail "... within the deadline + 5 s (${t:-no} s)"; fi
    if has 'rank 0: weights intact: those of step 4'; then pass "... its weights are those of step 4"; else
        fail "... its weights are those of step 4"; fi
    # a missed deadline (not a closed socket) reads the host's board of the ranks
    if [ "$transport" != sockets ]; then
        if has 'rank 0: step 5 failed after .*: rank 1 (pid [0-9]*) has ended, after collective #'; then
            pass "... naming the rank that ended ($name)"; else
            fail "... naming the rank that ended ($name)"; fi
    fi
    echo "        (the run took $(elapsed "$t0") s)"
}
if [ -n "$transports" ]; then
    timeout=3
    export BLOB_COMM_TIMEOUT=$timeout
    for transport in $transports; do
        case $transport in
        # shared memory: what NCCL uses between GPUs without peer-to-peer access
        shm) export NCCL_P2P_DISABLE=1 ;;
        # what two hosts would use: no peer-to-peer, no shared memory, no InfiniBand
        sockets) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 ;;
        esac
        echo "two processes, $transport${one_gpu:+ (two hosts sharing one GPU)}"
        expect "all-reduce sum and mean, exact ($transport)" 0 \
            env BLOB_COMM_BUCKET_MB=1 "$launch" --nproc 2 $one_gpu "$probe" allreduce 4
        expect "... the same replayed from graphs ($transport)" 0 \
            env BLOB_COMM_BUCKET_MB=1 "$launch" --nproc 2 $one_gpu "$probe" allreduce 6 replay
        expect "training steps, weights equal ($transport)" 0 \
            "$launch" --nproc 2 $one_gpu "$probe" train 20 -1 -1
        kill_test "$transport, eager" eager
        kill_test "$transport, the communicator's choice"
        # peer to peer and shared memory need no host function in a graph: replayed
        if [ $transport != sockets ]; then
            if has 'rank 0: collectives replayed from graphs'; then pass "... which was to replay"; else
                fail "... which was to replay"; fi
        fi
        [ -z "$one_gpu" ] && unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_IB_DISABLE
    done
    echo "two processes, failures at the start"
    expect "different lists: BLOB_ESHAPE on every rank within a second" 0 \
        "$launch" --nproc 2 $one_gpu "$probe" mismatch
    t0=$(now)
    # shellcheck disable=SC2046
    expect "a rendezvous file that never comes: BLOB_ETIMEDOUT by the deadline" 4 \
        env $(rank_env 1) WORLD_SIZE=2 BLOB_COMM_ID_FILE="$tmp/never" "$probe" init
    t=$(elapsed "$t0")
    if has 'did not appear' && below "$t" $((timeout + 2)); then pass "... in $t s"; else fail "... in $t s"; fi
    printf 'blobcomm but not a record' >"$tmp/bad"
    # shellcheck disable=SC2046
    expect "a corrupt rendezvous file: BLOB_EFORMAT at once" 5 \
        env $(rank_env 1) WORLD_SIZE=2 BLOB_COMM_ID_FILE="$tmp/bad" "$probe" init
    # two ranks arrive, the world needs three
    t0=$(now)
    pids=
    for r in 0 1; do
        # shellcheck disable=SC2046
        env $(rank_env $r) WORLD_SIZE=3 BLOB_COMM_ID_FILE="$tmp/id3" "$probe" init >"$tmp/init$r" 2>&1 &
        pids="$pids $!"
    done
    st=0
    for pid in $pids; do wait "$pid" || st=$((st + $?)); done
    cat "$tmp/init0" "$tmp/init1" >"$tmp/out"
    t=$(elapsed "$t0")
    if [ $st = 8 ] && [ "$(grep -c 'ETIMEDOUT' "$tmp/out")" = 2 ] && below "$t" $((timeout + 5)); then
        pass "a world larger than the ranks that come: BLOB_ETIMEDOUT on both ($t s)"
    else
        echo "        statuses summed to $st" >>"$tmp/out"
        fail "a world larger than the ranks that come: BLOB_ETIMEDOUT on both ($t s)"
    fi
fi

# Four GPUs as two hosts of two: a launcher per "host", each with its GPUs and a host id
# of its own, so that NCCL goes over sockets between them and NVLink within.
if [ "$gpus" -ge 4 ]; then
    echo "four processes as two hosts of two GPUs (sockets between them)"
    # two_hosts PROBE_ARGS...: both launchers; their exit statuses in $st0 and $st1
    two_hosts() {
        rm -f "$tmp/id4"
        for node in 0 1; do
            CUDA_VISIBLE_DEVICES=$((2 * node)),$((2 * node + 1)) NCCL_HOSTID=blob-test-node-$node \
                NCCL_IB_DISABLE=1 "$launch" --nproc 2 --nnodes 2 --node-rank $node --grace 20 \
                --rendezvous "$tmp/id4" "$probe" "$@" >"$tmp/node$node" 2>&1 &
            eval "node_pid$node=\$!"
        done
        wait "$node_pid0"; st0=$?
        wait "$node_pid1"; st1=$?
        cat "$tmp/node0" "$tmp/node1" >"$tmp/out"
    }
    two_hosts train 20 -1 -1
    if [ $st0 = 0 ] && [ $st1 = 0 ] && [ "$(grep -c 'train ok: 20 steps' "$tmp/out")" = 4 ]; then
        pass "training steps, weights equal on 4 ranks"
    else
        echo "        exit statuses $st0 and $st1" >>"$tmp/out"; fail "training steps, weights equal on 4 ranks"
    fi
    t0=$(now)
    two_hosts train 20 1 5
    if [ $st0 = 137 ]; then pass "rank 1 SIGKILLed mid-run: its launcher fails with 137"; else
        echo "        exit status $st0" >>"$tmp/out"; fail "rank 1 SIGKILLed mid-run: its launcher fails with 137"; fi
    if [ $st1 != 0 ]; then pass "... the other host's launcher fails ($st1)"; else
        fail "... the other host's launcher fails"; fi
    n=$(grep -c 'step 5 failed after' "$tmp/out")
    if [ "$n" = 3 ]; then pass "... every other rank gets an error"; else fail "... every other rank gets an error ($n of 3)"; fi
    slow=$(sed -n 's/^rank [0-9]*: step 5 failed after \([0-9.]*\) s.*/\1/p' "$tmp/out" | sort -g | tail -1)
    if [ -n "$slow" ] && below "$slow" $((timeout + 5)); then pass "... within the deadline + 5 s ($slow s)"; else
        fail "... within the deadline + 5 s (${slow:-no} s)"; fi
    if [ "$(grep -c 'weights intact: those of step 4' "$tmp/out")" = 3 ]; then pass "... their weights are those of step 4"; else
        fail "... their weights are those of step 4"; fi
    echo "        (the run took $(elapsed "$t0") s)"
fi

echo "comm: $passed passed, $failed failed"
[ $failed = 0 ]
