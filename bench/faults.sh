#!/usr/bin/env bash
# Fault campaign: RUNS copies (default 50) across the WAN testbed, each hit by one
# fault chosen at random (seeded): kill -9 of the client or of the server, SIGTERM or
# SIGSTOP of the server, a link cut longer than the stall timeout, a link that damages
# TCP payloads past their checksum, or a destination disk that fills up. Pushes and
# pulls alternate. After every fault, no file under its final name may differ from its
# source (no torn file); after recovery (the same `cp` recovering by itself, or the
# same command run again, as a user would after kill -9 or a full disk) the trees must
# be identical and no part file or journal may be left. One line per run goes to
# stdout and to $OUT/runs.tsv; a summary ends the output; the exit code is non-zero
# if any run broke one of those rules.
#
# Root only (network namespaces, tmpfs). Usage:
#   bash bench/faults.sh [RUNS] [SEED]        HETCH=path/to/hetch to choose the binary
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${1:-50}"
SEED="${2:-14}"
HETCH="$(realpath "${HETCH:-target/release/hetch}")"
# The testbed is hetch-lab's, beside the hetch binary under test.
LAB="$(realpath "${LAB:-$(dirname "$HETCH")/hetch-lab}")"
OUT="${OUT:-$(mktemp -d /tmp/hetch-faults.XXXXXX)}"
RANDOM="$SEED"
[ "$(id -u)" = 0 ] || { echo "faults.sh: needs root (network namespaces, tmpfs)" >&2; exit 2; }
[ -x "$HETCH" ] || { echo "faults.sh: no hetch binary at $HETCH (cargo build --release -p hetch -p hetch-lab)" >&2; exit 2; }
[ -x "$LAB" ] || { echo "faults.sh: no hetch-lab binary at $LAB (cargo build --release -p hetch-lab)" >&2; exit 2; }

STALL=4s       # both ends; faults that silence the link last longer than this
RATE=24M       # slow enough that every fault lands mid-transfer
ADDR=10.77.0.2:7878
W="$OUT/work"
SRC="$W/src"          # the dataset (host a's side)
ROOT="$W/root"        # what the server on host b serves
STATE="$W/state"
LOCAL="$W/local"      # a pull's destination on host a
mkdir -p "$W" "$ROOT" "$LOCAL"

log() { echo "faults.sh: $*" >&2; }

# The dataset: one large file, many small ones, a nested tree and an empty file.
make_dataset() {
  mkdir -p "$SRC/tree/a/b" "$SRC/tree/c"
  head -c $((72 << 20)) /dev/urandom >"$SRC/big.bin"
  for i in $(seq 1 150); do head -c $((RANDOM * 3)) /dev/urandom >"$SRC/tree/a/f$i"; done
  for i in $(seq 1 20); do head -c $((RANDOM * 40)) /dev/urandom >"$SRC/tree/a/b/g$i"; done
  : >"$SRC/tree/c/empty"
  # The server's copy, for pulls.
  mkdir -p "$ROOT/pub"
  cp -a "$SRC" "$ROOT/pub/"
}

LINK=""
link_up() { # clean | corrupt
  [ "$LINK" = "$1" ] && return
  "$LAB" wan down >/dev/null 2>&1 || true
  local extra=()
  [ "$1" = corrupt ] && extra=(--corrupt 0.03%)
  "$LAB" wan up --link delay-line --rtt 4ms --rate 1gbit "${extra[@]}" >/dev/null
  LINK="$1"
}

