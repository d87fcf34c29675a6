#!/usr/bin/env bash
# bench/streaming-issue5.sh: the runs behind issue 5's streaming benchmark, the zx
# paper's streaming sweep (Figs. 8 and 9) scaled to this machine, each one
# `hetch-lab bench sweep --mode streaming` command: eventual file sizes 4M..256M (factor 4),
# 1 GiB per dataset, a writer appending 1 MiB writes round-robin at 1 Gbit/s (under
# the 2 Gbit/s link) and as fast as it can; at every point hetch streaming
# (`hetch cp --follow` while the writer writes) beside hetch bulk (`hetch cp` of the
# same final files) and iperf3 (the limit); 2 iterations. Targets: streaming within
# 10% of bulk (unlimited writer); p99 lag below RTT + 250 ms (1 Gbit/s writer).
#
# Usage: bench/streaming-issue5.sh [STEP...]
#        steps: streaming (= streaming-loopback, then streaming-testbed),
#               streaming-loopback, streaming-testbed
#        (default: streaming). Results: bench/results/DATE-<step>.{jsonl,md,...}
#        (or $OUT/...; DATE=YYYY-MM-DD names them).
# streaming-testbed needs root (the `hetch-lab wan` testbed); streaming-loopback does not.
# Each step resumes its results file, so rerunning after an interruption continues.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p hetch -p hetch-lab >&2
H=$ROOT/target/release/hetch
LAB=$ROOT/target/release/hetch-lab  # the harness and the testbed; it runs $H
DATE=${DATE:-$(date -u +%Y-%m-%d)}
OUT=${OUT:-$ROOT/bench/results}
# The sweep of both steps: sizes, aggregate, writer rates, iterations, tools.
SWEEP=(--mode streaming --min 4M --max 256M --factor 4 --aggregate 1G
    --write-rate 1gbit,0 --write-size 1M --iterations 2 --tools hetch,iperf3)
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(streaming)
trap '"$LAB" wan down >/dev/null 2>&1 || true' EXIT

expand() {
    for s in "$@"; do
        case "$s" in
        streaming) echo streaming-loopback streaming-testbed ;;
        *) echo "$s" ;;
        esac
    done
}

for step in $(expand "${STEPS[@]}"); do
    echo "=== $step" >&2
    case "$step" in
    streaming-loopback) # the sweep over loopback (no link rate), memory to memory
        "$LAB" bench sweep "${SWEEP[@]}" \
            --data /dev/shm/hetch-bench-streaming --results "$OUT/$DATE-streaming-loopback.jsonl" || true
        rm -rf /dev/shm/hetch-bench-streaming ;;
    streaming-testbed) # RTT 0 and 50 ms on a 2 Gbit/s link (the zx paper's Fig. 9, scaled)
        "$LAB" bench sweep "${SWEEP[@]}" --rtt 0,50 --rate 2gbit \
            --data /dev/shm/hetch-bench-streaming --results "$OUT/$DATE-streaming-testbed.jsonl" || true
        rm -rf /dev/shm/hetch-bench-streaming ;;
    *) echo "streaming-issue5.sh: unknown step $step" >&2; exit 2 ;;
    esac
done
