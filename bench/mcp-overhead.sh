#!/usr/bin/env bash
# bench/mcp-overhead.sh: what the guardrails of `hetch mcp` cost. The same local copy,
# run directly (`hetch cp`) and through MCP (the official Python SDK's client: `copy`
# makes the plan from a dry run, `confirm` lists the sources again, then runs hetch
# cp), on two datasets: one large file, and many small files (where listing costs
# most). Wall time and CPU-seconds (hetch mcp and every hetch it ran) for each, warm
# page cache, the destination removed between runs; medians of RUNS.
#
# Usage: bench/mcp-overhead.sh   (env: RUNS=3 LARGE=1G SMALL_FILES=20000 NO_BUILD=1)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=mcp-overhead
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
RUNS=${RUNS:-3}
LARGE=${LARGE:-1G}
SMALL_FILES=${SMALL_FILES:-20000}
HETCH=$ROOT/target/release/hetch
[ -n "${NO_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --quiet)
bash "$ROOT/bench/install-mcp-client.sh"
PY=$ROOT/target/tools/mcp-venv/bin/python

WORK=$(mktemp -d /var/tmp/hetch-mcp-overhead.XXXX)
trap 'rm -rf "$WORK"' EXIT
META=$WORK/meta.tsv
OUT=$ROOT/bench/results/$(date +%F)-mcp-overhead.jsonl
mkdir -p "$WORK/in/large" "$WORK/in/small" "$WORK/out"
head -c "$(numfmt --from=iec "$LARGE")" /dev/urandom >"$WORK/in/large/f"
python3 - "$WORK/in/small" "$SMALL_FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i % 100))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d" % i), "wb") as f:
        f.write(os.urandom(10240))
PY
cat >"$WORK/policy.toml" <<TOML
read = ["$WORK/in"]
write = ["$WORK/out"]
max_bytes = "100G"
max_files = 10000000
audit_log = "$WORK/audit.jsonl"
TOML

meta command "bench/mcp-overhead.sh (RUNS=$RUNS LARGE=$LARGE SMALL_FILES=$SMALL_FILES)"
meta hetch "$("$HETCH" --version) $(git -C "$ROOT" rev-parse --short HEAD)"
meta mcp "$("$PY" -c 'import importlib.metadata as m; print("python mcp", m.version("mcp"))')"
for set in large small; do
    for run in $(seq 1 "$RUNS"); do
        rm -rf "$WORK/out/$set"; sync
        /usr/bin/time -f '%e %U %S' -o "$WORK/t" "$HETCH" cp --quiet "$WORK/in/$set" "$WORK/out/" 2>/dev/null
        read -r wall user sys <"$WORK/t"
        printf '{"set":"%s","run":%d,"how":"hetch cp","wall_seconds":%s,"cpu_seconds":%s}\n' \
            "$set" "$run" "$wall" "$(echo "$user + $sys" | bc -l)"
        rm -rf "$WORK/out/$set"; sync
        t0=$(now)
        line=$("$PY" "$ROOT/bench/mcp_overhead.py" "$HETCH" "$WORK/policy.toml" "$WORK/in/$set" "$WORK/out/")
        t1=$(now)
        printf '{"set":"%s","run":%d,"how":"hetch mcp","wall_seconds":%s,"mcp":%s}\n' \
            "$set" "$run" "$(echo "$t1 - $t0" | bc -l)" "$line"
    done
done | tee "$OUT"
cat "$META"
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs)
print("\n| dataset | hetch cp wall s | cpu-s | through MCP wall s (plan + confirm) | cpu-s | wall ratio | cpu ratio |")
print("|---|---|---|---|---|---|---|")
for s in ["large", "small"]:
    cp = [r for r in rows if r["set"] == s and r["how"] == "hetch cp"]
    m = [r for r in rows if r["set"] == s and r["how"] == "hetch mcp"]
    cw, cc = med([r["wall_seconds"] for r in cp]), med([r["cpu_seconds"] for r in cp])
    mp = med([r["mcp"]["plan_seconds"] for r in m])
    mc = med([r["mcp"]["confirm_seconds"] for r in m])
    mu = med([r["mcp"]["cpu_seconds"] for r in m])
    print(f"| {s} | {cw:.2f} | {cc:.2f} | {mp + mc:.2f} ({mp:.2f} + {mc:.2f}) | {mu:.2f} | {(mp + mc) / cw:.2f} | {mu / cc:.2f} |")
PY
