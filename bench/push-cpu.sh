#!/usr/bin/env bash
# bench/push-cpu.sh: CPU seconds (both ends) and wall time of one push of SRC into a
# fresh `hetch serve` on tmpfs, with each given binary in turn, RUNS times over
# (alternating, so that two builds meet the same machine). The source should be in the
# page cache (the script reads it once first) and the destination is tmpfs, so the
# disk is out of the picture: what is left is hetch's own cost per file and per byte.
#
# Usage: bench/push-cpu.sh SRC BIN[:LABEL]... (RUNS=3 by default)
# Output: one line per run: label, wall, client user+sys, server CPU, both ends.
set -euo pipefail
src=${1:?usage: push-cpu.sh SRC BIN[:LABEL]...}; shift
[ $# -gt 0 ] || { echo "push-cpu.sh: give at least one hetch binary" >&2; exit 2; }
runs=${RUNS:-3}
tck=$(getconf CLK_TCK)
find "$src" -type f -exec cat {} + >/dev/null
one() {   # one BIN LABEL
    local bin=$1 label=$2 st root pid addr fp tok s0 s1 c
    st=$(mktemp -d); root=$(mktemp -d /dev/shm/push-cpu.XXXXXX)
    "$bin" serve --root "$root" --listen 127.0.0.1:0 --state-dir "$st" 2>"$st/log" &
    pid=$!
    for _ in $(seq 100); do
        grep -q "fingerprint" "$st/log" && grep -q "listening on" "$st/log" && break
        sleep 0.1
    done
    addr=$(sed -n 's/.*listening on //p' "$st/log"); fp=$(sed -n 's/.*fingerprint //p' "$st/log")
    tok=$(cat "$st/token")
    s0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    c=$( { HETCH_TOKEN=$tok /usr/bin/time -f "%e %U %S" "$bin" cp -q --fingerprint "$fp" \
        "$src" "hetch://$addr/x"; } 2>&1 | tail -n 1)
    s1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$root" "$st"
    read -r wall user sys <<<"$c"
    awk -v l="$label" -v w="$wall" -v u="$user" -v s="$sys" -v a="$s0" -v b="$s1" -v t="$tck" \
        'BEGIN { srv = (b - a) / t; printf "%-12s wall %6.2f s  client %5.2f CPU-s  server %5.2f CPU-s  both %5.2f CPU-s\n", l, w, u + s, srv, u + s + srv }'
}
for _ in $(seq "$runs"); do
    for spec in "$@"; do
        one "${spec%%:*}" "${spec#*:}"
    done
done
