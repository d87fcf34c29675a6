#!/usr/bin/env bash
# bench/service-object.sh: one large file moved by a transfer-service job into a local
# MinIO by N workers, for each N given: the file cut in ranges of whole parts of one
# multipart upload the workers share, completed by the file's commit with its BLAKE3
# tagged on the object. Everything on this machine over loopback (service, workers and
# MinIO: both ends), so the CPUs are what is measured; every run checked by `hetch
# sum` of the object against the source's before it counts.
#
# Usage: bench/service-object.sh (SIZE=8G by default: run it on a quiet machine)
#   SIZE=512M NS="1 2" RUNS=1 UNITS=4 (units per worker)
#   SERVICE_ARGS="--range-size 256M" (more `hetch service` flags: how the file splits)
#   JOB_ARGS="--block-size 4M" (more `hetch job submit` flags)
#   WORK_DIR=/dev/shm (the source and MinIO's data: twice SIZE)
#   HETCH_BIN=target/release/hetch  HETCH_MINIO=target/tools/bin/minio
#     (bench/install-minio.sh builds it)
# Output: per run: N, seconds (the job's submission to its end, the service's own
# stamps), MB/s, ratio to the mean one-worker rate, and CPU seconds over the run: the
# machine's, and (with cgroups, as root) this run's own processes by role (the
# service, the workers, MinIO), which a build next door does not count.
set -euo pipefail
BENCH=service-object
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
size=${SIZE:-8G}; ns=${NS:-1 2}; runs=${RUNS:-1}; units=${UNITS:-4}
bin=$(realpath "${HETCH_BIN:-target/release/hetch}")
minio=$(realpath "${HETCH_MINIO:-${HETCH_TOOLS:-target/tools}/bin/minio}")
work=$(mktemp -d "${WORK_DIR:-/dev/shm}/service-object.XXXXXX")
cleanup() {
    pkill -f -- "$work/" 2>/dev/null || true; rm -rf "$work"
    sleep 0.5; roles_done
}
trap cleanup EXIT
roles_init "hetch-bench.$$" || echo "no cgroups here: CPU is the machine's busy time only" >&2
export HETCH_CONFIG_DIR="$work/config"
bytes=$(python3 -c "import sys;u={'K':1<<10,'M':1<<20,'G':1<<30};s=sys.argv[1];print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$size")
mkdir -p "$work/src/run" "$work/minio/bench"
head -c "$bytes" /dev/urandom > "$work/src/run/big.bin"
want=$("$bin" sum "$work/src/run/big.bin" | cut -d' ' -f1)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(port)
MINIO_ROOT_USER=hetchtest MINIO_ROOT_PASSWORD=hetchtest-secret MINIO_BROWSER=off MINIO_UPDATE=off \
    in_role minio "$minio" server --quiet --address "127.0.0.1:$mport" --console-address "127.0.0.1:$(port)" \
    "$work/minio" >"$work/minio.log" 2>&1 &
export AWS_ACCESS_KEY_ID=hetchtest AWS_SECRET_ACCESS_KEY=hetchtest-secret \
    AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$mport" \
    AWS_PROFILE=hetch-bench-none AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$mport/minio/health/live" && break; sleep 0.1; done
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
roles() { local r; for r in service workers minio; do printf '%s ' "$(role_cpu "$r")"; done; }
tck=$(getconf CLK_TCK)
wait_log() { for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.1; done; echo "no '$2' in $1" >&2; exit 1; }
state() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['state'])" "$d/job.json"; }
one() {   # one N: prints "N seconds MB/s CPU-s"
    local n=$1 i b0 b1 addr tok id got mine=()
    d="$work/run$1.$RANDOM"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    in_role service "$bin" service --root "$work/src" --listen 127.0.0.1:0 --state-dir "$d/svc" \
        --db "sqlite://$d/jobs.db" ${SERVICE_ARGS:-} 2>"$d/svc.log" &
    mine+=($!)
    wait_log "$d/svc.log" "listening on https://"
    addr=$(sed -n 's/.*listening on https:\/\///p' "$d/svc.log" | head -n 1)
    tok=$(cat "$d/svc/token")
    for i in $(seq "$n"); do
        HETCH_TOKEN=$tok in_role workers "$bin" worker --service "$addr" --root "$work/src" --name "w$i" \
            --units "$units" 2>"$d/w$i.log" &
        mine+=($!)
    done
    HETCH_TOKEN=$tok "$bin" job --service "$addr" ls >/dev/null 2>&1   # pins the key
    sleep 1
    b0=$(busy); r0=$(roles)
    # shellcheck disable=SC2086
    id=$(HETCH_TOKEN=$tok "$bin" job --service "$addr" submit ${JOB_ARGS:-} run "s3://bench/n$n/" | head -n 1)
    HETCH_TOKEN=$tok "$bin" job --service "$addr" wait "$id" >/dev/null 2>&1 || true
    b1=$(busy); r1=$(roles)
    HETCH_TOKEN=$tok "$bin" job --service "$addr" --json show "$id" >"$d/job.json"
    case $(state) in done) ;; *) echo "N=$n: job $(state)" >&2; cat "$d/job.json" >&2; exit 1 ;; esac
    got=$("$bin" sum "s3://bench/n$n/run/big.bin" | cut -d' ' -f1)
    [ "$got" = "$want" ] || { echo "N=$n: the object's BLAKE3 $got is not the source's $want" >&2; exit 1; }
    # By what they run on (their ids here are those of the shells in_role starts).
    pkill -f -- "$d/" 2>/dev/null || true; pkill -f -- "--service $addr " 2>/dev/null || true
    wait "${mine[@]}" 2>/dev/null || true
    python3 - "$d/job.json" "$n" "$b0" "$b1" "$tck" "$r0" "$r1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = (j["finished"] - j["created"]) / 1000
cpu = (float(sys.argv[4]) - float(sys.argv[3])) / float(sys.argv[5])
d = [float(b) - float(a) for a, b in zip(sys.argv[6].split(), sys.argv[7].split())]
print(sys.argv[2], f"{s:.2f}", f"{j['bytes_done'] / s / 1e6:.1f}", f"{cpu:.2f}", f"{sum(d):.2f}",
      *(f"{x:.2f}" for x in d))
PY
    rm -rf "$d" "$work/minio/bench/n$n"
}
echo "hetch service into MinIO: 1 x $size, $units units per worker, $(nproc) CPUs"
results=()
for _ in $(seq "$runs"); do
    for n in $ns; do results+=("$(one "$n")"); done
done
printf '%s\n' "${results[@]}" | awk '
    { n[NR]=$1; s[NR]=$2; r[NR]=$3; c[NR]=$4; o[NR]=$5; y[NR]=sprintf("svc %s wrk %s minio %s", $6, $7, $8)
      if ($1 == 1) { one += $3; k++ } }
    END { base = k ? one / k : 0
          for (i = 1; i <= NR; i++)
              printf "N=%s service %7.2f s  %7.1f MB/s  %5.2f x one worker (%4.2f of N x)  CPU-s machine %6.2f ours %6.2f (%s)\n",
                     n[i], s[i], r[i], base ? r[i] / base : 0, base ? r[i] / base / n[i] : 0, c[i], o[i], y[i] }'