SERVER_PID=""
server_start() {
  : >"$W/serve.log"
  "$LAB" wan exec b -- "$HETCH" serve --root "$ROOT" --state-dir "$STATE" \
    --listen "$ADDR" --stall-timeout "$STALL" 2>>"$W/serve.log" &
  SERVER_PID=$!
  for _ in $(seq 1 500); do
    grep -q "listening on" "$W/serve.log" && break
    sleep 0.02
  done
  FP=$(grep -o 'sha256:[0-9a-f]*' "$W/serve.log" | head -1)
  export HETCH_TOKEN; HETCH_TOKEN=$(cat "$STATE/token")
}
server_stop() {
  [ -n "$SERVER_PID" ] && kill -9 "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# cp DIRECTION: push sends $SRC to the server's dst/, pull fetches pub/src into $LOCAL.
cp_args() {
  local args=(cp -q --json --fingerprint "$FP" --stall-timeout "$STALL"
    --rate-limit "$RATE" --block-size 1M)
  if [ "$1" = push ]; then
    args+=("$SRC" "hetch://$ADDR/dst/")
  else
    args+=("hetch://$ADDR/pub/src" "$LOCAL/")
  fi
  printf '%s\n' "${args[@]}"
}
CP_PID=""
cp_start() {
  mapfile -t a < <(cp_args "$1")
  "$LAB" wan exec a -- "$HETCH" "${a[@]}" >"$W/cp.json" 2>"$W/cp.err" &
  CP_PID=$!
}
# Not in $(...): a subshell cannot wait for this shell's child.
cp_wait() { FIRST=0; { wait "$CP_PID"; } 2>/dev/null || FIRST=$?; CP_PID=""; }
cp_run() { # the same command again, to the end
  mapfile -t a < <(cp_args "$1")
  local rc=0
  "$LAB" wan exec a -- "$HETCH" "${a[@]}" >"$W/cp2.json" 2>"$W/cp2.err" || rc=$?
  echo "$rc"
}

dest_of() { [ "$1" = push ] && echo "$ROOT/dst/src" || echo "$LOCAL/src"; }

# No file under its final name differs from its source: prints the torn ones.
torn_files() {
  local dst="$1"
  [ -d "$dst" ] || return 0
  (cd "$dst" && find . -type f ! -name '.*.hetch-part' ! -name '.*.hetch-journal' -print0) |
    while IFS= read -r -d '' f; do
      cmp -s "$SRC/$f" "$dst/$f" || echo "$f"
    done
}
temp_files() { find "$1" -name '.*.hetch-part' -o -name '.*.hetch-journal' 2>/dev/null | wc -l; }
reconnects() { grep -o '"reconnects":[0-9]*' "$1" 2>/dev/null | cut -d: -f2 || true; }

# Waits a random 0.5-2.5 s into the copy, or until the copy ended.
into_the_copy() {
  local ms=$((500 + RANDOM % 2000)) waited=0
  while [ $waited -lt $ms ] && kill -0 "$CP_PID" 2>/dev/null; do
    sleep 0.05; waited=$((waited + 50))
  done
}

SMALL=""
disk_small() { # the destination's directory on a tmpfs too small for the dataset
  local dir="$1"
  mkdir -p "$dir"
  mount -t tmpfs -o size=48m hetch-faults "$dir"
  SMALL="$dir"
}
disk_grow() { mount -o remount,size=512m "$SMALL"; }
disk_release() { [ -n "$SMALL" ] && umount "$SMALL" 2>/dev/null; SMALL=""; }

cleanup() {
  [ -n "$CP_PID" ] && kill -9 "$CP_PID" 2>/dev/null || true
  server_stop
  disk_release || true
  "$LAB" wan down >/dev/null 2>&1 || true
}
trap cleanup EXIT

make_dataset
FAULTS=(kill_client kill_server term_server stop_server cut corrupt disk_full)
printf 'run\tdirection\tfault\tfirst_exit\treconnects\ttorn_after_fault\tsecond_exit\tidentical\ttemp_left\n' | tee "$OUT/runs.tsv"
bad=0
for run in $(seq 1 "$RUNS"); do
  fault=${FAULTS[$((RANDOM % ${#FAULTS[@]}))]}
  dir=$([ $((run % 2)) = 1 ] && echo push || echo pull)
  dst=$(dest_of "$dir")
  rm -rf "$ROOT/dst" "$LOCAL/src"
  if [ "$fault" = corrupt ]; then link_up corrupt; else link_up clean; fi
  [ "$fault" = disk_full ] && disk_small "$(dirname "$dst")"
  server_start
  cp_start "$dir"
  into_the_copy
  case "$fault" in
    kill_client) kill -9 "$CP_PID" 2>/dev/null || true ;;
    kill_server) kill -9 "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; server_start ;;
    term_server) kill -TERM "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; server_start ;;
    stop_server) kill -STOP "$SERVER_PID"; sleep 6; kill -CONT "$SERVER_PID" ;;
    cut) "$LAB" wan cut >/dev/null 2>&1; sleep 6; "$LAB" wan restore >/dev/null 2>&1 ;;
    corrupt | disk_full) ;;
  esac
  cp_wait
  first=$FIRST
  rc_info=$(reconnects "$W/cp.json")
  torn=$(torn_files "$dst" | wc -l)
  second=-
  # What a user does after a failed run: fix the cause, run the same command again.
  if [ "$first" != 0 ]; then
    [ "$fault" = disk_full ] && disk_grow
    second=$(cp_run "$dir")
  fi
  same=yes
  diff -r "$SRC" "$dst" >/dev/null 2>&1 || same=no
  left=$(( $(temp_files "$dst") ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$dir" "$fault" "$first" "${rc_info:--}" "$torn" "$second" "$same" "$left" | tee -a "$OUT/runs.tsv"
  if [ "$torn" != 0 ] || [ "$same" != yes ] || [ "$left" != 0 ]; then
    bad=$((bad + 1))
    cp "$W/cp.err" "$OUT/run$run.cp.err" 2>/dev/null || true
    cp "$W/cp2.err" "$OUT/run$run.cp2.err" 2>/dev/null || true
    cp "$W/serve.log" "$OUT/run$run.serve.log" 2>/dev/null || true
  fi
  # Faults the same cp should recover from by itself must not need a second run.
  case "$fault" in
    kill_server | term_server | stop_server | cut | corrupt)
      if [ "$first" != 0 ]; then
        log "run $run ($fault): the cp did not recover by itself (exit $first)"
        cp "$W/cp.err" "$OUT/run$run.cp.err"; bad=$((bad + 1))
      fi ;;
  esac
  server_stop
  disk_release || true
done
echo
echo "summary: $RUNS runs, $bad broke a rule (torn file, difference, leftover temporary, or no self-recovery)"
awk -F'\t' 'NR > 1 { n[$3]++; if ($4 == 0) ok[$3]++; r[$3] += ($5 == "-" ? 0 : $5) }
  END { for (f in n) printf "  %-12s %3d runs, %3d finished by the first cp, %3d reconnects\n", f, n[f], ok[f], r[f] }' "$OUT/runs.tsv" | sort
echo "raw data: $OUT/runs.tsv"
[ "$bad" = 0 ]
