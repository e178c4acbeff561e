# The launcher's tests of its input, its options, the rendezvous path it clears and its
# own death; sourced by test/comm/run.sh, whose helpers (expect, has, pass, fail, now,
# elapsed, below: tools/check_kit.sh) and variables (launch, tmp) it uses.

# alive PIDFILE...: whether any process named in the files runs
alive() {
    for f in "$@"; do kill -0 "$(cat "$f")" 2>/dev/null && return 0; done
    return 1
}
# await_files N FILE...: wait up to 5 s for the files to exist
await_files() {
    i=0
    for f in "$@"; do
        while [ ! -s "$f" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    done
}

echo "launcher: input, options, rendezvous path, its death"
expect "ranks read /dev/null, not the launcher's input" 0 sh -c \
    "echo hello | '$launch' --nproc 2 sh -c 'if read x; then echo \"read [\$x]\"; else echo \"rank \$RANK: end of input\"; fi'"
if has 'rank 0: end of input' && has 'rank 1: end of input' && ! has 'read \['; then
    pass "... both at the end of input"; else fail "... both at the end of input"; fi
if command -v script >/dev/null 2>&1; then
    # on a terminal of its own (script), rank 1 reads the terminal and is stopped by SIGTTIN
    t0=$(now)
    expect "a rank that reads the terminal is killed, not left stopped" 137 timeout 20 \
        script -qec "'$launch' --nproc 2 sh -c 'if [ \$RANK = 1 ]; then read x </dev/tty; fi; sleep 30'" /dev/null
    t=$(elapsed "$t0")
    if has 'rank 1 (pid [0-9]*) was stopped by TTIN' && below "$t" 10; then pass "... with a message, in $t s"; else
        fail "... with a message, in $t s"; fi
else
    echo "skipped: 2 launcher tests of a rank reading the terminal (they need script(1))"
fi

# A launcher killed by SIGKILL takes the ranks' own children with it.
rm -f "$tmp/child."*
"$launch" --nproc 2 sh -c 'sleep 300 & echo $! >"$0.$RANK"; wait' "$tmp/child" >"$tmp/out" 2>&1 &
lpid=$!
await_files "$tmp/child.0" "$tmp/child.1"
kill -KILL $lpid
wait $lpid 2>/dev/null
i=0
while alive "$tmp/child.0" "$tmp/child.1" && [ $i -lt 30 ]; do sleep 0.1; i=$((i + 1)); done
if [ -s "$tmp/child.0" ] && [ -s "$tmp/child.1" ] && ! alive "$tmp/child.0" "$tmp/child.1"; then
    pass "a SIGKILLed launcher takes the ranks' children with it"
else
    for f in "$tmp/child.0" "$tmp/child.1"; do [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
    fail "a SIGKILLed launcher takes the ranks' children with it"
fi

# Every number is decimal digits in bounds; nothing spins or is read as 0.
for args in "--grace 1e300" "--grace ''" "--grace 3601" "--grace -1" "--grace 0x10" "--grace inf" \
    "--grace ' 1'" "--nnodes 0" "--node-rank -1" "--rendezvous ''" "--nproc ' 2'" "--nproc 2x" \
    "--nproc 1025" "--nproc ''" "--nproc 0" "--nproc +2" "--nproc"; do
    case $args in --nproc*) ;; *) args="--nproc 1 $args" ;; esac
    expect "refused at once: $args" 2 timeout 10 sh -c "'$launch' $args true"
done
expect "... with a message naming the option and its bounds" 2 "$launch" --nproc 1 --grace 1e300 true
if has 'grace must be a number of seconds in \[0, 3600\], got "1e300"'; then pass "... --grace 1e300"; else
    fail "... --grace 1e300"; fi
expect "--grace 0.5 and --grace 3600 are fine" 0 sh -c "'$launch' --nproc 1 --grace 0.5 true && '$launch' --nproc 1 --grace 3600 true"

# --rendezvous clears only an empty file or a record of this user, through links.
printf 'precious data' >"$tmp/keep"
mkdir "$tmp/rdir"
mkfifo "$tmp/rfifo"
for p in keep rdir rfifo; do
    expect "--rendezvous over something else is refused: $p" 1 timeout 10 "$launch" --nproc 1 \
        --rendezvous "$tmp/$p" true
done
if has 'is a FIFO, so it stays' && [ -p "$tmp/rfifo" ] && [ -d "$tmp/rdir" ] &&
    [ "$(cat "$tmp/keep")" = "precious data" ]; then pass "... each left as it was, with a message"; else
    fail "... each left as it was, with a message"; fi
expect "--rendezvous /dev/null is refused" 1 "$launch" --nproc 1 --rendezvous /dev/null true
if has 'is a character device' && [ -c /dev/null ]; then pass "... and left alone"; else fail "... and left alone"; fi
: >"$tmp/empty"
expect "an empty file is cleared" 0 "$launch" --nproc 1 --rendezvous "$tmp/empty" sh -c 'test ! -e "$BLOB_COMM_ID_FILE"'
printf 'blobcomm, a stale record' >"$tmp/shared-id"
ln -s shared-id "$tmp/rlink"
expect "a record through a link is cleared" 0 "$launch" --nproc 1 --rendezvous "$tmp/rlink" true
if [ ! -e "$tmp/shared-id" ] && [ -L "$tmp/rlink" ]; then pass "... the record, not the link"; else
    fail "... the record, not the link"; fi
if [ "$(id -u)" = 0 ]; then
    printf 'blobcomm, a stale record' >"$tmp/theirs"
    chown 65534 "$tmp/theirs"
    expect "another user's record is refused" 1 "$launch" --nproc 1 --rendezvous "$tmp/theirs" true
    if has "another user's file" && [ -e "$tmp/theirs" ]; then pass "... and left"; else fail "... and left"; fi
else
    echo "skipped: 2 launcher tests of another user's record (they need root to make one)"
fi
