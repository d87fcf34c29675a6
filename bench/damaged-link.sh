#!/usr/bin/env bash
# Copies through a link that damages TCP payloads past their checksum (the testbed's
# delay line with --corrupt: one byte of a segment changed, the checksum fixed, so
# the damage reaches hetch), RUNS times, pushes and pulls in turn, each over TLS or
# over plain data streams (--no-encrypt: block digests and frame MACs catch the
# damage). Every copy must end identical with no temporary file left; one line per
# copy (exit code, seconds, blocks re-sent and why, blocks repaired from patches and
# their bytes, sessions opened again, segments the link damaged) goes to stdout and
# $OUT/runs.tsv; a summary per mode ends the output; the exit code is non-zero if any
# copy failed or differed.
#
# Root only (network namespaces). Usage:
#   bash bench/damaged-link.sh [RUNS] [DAMAGE] [MODES]
#     RUNS    copies per mode (default 20)
#     DAMAGE  fraction of segments damaged, each way (default 0.2%)
#     MODES   "tls plain" (default), or one of them
#   HETCH=path/to/hetch (default target/release/hetch; hetch-lab beside it)
#   SIZE_MB (default 96): the big file of the dataset, beside ~10 MiB of small files
#   EXTRA: more `hetch cp` flags (e.g. "--block-size 1M")
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${1:-20}"
DAMAGE="${2:-0.2%}"
read -r -a MODES <<<"${3:-tls plain}"
HETCH="$(realpath "${HETCH:-target/release/hetch}")"
LAB="$(realpath "${LAB:-$(dirname "$HETCH")/hetch-lab}")"
OUT="${OUT:-$(mktemp -d /tmp/hetch-damaged.XXXXXX)}"
SIZE_MB="${SIZE_MB:-96}"
read -r -a EXTRA <<<"${EXTRA:-}"
[ "$(id -u)" = 0 ] || { echo "damaged-link.sh: needs root (network namespaces)" >&2; exit 2; }
[ -x "$HETCH" ] || { echo "damaged-link.sh: no hetch binary at $HETCH" >&2; exit 2; }
[ -x "$LAB" ] || { echo "damaged-link.sh: no hetch-lab binary at $LAB" >&2; exit 2; }

ADDR=10.77.0.2:7878
W="$OUT/work"
SRC="$W/src"
ROOT="$W/root"
LOCAL="$W/local"
mkdir -p "$SRC/tree/a" "$ROOT/pub" "$LOCAL"
head -c $((SIZE_MB << 20)) /dev/urandom >"$SRC/big.bin"
for i in $(seq 1 100); do head -c $((i * 997)) /dev/urandom >"$SRC/tree/a/f$i"; done
cp -a "$SRC" "$ROOT/pub/"

cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill -9 "$SERVER_PID" 2>/dev/null || true
  "$LAB" wan down >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$LAB" wan down >/dev/null 2>&1 || true
"$LAB" wan up --link delay-line --rtt 2ms --rate 2gbit --corrupt "$DAMAGE" >/dev/null

: >"$W/serve.log"
"$LAB" wan exec b -- "$HETCH" serve --root "$ROOT" --state-dir "$W/state" \
  --listen "$ADDR" 2>>"$W/serve.log" &
SERVER_PID=$!
for _ in $(seq 1 500); do
  grep -q "listening on" "$W/serve.log" && break
  sleep 0.02
done
FP=$(grep -o 'sha256:[0-9a-f]*' "$W/serve.log" | head -1)
export HETCH_TOKEN
HETCH_TOKEN=$(cat "$W/state/token")

json() { grep -o "\"$2\":[0-9.]*" "$1" | head -1 | cut -d: -f2; }

printf 'mode\trun\tdirection\texit\tseconds\tretried\ton_arrival\tread_back\trepaired\tpatch_bytes\treconnects\tidentical\trejoined\n' |
  tee "$OUT/runs.tsv"
bad=0
for mode in "${MODES[@]}"; do
  flags=()
  [ "$mode" = plain ] && flags=(--no-encrypt)
  for run in $(seq 1 "$RUNS"); do
    if [ $((run % 2)) = 1 ]; then
      dir=push
      rm -rf "$ROOT/dst"
      args=("$SRC" "hetch://$ADDR/dst/")
      dest="$ROOT/dst/src"
    else
      dir=pull
      rm -rf "$LOCAL/src"
      args=("hetch://$ADDR/pub/src" "$LOCAL/")
      dest="$LOCAL/src"
    fi
    rc=0
    start=$(date +%s.%N)
    "$LAB" wan exec a -- "$HETCH" cp -q --json --fingerprint "$FP" "${flags[@]}" \
      "${EXTRA[@]}" "${args[@]}" >"$W/cp.json" 2>"$W/cp.err" || rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    same=yes
    diff -rq "$SRC" "$dest" >/dev/null 2>&1 || same=no
    [ "$(find "$dest" -name '.*.hetch-part' -o -name '.*.hetch-journal' 2>/dev/null | wc -l)" = 0 ] || same=no
    if [ "$rc" != 0 ] || [ "$same" != yes ]; then
      bad=$((bad + 1))
      echo "damaged-link.sh: $mode run $run ($dir) exit $rc, identical $same: $(tail -3 "$W/cp.err")" >&2
    fi
    printf '%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$run" "$dir" "$rc" "$secs" \
      "$(json "$W/cp.json" retried_blocks)" "$(json "$W/cp.json" damaged_on_arrival)" \
      "$(json "$W/cp.json" failed_read_back)" "$(json "$W/cp.json" repaired_blocks)" \
      "$(json "$W/cp.json" patch_bytes)" "$(json "$W/cp.json" reconnects)" "$same" \
      "$(json "$W/cp.json" streams_rejoined)" |
      tee -a "$OUT/runs.tsv"
  done
done

echo "=== damaged-link.sh: $RUNS copies per mode at $DAMAGE of segments damaged each way ($(du -sh "$SRC" | cut -f1) each)"
awk -F'\t' 'NR > 1 {
    n[$1]++; ok[$1] += ($4 == 0 && $12 == "yes"); s[$1] += $5; r[$1] += $6; p[$1] += $9; c[$1] += $11; j[$1] += $13
  } END {
    for (m in n) printf "  %s: %d of %d identical; mean %.1f s, %.1f blocks re-sent, %.1f repaired from patches, %.1f sessions reopened, %.1f data streams joined again per copy\n",
      m, ok[m], n[m], s[m] / n[m], r[m] / n[m], p[m] / n[m], c[m] / n[m], j[m] / n[m]
  }' "$OUT/runs.tsv"
echo "  raw: $OUT/runs.tsv"
[ "$bad" = 0 ]
