#!/usr/bin/env bash
# bench/compress.sh: --compress on an emulated slow long link and on loopback (issue 17).
# A benchmark, not a test. Datasets: text (CSV lines, about 3.4:1 with zstd -1) and
# random bytes, 8 files of 64 MiB each. On the testbed (hetch-lab wan, 500 Mbit/s each
# way, RTT 50 ms by default) a `hetch serve` in host b receives pushes from host a with
# --compress none, auto, zstd:1 and zstd:3, interleaved, RUNS times; on loopback (warm
# page cache, no link limit) none and auto, where auto should stay off. Prints one line
# per run and a summary of medians and ratios; raw lines go to bench/results.
#
# Usage: bench/compress.sh      (env: RUNS=3 RATE=500mbit RTT=50ms WORK=/var/tmp/hetch-compress
#                                 MODES="none auto zstd:1 zstd:3" NO_BUILD=1 to skip the build)
# Needs root (network namespaces). Stops the testbed it started on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=compress
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
RUNS=${RUNS:-3}
RATE=${RATE:-500mbit}
RTT=${RTT:-50ms}
WORK=${WORK:-/var/tmp/hetch-compress}
MODES=${MODES:-none auto zstd:1 zstd:3}
HETCH=$ROOT/target/release/hetch
LAB=$ROOT/target/release/hetch-lab
OUT=$ROOT/bench/results/$(date +%F)-compress.txt

[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
if [ -z "${NO_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p hetch -p hetch-lab) || die "build failed"
fi
mkdir -p "$WORK" "$(dirname "$OUT")"

gen() {   # gen DIR KIND: 8 x 64 MiB, once
    local dir=$1 kind=$2
    [ -f "$dir.complete" ] && return
    rm -rf "$dir"
    mkdir -p "$dir"
    log "generating $kind data in $dir"
    python3 - "$dir" "$kind" <<'PY'
import os, random, sys
d, kind = sys.argv[1], sys.argv[2]
rnd = random.Random(17)
for f in range(8):
    path = os.path.join(d, "part%d.%s" % (f, "csv" if kind == "text" else "bin"))
    with open(path, "wb") as out:
        if kind == "random":
            out.write(os.urandom(64 << 20))
            continue
        n, i, lines = 0, f * 10**7, []
        while n < 64 << 20:
            line = "%d,2026-11-25T%02d:%02d:%02d.%03d,sensor-%d,%.3f,%s,%d\n" % (
                i, i // 3600 % 24, i // 60 % 60, i % 60, rnd.randint(0, 999),
                rnd.randint(0, 250), rnd.gauss(20, 5),
                rnd.choice(["ok", "ok", "ok", "warn", "err"]), rnd.randint(0, 65535))
            lines.append(line)
            n += len(line)
            i += 1
        out.write("".join(lines).encode()[: 64 << 20])
PY
    touch "$dir.complete"
}
gen "$WORK/text" text
gen "$WORK/random" random

cleanup() { if [ -n "${WAN_UP:-}" ]; then "$LAB" wan down >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

# push WHERE SRC MODE: one push to a fresh server, on the testbed (client in host a,
# server in host b) or on loopback; prints "seconds MB/s ratio cpu"
push() {
    local cpu
    cpu=$(push_once "$1" "$WORK/dst" "$WORK/state" "$WORK/out.json" --compress "$3" "$2") || exit 1
    python3 - "$WORK/out.json" "$cpu" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print("%.3f %.1f %.2f %s" % (v["seconds"], v["bytes_per_second"] / 1e6,
      v["compression"]["ratio"], sys.argv[2]))
PY
}

: >"$OUT.raw"
record() {   # record WHERE DATA MODE RUN RESULT
    echo "$1 $2 $3 $4 $5" >>"$OUT.raw"
    log "$1 $2 --compress $3 run $4: seconds MB/s ratio CPU-s = $5"
}

log "testbed: rate $RATE, RTT $RTT"
"$LAB" wan down >/dev/null 2>&1 || true
"$LAB" wan up --rtt "$RTT" --rate "$RATE" >&2
WAN_UP=1
for run in $(seq 1 "$RUNS"); do
    for data in text random; do
        for mode in $MODES; do
            r=$(push wan "$WORK/$data" "$mode") || exit 1
            record wan "$data" "$mode" "$run" "$r"
        done
    done
done
"$LAB" wan down >/dev/null 2>&1 || true
WAN_UP=""

for run in $(seq 1 "$RUNS"); do
    for mode in none auto; do
        find "$WORK/text" -type f -exec cat {} + >/dev/null
        r=$(push loopback "$WORK/text" "$mode") || exit 1
        record loopback text "$mode" "$run" "$r"
    done
done

{
    echo "# bench/compress.sh $(date -Is): RUNS=$RUNS RATE=$RATE RTT=$RTT; $("$HETCH" --version)," \
        "commit $(git -C "$ROOT" rev-parse --short HEAD)"
    echo "# where data mode run: seconds MB/s ratio machine-CPU-s"
    cat "$OUT.raw"
    python3 - "$OUT.raw" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    where, data, mode, run, secs, mbs, ratio, cpu = line.split()
    rows[(where, data, mode)].append((float(mbs), float(ratio), float(cpu)))
print("\n| link | data | --compress | MB/s (median) | vs none | wire ratio | CPU-s (median) |")
print("|---|---|---|---|---|---|---|")
for (where, data, mode), v in rows.items():
    base = rows.get((where, data, "none"))
    med = statistics.median(x[0] for x in v)
    rel = med / statistics.median(x[0] for x in base) if base else float("nan")
    print("| %s | %s | %s | %.1f | %.2fx | %.2f | %.1f |" % (
        where, data, mode, med, rel, statistics.median(x[1] for x in v),
        statistics.median(x[2] for x in v)))
PY
} >"$OUT"
rm -f "$OUT.raw"
cat "$OUT"
log "results: $OUT"
