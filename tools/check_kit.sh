# The kit of the shell checks (test/comm/run.sh, examples/check/dp_check.sh), sourced
# after they make $tmp, a directory of their own: the counts of passed and failed checks
# and the helpers that run and time them. A check's output is kept in $tmp/out; fail
# shows its last $fail_lines lines (20 unless the script sets another number).
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1"; sed 's/^/        | /' "$tmp/out" 2>/dev/null | tail -"${fail_lines:-20}"; }
now() { date +%s.%N; }
# elapsed START: seconds since START, e.g. 1.25
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# below X Y: X < Y
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
# expect NAME WANT_STATUS COMMAND...: run, keep the output in $tmp/out
expect() {
    name=$1 want=$2
    shift 2
    "$@" >"$tmp/out" 2>&1
    got=$?
    if [ "$got" = "$want" ]; then pass "$name"; else echo "        exit status $got, expected $want" >>"$tmp/out"; fail "$name"; fi
}
has() { grep -q "$1" "$tmp/out"; }
# rank_env R: the variables of rank R started by hand (as on a host of its own when
# $one_gpu is set)
rank_env() {
    if [ -n "$one_gpu" ]; then echo "RANK=$1 LOCAL_RANK=0 NCCL_HOSTID=blob-test-host-$1"; else
        echo "RANK=$1 LOCAL_RANK=$1"; fi
}
