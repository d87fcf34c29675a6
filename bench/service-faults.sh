#!/usr/bin/env bash
# Fault campaign for the transfer service: RUNS jobs (default 12), each on a fresh
# service (state directory and job database: SQLite, or one PostgreSQL database per
# run), one destination `hetch serve` node on 127.0.0.1 (a hetch:// destination, so
# split files go through the node's range sessions and their commit) whose root is a
# small tmpfs mounted for the run, and 3 workers. Each run's job is chosen at random
# (seeded): one 256 MiB random file cut in 16 block ranges plus a commit ("big"), 2,000
# small random files (1-30 KB, some 0755 or 0600, one empty) in a nested tree in units
# of 100 files ("small"), or a mirror (`job submit --sync`) of that tree onto a
# destination holding a copy of it with 250 changed files and 230 extra files and
# directories that must be deleted ("mirror"). Once the job's first units are claimed
# (`hetch job --json show`), plus a random 0-2 s, one fault chosen at random hits it:
#   kill_service  the service kill -9, restarted with the same state and database
#   pg_restart    PostgreSQL restarted (`pg_ctl restart -m fast`; postgres runs only)
#   kill_worker   one worker kill -9, restarted under the same name
#   stop_worker   one worker SIGSTOP for the lease + 3 s, then SIGCONT
#   kill_node     the destination node kill -9, restarted on the same port and key (at once;
#                 with LONG=1 after 60 s)
#   disk_full     the destination's tmpfs filled up for 8 s (LONG=1: 30 s), then freed
#   two           two of those at once
# Then the job is waited for, up to DEADLINE seconds (180) after which it counts as
# hung. Checks: no file under its final name at the destination differs from its
# source by content (SHA-256) or mode, nor (mirror) from what was there before the
# job (else: torn), even if the job failed; once the job is done: the trees identical
# (for the mirror: the extra files and directories deleted), no part file, journal or
# split file (.NAME.hetch-part, .NAME.hetch-journal, .NAME.hetch-split[.N]) left on
# the node, and the job's counters true (bytes_done == bytes, files_done == files).
# Outcome per run: identical, failed-cleanly (the job failed, nothing torn), torn,
# hung, or done-wrong (done, but one of the checks after it failed). One line per run
# goes to stdout and to $OUT/runs.tsv (with the fault, its moment in seconds after
# the submission, how long it lasted, the database, the job, the job's state, units
# tried again, seconds from submission to the end, and the job's error); the logs of
# a bad run are kept in $OUT/runN/; a summary ends the output. The exit code is
# non-zero if any run was torn, hung or done-wrong, or failed although its fault had
# ended within the retry window (the sum of the waits before a unit's 5 attempts).
#
# Short timings so that runs are fast: service --lease-secs 4 --retry-wait 1s
# --retry-wait-max 5s (retry window 1+3+5+5 = 14 s) --split-size 64M --range-size 16M
# --batch-files 100; node --stall-timeout 4s; workers --units 2; jobs rate-limited
# (RATE_BIG=40M, RATE_SMALL=8M, RATE_MIRROR=1M: 4-7 s each undisturbed) so faults
# land mid-job.
#
# Root only (tmpfs mounts, su postgres). Usage:
#   bash bench/service-faults.sh [RUNS] [SEED]
#   HETCH=path/to/hetch (default target/release/hetch)
#   DBS="sqlite postgres" (databases the runs alternate between)
#   PG_URL=postgres://USER@HOST:PORT (a server where the script may `createdb` one
#     database per run, as the `postgres` OS user; dropped after a good run). Without
#     it, and DBS naming postgres, the script initdb's and starts its own PostgreSQL 15
#     cluster (/usr/lib/postgresql/15/bin) under $OUT on a free loopback port, and
#     stops it at exit. For pg_restart on a PG_URL server the script needs its data
#     directory: PG_DATA, else `SHOW data_directory`; PG_LOG is the server's log file
#     after the restart (default PG_DATA/hetch-service-faults.log).
#   LONG=1 (the issue's outage lengths with the default timings: the service's 30 s
#     lease and its waits of 5 s tripled up to 2 min (185 s over 5 attempts), the
#     node's 60 s stall timeout; the destination full for 30 s, the node away 60 s
#     before it is started again, a worker stopped for 33 s; DEADLINE 600)
#   OUT=dir (default a new /tmp/hetch-service-faults.XXXXXX) DEADLINE=180
#   KEEP_LOGS=1 (keep every run's logs in $OUT/runN/, not only a bad run's)
#   FAULTS="kill_node disk_full" JOBS="big mirror" (draw among these only; FAULTS may
#     name pg_restart, which postgres runs only take, and `two`: alone, two of any)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${1:-12}"
SEED="${2:-23}"
HETCH="$(realpath "${HETCH:-target/release/hetch}")"
DBS="${DBS:-sqlite postgres}"
PG_URL="${PG_URL:-}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
DEADLINE="${DEADLINE:-}"
LONG="${LONG:-}"
RATE_BIG="${RATE_BIG:-40M}"
RATE_SMALL="${RATE_SMALL:-8M}"
RATE_MIRROR="${RATE_MIRROR:-1M}"
OUT="${OUT:-$(mktemp -d /tmp/hetch-service-faults.XXXXXX)}"
RANDOM="$SEED"
[ "$(id -u)" = 0 ] || { echo "service-faults.sh: needs root (tmpfs, su postgres)" >&2; exit 2; }
[ -x "$HETCH" ] || { echo "service-faults.sh: no hetch binary at $HETCH (cargo build --release -p hetch)" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(realpath "$OUT")"
chmod 755 "$OUT"   # the postgres user reaches its cluster (and nothing else) below it

DISK_MB=400              # the node's tmpfs
if [ -n "$LONG" ]; then
  # The issue's outages with the service's and the node's own timings: a 30 s lease,
  # waits of 5 s tripled up to 2 min, a 60 s stall timeout.
  LEASE=30
  STALL=60s
  RETRY_WINDOW=185       # 5 + 15 + 45 + 120 s
  DISK_HOLD=30           # the destination full for 30 s
  NODE_AWAY=60           # the node away for 60 s before it is started again
  SERVICE_FLAGS=(--split-size 64M --range-size 16M --batch-files 100)
  DEADLINE="${DEADLINE:-600}"
else
  LEASE=4
  STALL=4s
  RETRY_WINDOW=14        # 1 + 3 + 5 + 5 s: the waits between a unit's 5 attempts
  DISK_HOLD=8
  NODE_AWAY=0
  SERVICE_FLAGS=(--lease-secs "$LEASE" --retry-wait 1s --retry-wait-max 5s
    --split-size 64M --range-size 16M --batch-files 100)
  DEADLINE="${DEADLINE:-180}"
fi
DATA="$OUT/data"         # the service's --root: the datasets, made once
TEMPLATE="$OUT/mirror-before"   # what the mirror job's destination holds before it

log() { echo "service-faults.sh: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- datasets
make_datasets() {
  [ -f "$DATA/.made" ] && return
  rm -rf "$DATA" "$TEMPLATE"
  mkdir -p "$DATA/big" "$TEMPLATE"
  head -c $((256 << 20)) /dev/urandom >"$DATA/big/big.bin"
  python3 - "$DATA/small" "$TEMPLATE/small" "$SEED" <<'PY'
import os, random, shutil, sys
src, before, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
n = 0
def put(path, size, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    os.chmod(path, mode)
# 2,000 files: 10 top directories of 5 subdirectories of 39 files, plus 50 at the top.
for i in range(2000):
    if i < 50:
        rel = f"top{i}.dat"
    else:
        j = i - 50
        rel = f"d{j % 10}/e{(j // 10) % 5}/f{j}.dat"
    mode = 0o755 if i % 7 == 0 else 0o600 if i % 11 == 0 else 0o644
    put(os.path.join(src, rel), rnd.randint(1024, 30 * 1024), mode)
open(os.path.join(src, "d0", "empty"), "wb").close()
os.chmod(os.path.join(src, "d0", "empty"), 0o644)
# The mirror's destination before the job: a copy, 250 files changed (half the same
# size, half not; some with another mode), 200 extra files beside them and an extra
# tree of 30 files, all of which the mirror must delete.
shutil.copytree(src, before, symlinks=True)
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(before) for f in fs)
for k, p in enumerate(files[::8][:250]):
    size = os.path.getsize(p) if k % 2 == 0 else rnd.randint(1024, 30 * 1024)
    mode = 0o600 if k % 3 == 0 else os.stat(p).st_mode & 0o7777
    put(p, size, mode)
dirs = sorted({os.path.dirname(p) for p in files})
for k in range(200):
    put(os.path.join(rnd.choice(dirs), f"extra{k}.dat"), rnd.randint(0, 20 * 1024), 0o644)
for k in range(30):
    put(os.path.join(before, "zz-extra", f"s{k % 3}", f"x{k}.dat"), rnd.randint(0, 8 * 1024), 0o644)
os.makedirs(os.path.join(before, "zz-empty-extra"))
PY
  # Manifests (path -> mode, size, SHA-256) of the sources and of the mirror's "before".
  check_py manifest "$DATA/big" "$OUT/big.manifest"
  check_py manifest "$DATA/small" "$OUT/small.manifest"
  check_py manifest "$TEMPLATE/small" "$OUT/before.manifest"
  touch "$DATA/.made"
}

# check_py manifest DIR FILE | check_py check SRC_MANIFEST BEFORE_MANIFEST|- DEST NODE_ROOT TORN_LIST
# check prints "torn temp identical missing extra": files under a final name equal to
# neither their source nor (mirror) what was there before (torn), temporary files on
# the whole node, whether DEST is the source's tree exactly (files, modes, contents,
# directories), and the counts of source files missing and of entries not in the source.
check_py() {
  python3 - "$@" <<'PY'
import hashlib, json, os, stat, sys

def is_temp(name):
    return name.startswith(".") and (name.endswith(".hetch-part") or
        name.endswith(".hetch-journal") or ".hetch-split" in name)

def digest(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)

def walk(root, hashes):
    files, dirs, temps = {}, [], []
    for d, ds, fs in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs += [os.path.normpath(os.path.join(rel, x)) for x in ds]
        for f in fs:
            r = os.path.normpath(os.path.join(rel, f))
            if is_temp(f):
                temps.append(r)
                continue
            st = os.lstat(os.path.join(d, f))
            kind = "f" if stat.S_ISREG(st.st_mode) else "other"
            files[r] = [kind, st.st_mode & 0o7777, st.st_size,
                        digest(os.path.join(d, f)) if hashes and kind == "f" else None]
    return files, sorted(dirs), temps

cmd = sys.argv[1]
if cmd == "manifest":
    files, dirs, _ = walk(sys.argv[2], True)
    json.dump({"files": files, "dirs": dirs}, open(sys.argv[3], "w"))
    sys.exit()
src = json.load(open(sys.argv[2]))
before = json.load(open(sys.argv[3])) if sys.argv[3] != "-" else {"files": {}, "dirs": []}
dest, node, torn_list = sys.argv[4], sys.argv[5], sys.argv[6]
files, dirs, _ = walk(dest, False) if os.path.isdir(dest) else ({}, [], [])
_, _, temps = walk(node, False)

def same(entry, want, path):
    if want is None or entry[0] != want[0] or entry[1] != want[1] or entry[2] != want[2]:
        return False
    return entry[0] != "f" or digest(path) == want[3]

torn, exact = [], True
for r, e in files.items():
    p = os.path.join(dest, r)
    if same(e, src["files"].get(r), p):
        continue
    exact = False
    if same(e, before["files"].get(r), p):
        continue   # the mirror's destination as it was: not replaced (or deleted) yet
    torn.append(r)
missing = sum(1 for r in src["files"] if r not in files)
extra = sum(1 for r in files if r not in src["files"]) + len(set(dirs) - set(src["dirs"]))
if missing or extra or set(dirs) != set(src["dirs"]):
    exact = False
with open(torn_list, "w") as f:
    f.write("".join(t + "\n" for t in sorted(torn)))
print(len(torn), len(temps), "yes" if exact else "no", missing, extra)
PY
}

# ---------------------------------------------------------------- PostgreSQL
PG_OWN=""
PG_USER="" PG_HOST="" PG_PORT="" PG_DATA="${PG_DATA:-}" PG_LOG="${PG_LOG:-}" PG_OS_USER=postgres
as_pg() { su "$PG_OS_USER" -s /bin/sh -c "$1"; }
pg_setup() {
  case " $DBS " in *" postgres "*) ;; *) return ;; esac
  if [ -z "$PG_URL" ]; then
    local port; port=$(free_port)
    mkdir -p "$OUT/pg"; chown postgres "$OUT/pg"
    as_pg "'$PGBIN/initdb' -D '$OUT/pg/data' -U postgres --auth=trust -E UTF8 >'$OUT/pg/initdb.log' 2>&1"
    as_pg "'$PGBIN/pg_ctl' start -w -D '$OUT/pg/data' -l '$OUT/pg/log' \
      -o \"-p $port -k '$OUT/pg' -c listen_addresses=127.0.0.1\" >/dev/null"
    PG_OWN=1
    PG_URL="postgres://postgres@127.0.0.1:$port"
    PG_DATA="$OUT/pg/data"
    PG_LOG="${PG_LOG:-$OUT/pg/log}"
  fi
  read -r PG_USER PG_HOST PG_PORT < <(python3 -c 'import sys, urllib.parse as u
p = u.urlparse(sys.argv[1]); print(p.username or "postgres", p.hostname or "127.0.0.1", p.port or 5432)' "$PG_URL")
  if [ -z "$PG_DATA" ]; then
    PG_DATA=$(as_pg "'$PGBIN/psql' -h $PG_HOST -p $PG_PORT -U $PG_USER -Atc 'show data_directory' postgres" 2>/dev/null || true)
  fi
  if [ -n "$PG_DATA" ] && [ -d "$PG_DATA" ]; then
    PG_OS_USER=$(stat -c %U "$PG_DATA")
    PG_LOG="${PG_LOG:-$PG_DATA/hetch-service-faults.log}"
  else
    log "no data directory for $PG_URL (PG_DATA): no pg_restart faults"
    PG_DATA=""
  fi
}
pg_stop_own() {
  [ -n "$PG_OWN" ] && as_pg "'$PGBIN/pg_ctl' stop -m fast -w -D '$OUT/pg/data' >/dev/null 2>&1" || true
  PG_OWN=""
}
pg_restart() {
  as_pg "'$PGBIN/pg_ctl' restart -m fast -w -D '$PG_DATA' -l '$PG_LOG' >/dev/null 2>&1" ||
    log "pg_ctl restart failed"
}

# ---------------------------------------------------------------- one run's processes
R="" SVC_PID="" NODE_PID="" DB_URL="" DB_NAME="" SPORT="" NPORT="" MOUNTED="" FILL=""
declare -a WPID=()
STOPPED=""
ready() { # ready LOG TEXT PID: until LOG says TEXT (20 s), or PID died
  for _ in $(seq 1 400); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
SVC_STARTS=0
# start_again NAME READY_TEXT PID_VAR LOG_PREFIX COUNTER_VAR -- CMD...: starts CMD in the
# background (its log $R/LOG_PREFIX.N.log), up to 5 times until its log says READY_TEXT;
# its pid in PID_VAR.
start_again() {
  local name=$1 text=$2 pidvar=$3 prefix=$4 countvar=$5 lg; shift 6
  for _ in 1 2 3 4 5; do
    printf -v "$countvar" '%s' $(( ${!countvar} + 1 )); lg="$R/$prefix.${!countvar}.log"
    "$@" >"$lg" 2>&1 &
    printf -v "$pidvar" '%s' $!
    ready "$lg" "$text" "${!pidvar}" && return 0
    log "run $run: the $name did not start (see $lg); again"
    kill -9 "${!pidvar}" 2>/dev/null || true; wait "${!pidvar}" 2>/dev/null || true
    printf -v "$pidvar" '%s' ""
    sleep 1
  done
  return 1
}
service_start() {
  start_again service "listening on https://" SVC_PID service SVC_STARTS -- \
    env HETCH_CONFIG_DIR="$R/config" "$HETCH" service --root "$DATA" \
    --listen "127.0.0.1:$SPORT" --state-dir "$R/svc" --db "$DB_URL" "${SERVICE_FLAGS[@]}"
}
NODE_STARTS=0
node_start() {
  start_again node "token in" NODE_PID node NODE_STARTS -- \
    env HETCH_CONFIG_DIR="$R/config" "$HETCH" serve --root "$R/dst" \
    --listen "127.0.0.1:$NPORT" --state-dir "$R/node" --stall-timeout "$STALL"
}
WSTARTS=0
worker_start() { # worker_start I
  WSTARTS=$((WSTARTS + 1))
  HETCH_SERVICE_TOKEN="$(cat "$R/svc/worker-token")" HETCH_CONFIG_DIR="$R/config" \
    "$HETCH" worker --service "127.0.0.1:$SPORT" --root "$DATA" --name "w$1" --units 2 \
    --known-hosts "$R/kh" --token-file "$R/node/token" >"$R/worker$1.$WSTARTS.log" 2>&1 &
  WPID[$1]=$!
}
kill_pid() { [ -n "${1:-}" ] && { kill -CONT "$1" 2>/dev/null; kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; } || true; }
job() { HETCH_TOKEN="$(cat "$R/svc/token")" HETCH_CONFIG_DIR="$R/config" \
  "$HETCH" job --service "127.0.0.1:$SPORT" --known-hosts "$R/kh" "$@"; }

# Ends everything of the run: its processes, its tmpfs, its work directory, its
# database (kept, with the logs, for a bad run).
run_cleanup() {
  local keep="${1:-}" i
  kill_pid "$SVC_PID"; SVC_PID=""
  kill_pid "$NODE_PID"; NODE_PID=""
  for i in "${!WPID[@]}"; do kill_pid "${WPID[$i]}"; done
  WPID=(); STOPPED=""
  if [ -n "$MOUNTED" ]; then
    umount "$MOUNTED" 2>/dev/null || { sleep 0.5; umount -l "$MOUNTED" 2>/dev/null; } || true
    MOUNTED=""
  fi
  if [ -n "$R" ] && [ -d "$R" ]; then
    if [ -n "$keep" ]; then
      mkdir -p "$keep"
      cp "$R"/*.log "$R"/job*.json "$R"/torn.txt "$keep/" 2>/dev/null || true
    fi
    rm -rf "$R"
  fi
  if [ -n "$DB_NAME" ]; then
    if [ -z "$keep" ] || [ -n "${KEEP_LOGS:-}" ]; then
      as_pg "'$PGBIN/dropdb' -h $PG_HOST -p $PG_PORT -U $PG_USER --if-exists $DB_NAME" >/dev/null 2>&1 || true
    else
      log "run $run: database $DB_NAME kept"
    fi
    DB_NAME=""
  fi
  R=""
}
cleanup() {
  run_cleanup
  pg_stop_own
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- faults
KILLED=""
fault_begin() {
  case "$1" in
    kill_service) kill -9 "$SVC_PID" || true; wait "$SVC_PID" 2>/dev/null || true; SVC_PID="" ;;
    pg_restart) pg_restart ;;
    kill_worker)
      KILLED=$((1 + RANDOM % 3))
      [ "$KILLED" = "$STOPPED" ] && KILLED=$((KILLED % 3 + 1))
      kill -9 "${WPID[$KILLED]}" || true; wait "${WPID[$KILLED]}" 2>/dev/null || true ;;
    stop_worker)
      STOPPED=$((1 + RANDOM % 3))
      [ "$STOPPED" = "$KILLED" ] && STOPPED=$((STOPPED % 3 + 1))
      kill -STOP "${WPID[$STOPPED]}" || true ;;
    kill_node) kill -9 "$NODE_PID" || true; wait "$NODE_PID" 2>/dev/null || true; NODE_PID="" ;;
    disk_full)
      FILL="$R/dst/.fill"
      fallocate -l "$(( $(stat -f -c '%a * %S' "$R/dst") ))" "$FILL" 2>/dev/null ||
        dd if=/dev/zero of="$FILL" bs=1M status=none 2>/dev/null || true ;;
  esac
}
fault_hold() { # seconds the fault lasts before it is ended
  case "$1" in
    stop_worker) echo $((LEASE + 3)) ;;
    disk_full) echo "$DISK_HOLD" ;;
    kill_node) echo "$NODE_AWAY" ;;
    *) echo 0 ;;
  esac
}
fault_end() {
  case "$1" in
    kill_service) service_start || log "run $run: the service did not come back" ;;
    kill_worker) worker_start "$KILLED" ;;
    stop_worker) kill -CONT "${WPID[$STOPPED]}" 2>/dev/null || true; STOPPED="" ;;
    kill_node) node_start || log "run $run: the node did not come back" ;;
    disk_full) rm -f "$FILL" ;;
    pg_restart) ;;
  esac
}
# inject F1 [F2]: both begun at once, each ended after its hold; prints nothing.
inject() {
  local a="$1" b="${2:-}" ha hb
  fault_begin "$a"; [ -n "$b" ] && fault_begin "$b"
  ha=$(fault_hold "$a"); hb=0; [ -n "$b" ] && hb=$(fault_hold "$b")
  if [ -z "$b" ]; then sleep "$ha"; fault_end "$a"; return; fi
  if [ "$ha" -le "$hb" ]; then
    sleep "$ha"; fault_end "$a"; sleep $((hb - ha)); fault_end "$b"
  else
    sleep "$hb"; fault_end "$b"; sleep $((ha - hb)); fault_end "$a"
  fi
}

# The job's "state leased done bytes_done bytes files_done files retried" from $R/job.json.
JOB_STATE=unknown
look() {
  if job --json show "$JOB_ID" >"$R/job.new.json" 2>/dev/null; then
    mv "$R/job.new.json" "$R/job.json"
  else
    return 1
  fi
  read -r JOB_STATE J_LEASED J_DONE J_BD J_B J_FD J_F J_RETRIED < <(python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); u = j.get("units") or {}
print(j["state"], u.get("leased", 0), u.get("done", 0), j.get("bytes_done") or 0, j.get("bytes") or 0,
      j.get("files_done") or 0, j.get("files") or 0, u.get("retried", 0))' "$R/job.json")
}
job_error() {
  python3 -c '
import json, sys
e = json.load(open(sys.argv[1])).get("error") or "-"
print(" ".join(str(e).split())[:300])' "$R/job.json" 2>/dev/null || echo "-"
}
ended() { case "$JOB_STATE" in done | failed | cancelled) return 0 ;; *) return 1 ;; esac; }
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- the campaign
make_datasets
pg_setup
read -r -a DB_LIST <<<"$DBS"
read -r -a ASKED <<<"${FAULTS:-kill_service pg_restart kill_worker stop_worker kill_node disk_full two}"
read -r -a JOB_KINDS <<<"${JOBS:-big small mirror}"
printf 'run\tdb\tjob\tfault\tmoment_s\tfault_s\tstate\toutcome\ttorn\ttemp_left\tcounters\tretried\tsecs\terror\n' | tee "$OUT/runs.tsv"
bad=0
for run in $(seq 1 "$RUNS"); do
  db=${DB_LIST[$(((run - 1) % ${#DB_LIST[@]}))]}
  kind=${JOB_KINDS[$((RANDOM % ${#JOB_KINDS[@]}))]}
  # The singles this run may take (pg_restart: postgres only), and whether `two` may be drawn.
  faults=() two=0
  for f in "${ASKED[@]}"; do
    case "$f" in
      two) two=1 ;;
      pg_restart) [ "$db" = postgres ] && [ -n "$PG_DATA" ] && faults+=(pg_restart) ;;
      *) faults+=("$f") ;;
    esac
  done
  if [ "${#faults[@]}" = 0 ]; then   # FAULTS="two": two of any
    faults=(kill_service kill_worker stop_worker kill_node disk_full)
    [ "$db" = postgres ] && [ -n "$PG_DATA" ] && faults+=(pg_restart)
  fi
  [ "${#faults[@]}" -ge 2 ] || two=0
  pick=$((RANDOM % (${#faults[@]} + two)))
  [ "$two" = 1 ] && [ "${#ASKED[@]}" = 1 ] && pick=${#faults[@]}
  if [ "$pick" = "${#faults[@]}" ]; then
    f1=${faults[$((RANDOM % ${#faults[@]}))]}
    f2=$f1
    while [ "$f2" = "$f1" ]; do f2=${faults[$((RANDOM % ${#faults[@]}))]}; done
    fault="$f1+$f2"
  else
    f1=${faults[$pick]} f2=""
    fault=$f1
  fi
  wait_ms=$((RANDOM % 2001))

  R="$OUT/run.$run"
  rm -rf "$R"; mkdir -p "$R/dst" "$R/config"
  mount -t tmpfs -o size=${DISK_MB}m hetch-service-faults "$R/dst"; MOUNTED="$R/dst"
  SPORT=$(free_port); NPORT=$(free_port)
  while [ "$NPORT" = "$SPORT" ]; do NPORT=$(free_port); done
  if [ "$db" = postgres ]; then
    DB_NAME="hsf_$$_$run"
    as_pg "'$PGBIN/createdb' -h $PG_HOST -p $PG_PORT -U $PG_USER $DB_NAME"
    DB_URL="postgres://$PG_USER@$PG_HOST:$PG_PORT/$DB_NAME"
  else
    DB_URL="sqlite://$R/jobs.db"
  fi
  case "$kind" in
    big) src=big; rate=$RATE_BIG; before=-; sync=() ;;
    small) src=small; rate=$RATE_SMALL; before=-; sync=() ;;
    mirror) src=small; rate=$RATE_MIRROR; before="$OUT/before.manifest"; sync=(--sync)
      mkdir -p "$R/dst/d"; cp -a "$TEMPLATE/small" "$R/dst/d/" ;;
  esac
  SVC_STARTS=0 NODE_STARTS=0 WSTARTS=0 KILLED="" STOPPED=""
  node_start || { log "run $run: the node does not start"; exit 1; }
  service_start || { log "run $run: the service does not start"; exit 1; }
  {
    echo "127.0.0.1:$SPORT $(grep -o 'sha256:[0-9a-f]*' "$R/service.1.log" | head -1)"
    echo "127.0.0.1:$NPORT $(grep -o 'sha256:[0-9a-f]*' "$R/node.1.log" | head -1)"
  } >"$R/kh"
  for i in 1 2 3; do worker_start "$i"; done

  t0=$EPOCHREALTIME
  JOB_ID=$(job submit "${sync[@]}" --rate-limit "$rate" "$src" "hetch://127.0.0.1:$NPORT/d/" 2>"$R/submit.err" | head -n 1)
  [ -n "$JOB_ID" ] || { log "run $run: submit failed: $(cat "$R/submit.err")"; exit 1; }
  JOB_STATE=unknown

  # The moment: once units are claimed (or done), plus wait_ms.
  moment=- fault_s=- hit=""
  while [ "$(secs "$t0" | cut -d. -f1)" -lt 60 ]; do
    if look; then
      ended && break
      [ "$J_LEASED" -gt 0 ] || [ "$J_DONE" -gt 0 ] && break
    fi
    sleep 0.2
  done
  if ! ended; then
    sleep "$(awk -v m="$wait_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    look || true
  fi
  if ended; then
    fault="none($fault)"   # the job ended before the fault's moment
  else
    moment=$(secs "$t0"); tf=$EPOCHREALTIME
    inject "$f1" "$f2"
    fault_s=$(secs "$tf"); hit=1
  fi

  # Wait for the end (the service may be down for a moment: a failed look is no end).
  until ended; do
    [ "$(secs "$t0" | cut -d. -f1)" -ge "$DEADLINE" ] && break
    sleep 0.5
    look || true
  done
  took=$(secs "$t0")
  look || true
  cp "$R/job.json" "$R/job.final.json" 2>/dev/null || true

  torn=? temp=? same=no missing=? extra=?
  read -r torn temp same missing extra < <(check_py check "$OUT/$src.manifest" "$before" \
    "$R/dst/d/$src" "$R/dst" "$R/torn.txt") || log "run $run: the check failed"
  counters=-
  if [ "$JOB_STATE" = done ]; then
    if [ "$J_BD" = "$J_B" ] && [ "$J_FD" = "$J_F" ]; then counters=ok
    else counters="bytes:$J_BD/$J_B,files:$J_FD/$J_F"; fi
  fi
  if [ "$torn" != 0 ]; then outcome=torn
  elif ! ended; then outcome=hung
  elif [ "$JOB_STATE" = done ]; then
    if [ "$same" = yes ] && [ "$temp" = 0 ] && [ "$counters" = ok ]; then outcome=identical
    else outcome=done-wrong; fi
  else outcome=failed-cleanly; fi
  in_time=yes
  [ -n "$hit" ] && awk -v s="$fault_s" -v w="$RETRY_WINDOW" 'BEGIN { exit !(s > w) }' && in_time=no
  err=-; [ "$JOB_STATE" != done ] && err=$(job_error)
  [ "$outcome" = done-wrong ] && err="missing $missing, extra $extra, temporary $temp, counters $counters"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$db" "$kind" "$fault" \
    "$moment" "$fault_s" "$JOB_STATE" "$outcome" "$torn" "$temp" "$counters" "${J_RETRIED:--}" \
    "$took" "$err" | tee -a "$OUT/runs.tsv"
  isbad=""
  case "$outcome" in
    torn | hung | done-wrong) isbad=1 ;;
    failed-cleanly) [ "$in_time" = yes ] && isbad=1 ;;
  esac
  if [ -n "$isbad" ]; then
    bad=$((bad + 1))
    log "run $run: $outcome ($fault); logs in $OUT/run$run/"
    run_cleanup "$OUT/run$run"
  elif [ -n "${KEEP_LOGS:-}" ]; then
    run_cleanup "$OUT/run$run"
  else
    run_cleanup
  fi
  # Nothing of the run may be left running.
  if pgrep -f -- "$OUT/run.$run/" >/dev/null; then
    log "run $run: processes left: $(pgrep -f -- "$OUT/run.$run/" | tr '\n' ' ')"
    bad=$((bad + 1))
  fi
done

echo
echo "summary: $RUNS runs, $bad bad (torn, hung, done but wrong, or failed although the fault ended within ${RETRY_WINDOW} s)"
awk -F'\t' 'NR > 1 { o[$8]++; n++ } END { for (k in o) printf "  %-15s %3d\n", k, o[k] }' "$OUT/runs.tsv" | sort
echo "by fault (runs, identical, failed-cleanly, torn/hung/done-wrong; units tried again; mean seconds):"
awk -F'\t' 'NR > 1 { f = $4; n[f]++; s[f] += $13; r[f] += ($12 == "-" ? 0 : $12)
    if ($8 == "identical") ok[f]++; else if ($8 == "failed-cleanly") fc[f]++; else b[f]++ }
  END { for (f in n) printf "  %-28s %3d %3d %3d %3d   %4d  %6.1f\n", f, n[f], ok[f], fc[f], b[f], r[f], s[f] / n[f] }' "$OUT/runs.tsv" | sort
echo "by database and job:"
awk -F'\t' 'NR > 1 { k = $2 " " $3; n[k]++; if ($8 == "identical") ok[k]++ }
  END { for (k in n) printf "  %-18s %3d runs, %3d identical\n", k, n[k], ok[k] }' "$OUT/runs.tsv" | sort
echo "raw data: $OUT/runs.tsv"
[ "$bad" = 0 ]
