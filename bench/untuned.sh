#!/usr/bin/env bash
# bench/untuned.sh: a push between two hosts left at the distribution's socket-buffer
# limits (`hetch-lab wan up --untuned`: tcp_rmem/tcp_wmem max 6 MiB/4 MiB), on an
# emulated 2 Gbit/s link, at RTT 0 and 100 ms (issue 18's "untuned hosts" target): hetch
# with autotuning (the default), hetch with each fixed --streams of a sweep (4, the
# fixed default before autotuning, 8, 16, 32), and iperf3 moving the same bytes with 4
# and 16 streams (the link's limit for a transfer of that size, slow start included;
# iperf3 times from its first byte, hetch from its start). Memory to memory
# (/dev/shm), so that storage is not what is measured. Runs interleave, RUNS times;
# each line gives seconds, MB/s and the machine's CPU-seconds; the summary gives
# medians and each one's 100 ms / 0 ms ratio.
#
# Usage: bench/untuned.sh      (env: RUNS=3 SIZE=1G RATE=2gbit RTTS="0ms 100ms"
#                                SWEEP="4 8 16 32" WORK=/dev/shm/hetch-untuned
#                                NO_BUILD=1 to skip the build)
# Needs root (network namespaces). Stops the testbed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=untuned
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
RUNS=${RUNS:-3}
SIZE=${SIZE:-1G}
RATE=${RATE:-2gbit}
RTTS=${RTTS:-0ms 100ms}
SWEEP=${SWEEP:-4 8 16 32}
WORK=${WORK:-/dev/shm/hetch-untuned}
HETCH=$ROOT/target/release/hetch
LAB=$ROOT/target/release/hetch-lab
OUT=$ROOT/bench/results/$(date +%F)-untuned.txt

[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p hetch -p hetch-lab) || die "build failed"
fi
mkdir -p "$WORK" "$(dirname "$OUT")"
trap '"$LAB" wan down >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
BYTES=$(python3 -c "import sys; u={'K':1<<10,'M':1<<20,'G':1<<30}; s=sys.argv[1]; print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$SIZE")
head -c "$BYTES" /dev/urandom >"$WORK/src.bin"

hetch_run() {   # hetch_run FLAGS...: prints "seconds MB/s cpu streams"
    local cpu
    cpu=$(push_once wan "$WORK/dst" "$WORK/state" "$WORK/out.json" "$@" "$WORK/src.bin") || exit 1
    python3 - "$WORK/out.json" "$cpu" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print("%.3f %.1f %s %d" % (v["seconds"], v["bytes_per_second"] / 1e6, sys.argv[2], v["autotune"]["streams"]))
PY
}

iperf_run() {   # iperf_run STREAMS: prints "seconds MB/s cpu streams" (receiver's time)
    local c0 c1 json
    ip netns exec hetch-b iperf3 -s -1 -D >/dev/null
    sleep 0.5
    c0=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    json=$(ip netns exec hetch-a iperf3 -c 10.77.0.2 -n "$BYTES" -P "$1" -J)
    c1=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat)
    python3 -c '
import json, sys
d = json.load(sys.stdin)["end"]["sum_received"]
print("%.3f %.1f %.1f %s" % (d["seconds"], d["bytes"] / d["seconds"] / 1e6, (float(sys.argv[2]) - float(sys.argv[1])) / 100, sys.argv[3]))' "$c0" "$c1" "$1" <<<"$json"
}

: >"$OUT.raw"
for rtt in $RTTS; do
    "$LAB" wan down >/dev/null 2>&1 || true
    "$LAB" wan up --untuned --rtt "$rtt" --rate "$RATE" >&2
    for run in $(seq 1 "$RUNS"); do
        for tool in hetch-autotune $(printf 'hetch-streams-%s ' $SWEEP) iperf3-4 iperf3-16; do
            case $tool in
                hetch-autotune) r=$(hetch_run) ;;
                hetch-streams-*) r=$(hetch_run --streams "${tool#hetch-streams-}") ;;
                iperf3-*) r=$(iperf_run "${tool#iperf3-}") ;;
            esac
            echo "$rtt $tool $run $r" >>"$OUT.raw"
            log "rtt $rtt $tool run $run: seconds MB/s CPU-s streams = $r"
        done
    done
done
"$LAB" wan down >/dev/null 2>&1 || true

{
    echo "# bench/untuned.sh $(date -Is): RUNS=$RUNS SIZE=$SIZE RATE=$RATE RTTS=\"$RTTS\"; $("$HETCH" --version)," \
        "$(iperf3 --version | head -n 1), commit $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "# rtt tool run: seconds MB/s machine-CPU-s streams"
    cat "$OUT.raw"
    python3 - "$OUT.raw" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    rtt, tool, run, secs, mbs, cpu, streams = line.split()
    rows[(tool, rtt)].append((float(secs), float(mbs), float(cpu), streams))
rtts = sorted({r for _, r in rows}, key=lambda r: float(r.rstrip("ms")))
print("\n| tool | " + " | ".join(f"{r}: MB/s (median), CPU-s, streams" for r in rtts) + f" | {rtts[-1]} / {rtts[0]} |")
print("|---|" + "---|" * (len(rtts) + 1))
tools = list(dict.fromkeys(t for t, _ in rows))
med = lambda tool, r: statistics.median(x[1] for x in rows[(tool, r)])
for tool in tools:
    meds = [med(tool, r) for r in rtts]
    cells = [f"{m:.1f}, {statistics.median(x[2] for x in rows[(tool, r)]):.1f}, {rows[(tool, r)][0][3]}" for m, r in zip(meds, rtts)]
    print(f"| {tool} | " + " | ".join(cells) + f" | {meds[-1] / meds[0]:.2f} |")
print()
for r in rtts:
    swept = {t: med(t, r) for t in tools if t.startswith("hetch-streams-")}
    best = max(swept, key=swept.get)
    auto, four = med("hetch-autotune", r), swept.get("hetch-streams-4")
    line = f"{r}: autotune {auto:.1f} MB/s = {auto / swept[best]:.2f} of the best fixed setting ({best}, {swept[best]:.1f})"
    if four:
        line += f", {auto / four:.2f}x --streams 4"
    print(line)
PY
} >"$OUT"
rm -f "$OUT.raw"
cat "$OUT"
log "results: $OUT"
