#!/usr/bin/env bash
# Runs the README's test command (`bash test.sh`, the full tier) ROUNDS times and
# lists every test that failed at least once, with how often, under which conditions
# and its first message. A test that fails once and passes on a rerun is a bug in the
# test or the product: this finds them before a user's first run does.
#
# Rounds vary what makes races show: every LOAD_EVERY-th round (default 2) runs with
# two busy loops beside the suite (the CPU taken from it, as on a busy machine), and
# the tests at a time cycle through THREADS (default "4 2 8"; test.sh's own default is
# two per CPU).
#
#   bash .ci/flake-hunt.sh [ROUNDS] [-- libtest args, e.g. a filter]
#   OUT=dir (default target/flake-hunt): each round's log (round-N.log) and the
#   summary (summary.txt, also printed). Exit code 1 if any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${1:-10}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
LOAD_EVERY="${LOAD_EVERY:-2}"
read -r -a THREADS <<<"${THREADS:-4 2 8}"
OUT="${OUT:-target/flake-hunt}"
mkdir -p "$OUT"
: >"$OUT/failures.tsv"

# Two busy loops for the length of one round; stopped by `unload`.
LOADERS=()
load() {
    for _ in 1 2; do
        (while :; do :; done) &
        LOADERS+=($!)
    done
}
unload() {
    [ "${#LOADERS[@]}" -gt 0 ] && kill "${LOADERS[@]}" 2>/dev/null || true
    LOADERS=()
}
trap unload EXIT

for round in $(seq 1 "$ROUNDS"); do
    threads=${THREADS[$(((round - 1) % ${#THREADS[@]}))]}
    loaded=no
    if [ "$LOAD_EVERY" -gt 0 ] && [ $((round % LOAD_EVERY)) = 0 ]; then
        loaded=yes
        load
    fi
    log="$OUT/round-$round.log"
    start=$SECONDS
    status=0
    RUST_TEST_THREADS=$threads bash test.sh "$@" >"$log" 2>&1 || status=$?
    unload
    # libtest's verdict lines, then each failed test's first panic message.
    failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED.*$/\1/p' "$log" | sort -u)
    for t in $failed; do
        why=$(awk -v t="---- $t stdout ----" '$0 == t { on = 1; next }
            on && /panicked at/ { getline; print; exit }' "$log" | cut -c1-200)
        printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$round" "$loaded" "$threads" "$why" >>"$OUT/failures.tsv"
    done
    n=$(printf '%s' "$failed" | grep -c . || true)
    echo "round $round: threads $threads, load $loaded, exit $status, $n failed, $((SECONDS - start)) s"
    # A red run with no failed test named (a build error, a crashed test binary):
    # said, since it hides every test after it.
    if [ "$status" != 0 ] && [ "$n" = 0 ]; then
        printf '%s\t%s\t%s\t%s\t%s\n' "(the run itself)" "$round" "$loaded" "$threads" \
            "exit $status with no failed test named: see $log" >>"$OUT/failures.tsv"
    fi
done

{
    echo "=== flake hunt: $ROUNDS rounds of bash test.sh $*"
    if [ ! -s "$OUT/failures.tsv" ]; then
        echo "no test failed"
    else
        echo "failures per test (rounds failed of $ROUNDS; under load; tests at a time; first message):"
        sort "$OUT/failures.tsv" | awk -F'\t' '
            { n[$1]++; if ($3 == "yes") l[$1]++; th[$1] = th[$1] " " $4; if (!($1 in m)) m[$1] = $5 }
            END { for (t in n) printf "  %s: %d (%d loaded; threads%s): %s\n", t, n[t], l[t], th[t], m[t] }'
    fi
} | tee "$OUT/summary.txt"
[ ! -s "$OUT/failures.tsv" ]
