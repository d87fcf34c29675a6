#!/usr/bin/env bash
# bench/integrity.sh: end-to-end integrity benchmark for hetch (issue 3). Reproduces, scaled
# to one small machine, the experiment of Liu et al., "Towards Optimizing Large-Scale Data
# Transfers with End-to-End Integrity Verification": sequential transfer-then-checksum vs
# file-level vs block-level pipelining of transfer and read-back checksum (block sizes,
# checksum threads), in a checksum-dominant (unthrottled loopback) and a transfer-dominant
# (--rate-limit 100M) case, on a uniform, an alternating big/small and a mixed dataset; it
# measures the paper's t and c and prints its Table I model beside the measurements. It
# also measures what default verification (blake3, --verify written) costs against
# --verify none. Every scheme is the same hetch binary with different flags; everything
# runs on this machine over 127.0.0.1, and the server it starts is stopped on exit.
#
# Usage: bench/integrity.sh [--runs N] [--quick] [--work DIR] [--no-build] [--only LIST]
#                           [--full-matrix] [--idle-wait S]
#   --runs N        repetitions of every point (default 3)
#   --quick         small datasets (1/16 of the full ones, block sizes scaled alike), for
#                   smoke-testing the script
#   --work DIR      datasets, destinations and logs, under DIR/integrity (default
#                   /var/tmp/hetch-bench); datasets are generated once and reused
#   --no-build      do not run `cargo build --release --bin hetch` (use target/release/hetch)
#   --only LIST     comma-separated subset: cases checksum,transfer,default and/or datasets
#                   uniform,alternating,mixed (a point runs when its case and its dataset
#                   are selected; a kind not named selects all of that kind). The md5sum
#                   calibration of c always runs.
#   --full-matrix   also run the points cut to fit the time budget: the transfer-dominant
#                   case on the uniform dataset, and the block-size and hash-thread sweeps
#                   in the transfer-dominant case (roughly doubles the run time)
#   --idle-wait S   before each timed run, wait up to S seconds (default 30; 0: never) for
#                   other processes to use < 25% of the CPUs (the machine may be shared)
#
# Output: bench/results/<date>-integrity.csv (one row per run) and <date>-integrity.md
# (the report, also printed on stdout); --quick writes <date>-integrity-quick.{csv,md},
# --only adds -partial and --full-matrix adds -fullmatrix, so smoke tests never overwrite
# a full run's results. Each run's hetch output and the report's metadata (meta.tsv) stay
# in WORK/integrity/logs/<time>/. Needs root (drop_caches). A full run with --runs 3 takes about
# 32 minutes on a 2-core machine with a ~1 GB/s disk (estimated from a quick run: 120
# timed runs), plus 1-2 minutes to generate the datasets (8.5 GB) the first time;
# --full-matrix roughly doubles that (about 65 minutes).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=integrity
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
RUNS=3
QUICK=0
WORK=/var/tmp/hetch-bench
BUILD=1
ONLY=""
FULL_MATRIX=0
IDLE_WAIT=30
ARGS_ORIG="$*"


while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#*=}; shift ;;
        --quick) QUICK=1; shift ;;
        --work) WORK=$2; shift 2 ;;
        --work=*) WORK=${1#*=}; shift ;;
        --no-build) BUILD=0; shift ;;
        --only) ONLY=$2; shift 2 ;;
        --only=*) ONLY=${1#*=}; shift ;;
        --full-matrix) FULL_MATRIX=1; shift ;;
        --idle-wait) IDLE_WAIT=$2; shift 2 ;;
        --idle-wait=*) IDLE_WAIT=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "integrity.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*|0) echo "integrity.sh: --runs needs a positive integer" >&2; exit 2 ;; esac
case "$IDLE_WAIT" in ''|*[!0-9]*) echo "integrity.sh: --idle-wait needs a number of seconds" >&2; exit 2 ;; esac
for tok in ${ONLY//,/ }; do
    case "$tok" in
        checksum|transfer|default|uniform|alternating|mixed) ;;
        *) echo "integrity.sh: --only: unknown '$tok' (checksum,transfer,default,uniform,alternating,mixed)" >&2; exit 2 ;;
    esac
done

# ---------------------------------------------------------------- scale
# The paper's datasets are 20 x 10 GB ("20-10GB") and 10 x (10 GB + 500 MB)
# ("10GB-500MB"); its t and c are per 500 MB. Everything here is scaled by 1/40 so that
# one paper "10 GB" file is 256 MiB and one 500 MB unit is UNIT = 256 MiB / 20 =
# 13421773 bytes (12.8 MiB); --quick scales by another 1/16 (16 MiB files).
MiB=$((1024 * 1024))
if [ "$QUICK" = 1 ]; then
    BIG=$((16 * MiB)); MODE=quick
    # block sizes scaled by 1/16 as well, so the quick run has the shape of the full one
    BLOCKS_MAIN="256K 1M 4M 16M"
    BLOCKS_MIXED="64K 256K 1M 2M"
else
    BIG=$((256 * MiB)); MODE=full
    BLOCKS_MAIN="4M 16M 64M 256M"
    BLOCKS_MIXED="1M 4M 16M 32M"
fi
UNIT=$(( (BIG + 10) / 20 ))        # the paper's 500 MB: 13421773 B (full), 838861 B (quick)
HT_BLOCK=${BLOCKS_MAIN%% *}        # block size of the --hash-threads sweep (hetch's default 4M)
HASH_THREADS_SWEEP="2 4"           # 1 is the block-size sweep's own point
RATE=100M                          # transfer-dominant case
CALIB_FILES=4                      # c: md5sum over the first 4 uniform files (80 units)
# Paper block size each of our block sizes stands for (scaled 1/40 and rounded to a power
# of two): 100MB -> 2.5 MiB ~ 4M, 500MB -> 12.8 MiB ~ 16M, 2GB -> 51.2 MiB ~ 64M; 1GB
# (25.6 MiB) has no point of its own, 256M is one block per big file (block = file).
# Mixed dataset (paper's real dataset used 50MB/100MB/500MB/1GB): 1M/4M/16M/32M.
PAPER_MAIN="100MB 500MB 2GB -"
PAPER_MIXED="50MB 100MB 500MB 1GB"

DATE=$(date +%Y-%m-%d)
RESULTS=$ROOT/bench/results
SUFFIX=integrity
[ "$QUICK" = 1 ] && SUFFIX=$SUFFIX-quick
[ "$FULL_MATRIX" = 1 ] && SUFFIX=$SUFFIX-fullmatrix
[ -n "$ONLY" ] && SUFFIX=$SUFFIX-partial
CSV=$RESULTS/$DATE-$SUFFIX.csv
MD=$RESULTS/$DATE-$SUFFIX.md
IWORK=$WORK/integrity
DATA=$IWORK/data/$MODE
DST=$IWORK/dst
LOGS=$IWORK/logs/$(date +%Y%m%d-%H%M%S)
RUNTMP=$(mktemp -d /tmp/hetch-integrity.XXXXXX)
META=$LOGS/meta.tsv   # kept with the logs: integrity_report.py --csv CSV --meta META regenerates the report
HETCH=$ROOT/target/release/hetch
T_START=$SECONDS

mkdir -p "$RESULTS" "$DATA" "$DST" "$LOGS"


# want CASE DATASET: is this point selected by --only?
want() {
    local c=$1 d=$2 cases="" sets="" tok
    [ -z "$ONLY" ] && return 0
    for tok in ${ONLY//,/ }; do
        case "$tok" in checksum|transfer|default) cases+=" $tok" ;; *) sets+=" $tok" ;; esac
    done
    { [ -z "$cases" ] || [[ " $cases " == *" $c "* ]]; } &&
        { [ -z "$sets" ] || [[ " $sets " == *" $d "* ]]; }
}

# ---------------------------------------------------------------- cleanup
PIDS=()
cleanup() {
    local rc=$?
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$RUNTMP"
    # destinations are scratch: do not leave gigabytes behind
    rm -rf "${DST:?}"/*
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

CSV_HEADER="case,dataset,point,scheme,block_size,hash_threads,run,seconds,hetch_seconds,bytes,MB/s,ok,busy_before_pct"
csv_row() {   # case dataset point scheme bs ht run seconds hetch_seconds bytes ok
    local mbs=""
    if [ "${11}" = 1 ] && [ -n "$8" ]; then
        mbs=$(awk -v b="${10}" -v s="$8" 'BEGIN { if (s > 0) printf "%.2f", b / s / 1e6 }')
    fi
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" \
        "$9" "${10}" "$mbs" "${11}" "$LAST_BUSY" >>"$CSV"
}

# ---------------------------------------------------------------- preflight
[ "$(id -u)" = 0 ] || log "warning: not root: caches cannot be dropped"
for t in python3 ss md5sum cargo findmnt; do
    command -v "$t" >/dev/null 2>&1 || die "missing $t"
done
[ "$CAN_DROP" = 1 ] || log "warning: /proc/sys/vm/drop_caches not writable: caches will NOT be dropped"

if [ "$BUILD" = 1 ]; then
    log "building: cargo build --release --bin hetch"
    (cd "$ROOT" && cargo build --release --bin hetch) >"$LOGS/build.log" 2>&1 \
        || { tail -n 30 "$LOGS/build.log" >&2; die "cargo build failed (log: $LOGS/build.log)"; }
fi
[ -x "$HETCH" ] || die "no $HETCH (build it, or drop --no-build)"
"$HETCH" cp --help | grep -q -- '--verify-schedule' \
    || die "$HETCH has no --verify-schedule: stale binary? (rebuild, or drop --no-build)"

echo "$CSV_HEADER" >"$CSV"
: >"$META"

# ---------------------------------------------------------------- datasets
# gen_dataset NAME: random files under $DATA/NAME, generated once (a .complete marker
# holding the spec; a different spec regenerates). File names sort in the order the
# paper's transfers moved them, since hetch walks a directory sorted by name.
dataset_spec() {   # prints "NAME SIZE" lines, in walk order
    python3 - "$1" "$BIG" "$UNIT" <<'PY'
import random, sys
name, big, unit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if name == "uniform":            # paper 20-10GB: 20 x 20 units
    files = [("%02d.bin" % i, big) for i in range(20)]
elif name == "alternating":      # paper 10GB-500MB: big then small, ten times
    files = []
    for i in range(10):
        files.append(("%02d-big.bin" % (2 * i), big))
        files.append(("%02d-small.bin" % (2 * i + 1), unit))
elif name == "mixed":
    # The paper's real (CMIP-3-like) dataset, scaled 1/40: sizes 10 MB .. 2.1 GB with a
    # third under 50 MB and a few over 2 GB -> in units of 500 MB: 0.02 .. 4.2 units.
    # 40 files: 14 log-spaced in [0.02, 0.1) units, 23 log-spaced in [0.1, 4] units,
    # 3 in (4, 4.2] units; shuffled with a fixed seed so big and small files interleave
    # as in a real tree. Full: 256 KiB .. 53.8 MiB, ~38 units (~490 MiB) in all.
    u = []
    u += [0.02 * (0.1 / 0.02) ** (i / 14) for i in range(14)]
    u += [0.1 * (4.0 / 0.1) ** (i / 22) for i in range(23)]
    u += [4.05, 4.1, 4.2]
    random.Random(3).shuffle(u)
    files = [("f%02d.bin" % i, int(round(x * unit))) for i, x in enumerate(u)]
else:
    sys.exit("unknown dataset " + name)
for n, s in files:
    print(n, s)
PY
}

gen_dataset() {
    local name=$1 dir=$DATA/$1 spec
    spec=$(dataset_spec "$name")
    if [ -d "$dir" ] && [ -f "$dir.complete" ] && [ "$(cat "$dir.complete")" = "$spec" ]; then
        return
    fi
    log "generating dataset $name in $dir ($(awk '{n++; s+=$2} END {printf "%d files, %.0f MiB", n, s/1048576}' <<<"$spec"))"
    rm -rf "$dir" "$dir.tmp" "$dir.complete"
    mkdir -p "$dir.tmp"
    printf '%s\n' "$spec" >"$RUNTMP/spec.$name"
    python3 - "$dir.tmp" "$RUNTMP/spec.$name" <<'PY'
import os, sys
d = sys.argv[1]
for line in open(sys.argv[2]):
    name, size = line.split()
    left = int(size)
    with open(os.path.join(d, name), "wb") as f:
        while left > 0:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n
PY
    mv "$dir.tmp" "$dir"
    printf '%s\n' "$spec" >"$dir.complete"
}

DATASETS="uniform alternating mixed"
declare -A DS_FILES DS_BYTES
for ds in $DATASETS; do
    gen_dataset "$ds"
    read -r n b < <(count_tree "$DATA/$ds")
    DS_FILES[$ds]=$n
    DS_BYTES[$ds]=$b
    meta "ds.$ds.sizes" "$(find "$DATA/$ds" -type f -printf '%f %s\n' | sort | awk '{printf "%s%s", (NR > 1 ? " " : ""), $2}')"
    meta "ds.$ds.files" "$n"
    meta "ds.$ds.bytes" "$b"
done
sync

# ---------------------------------------------------------------- server
HETCH_PORT="" HETCH_FP="" HETCH_PID="" HETCH_TOK=""
HETCH_STATE=$WORK/hetch-state
start_hetch() {   # start_hetch ROOT: a hetch server (defaults) on a spare port
    local root=$1 log=$LOGS/hetch-serve.log i
    mkdir -p "$root" "$HETCH_STATE"
    HETCH_PORT=$(free_port)
    "$HETCH" serve --root "$root" --listen "127.0.0.1:$HETCH_PORT" --state-dir "$HETCH_STATE" 2>"$log" &
    HETCH_PID=$!
    PIDS+=("$HETCH_PID")
    for i in $(seq 1 200); do
        grep -q 'token in' "$log" && break
        kill -0 "$HETCH_PID" 2>/dev/null || { cat "$log" >&2; die "hetch serve exited"; }
        sleep 0.05
    done
    HETCH_FP=$(serve_fingerprint "$log")
    HETCH_TOK=$(serve_token "$log")
    [ -n "$HETCH_FP" ] && [ -n "$HETCH_TOK" ] || { cat "$log" >&2; die "could not read fingerprint/token from hetch serve"; }
}

hetch_push() {   # hetch_push [FLAGS...] SRC REMOTE_PATH
    local n=$# src=${*: -2:1} rpath=${*: -1}
    local flags=("${@:1:n-2}")
    HETCH_TOKEN=$HETCH_TOK "$HETCH" cp -q --json "${flags[@]}" --fingerprint "$HETCH_FP" \
        "$src" "hetch://127.0.0.1:$HETCH_PORT/$rpath"
}

# ---------------------------------------------------------------- points
# A point is "CASE DATASET SCHEME BLOCK HASH_THREADS":
#   case     cd: checksum-dominant in the paper's sense (unthrottled loopback)
#            td: transfer-dominant (--rate-limit 100M)
#            default: hetch's defaults (blake3, encrypted, --concurrency 4)
#   scheme   none (no verification: gives t), sequential, file, block (--verify written)
# Paper cases share: --checksum md5 (the paper's md5sum), --concurrency 1 (GridFTP moved
# the files one after the other), --no-encrypt (GridFTP's data channel is clear by
# default, and encryption would compete with the checksum for 2 CPUs); --hash-threads 1
# unless swept.
PAPER_FLAGS=(--checksum md5 --concurrency 1 --no-encrypt)

point_flags() {   # point_flags CASE SCHEME BLOCK HT: sets FLAGS
    local c=$1 s=$2 bs=$3 ht=$4
    FLAGS=()
    if [ "$c" = default ]; then
        if [ "$s" = none ]; then FLAGS=(--verify none); fi
        return 0
    fi
    # every scheme gets its block size explicitly (4M, hetch's default, except in the sweeps)
    FLAGS=("${PAPER_FLAGS[@]}" --hash-threads "$ht" --block-size "$bs")
    if [ "$c" = td ]; then FLAGS+=(--rate-limit "$RATE"); fi
    case "$s" in
        none) FLAGS+=(--verify none) ;;
        sequential|file|block) FLAGS+=(--verify written --verify-schedule "$s") ;;
    esac
}

point_label() {   # point_label CASE SCHEME BLOCK HT
    local c=$1 s=$2 bs=$3 ht=$4
    if [ "$c" = default ]; then
        if [ "$s" = none ]; then echo "blake3-none"; else echo "blake3-written"; fi
        return 0
    fi
    case "$s" in
        block) if [ "$ht" = 1 ]; then echo "block-$bs"; else echo "block-$bs-ht$ht"; fi ;;
        *) echo "$s" ;;
    esac
}

PLAN=()   # groups of points, "CASE DATASET SCHEME BLOCK HT", one per line per group
add_group() {   # add_group CASE DATASET: the points of one (case, dataset), if selected
    local c=$1 ds=$2 caseword g="" bs ht blocks
    case "$c" in cd) caseword=checksum ;; td) caseword=transfer ;; *) caseword=$c ;; esac
    want "$caseword" "$ds" || return 0
    if [ "$c" = default ]; then
        g+="default $ds written 4M 0"$'\n'"default $ds none 4M 0"$'\n'
        PLAN+=("$g")
        return
    fi
    blocks=$BLOCKS_MAIN
    [ "$ds" = mixed ] && blocks=$BLOCKS_MIXED
    # none, sequential and file run with hetch's default block size in both modes: the
    # read-back granularity changes their verify rate a lot (quick test: file-level at
    # 256K blocks verified at ~150 MB/s), and the schemes under test are hetch's defaults
    g+="$c $ds none 4M 1"$'\n'
    g+="$c $ds sequential 4M 1"$'\n'
    g+="$c $ds file 4M 1"$'\n'
    if [ "$c" = cd ] || [ "$FULL_MATRIX" = 1 ]; then
        for bs in $blocks; do g+="$c $ds block $bs 1"$'\n'; done
        for ht in $HASH_THREADS_SWEEP; do g+="$c $ds block $HT_BLOCK $ht"$'\n'; done
    else
        # cut (time budget): transfer-dominant runs the default block size only; with a
        # rate limit the block size barely matters (paper, Fig. 3)
        g+="$c $ds block $HT_BLOCK 1"$'\n'
    fi
    PLAN+=("$g")
}
for ds in $DATASETS; do add_group cd "$ds"; done
for ds in alternating mixed; do add_group td "$ds"; done
# cut (time budget): transfer-dominant on the uniform dataset costs ~12 min at 100 MB/s
# and the paper expects no difference there; --full-matrix runs it
if [ "$FULL_MATRIX" = 1 ]; then add_group td uniform; fi
add_group default uniform
[ "${#PLAN[@]}" -gt 0 ] || die "--only '$ONLY' selects no point"

TOTAL=0
for g in "${PLAN[@]}"; do TOTAL=$((TOTAL + $(grep -c . <<<"$g") * RUNS)); done
TOTAL=$((TOTAL + 3 * RUNS))   # calibration runs

# ---------------------------------------------------------------- metadata
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta command "bench/integrity.sh $ARGS_ORIG"
meta mode "$MODE"
meta full_matrix "$FULL_MATRIX"
meta only "$ONLY"
if [ "$BUILD" = 1 ]; then meta build "cargo build --release --bin hetch"; else meta build "not rebuilt (--no-build)"; fi
meta runs "$RUNS"
meta work "$IWORK ($(findmnt -n -o FSTYPE,SOURCE -T "$IWORK" 2>/dev/null | head -n 1 | tr -s ' '))"
meta caches_dropped "$CAN_DROP"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta git "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (work tree has uncommitted changes)')"
meta v.hetch "$("$HETCH" --version 2>&1)"
meta v.md5sum "$(md5sum --version 2>&1 | head -n 1)"
meta v.kernel "$(uname -r)"
meta v.python "$(python3 --version 2>&1)"
meta m.nproc "$(nproc)"
meta m.cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
meta m.free "$(free -g)"
meta unit_bytes "$UNIT"
meta big_bytes "$BIG"
meta rate "$RATE"
meta blocks.main "$BLOCKS_MAIN"
meta blocks.mixed "$BLOCKS_MIXED"
meta paper.main "$PAPER_MAIN"
meta paper.mixed "$PAPER_MIXED"
meta ht_block "$HT_BLOCK"
meta calib_files "$CALIB_FILES"
meta cmd.server "hetch serve --root $DST --listen 127.0.0.1:PORT --state-dir $HETCH_STATE   (server defaults; the client's --checksum, --verify, --verify-schedule, --hash-threads, --block-size and --rate-limit apply to the session)"
meta cmd.client "HETCH_TOKEN=\$(cat TOKEN) hetch cp -q --json FLAGS --fingerprint sha256:... $DATA/DATASET hetch://127.0.0.1:PORT/DATASET"
meta cmd.cd "FLAGS = ${PAPER_FLAGS[*]} --hash-threads H --block-size B {--verify none | --verify written --verify-schedule sequential|file|block}   (B = 4M, hetch's default, except in the block-size sweep and the hash-thread sweep at $HT_BLOCK)"
meta cmd.td "FLAGS = the same + --rate-limit $RATE"
meta cmd.default "FLAGS = (none) | --verify none   (blake3, TLS data streams, --concurrency 4, --hash-threads = nproc, --block-size 4M)"
meta cmd.c "sync; echo 3 > /proc/sys/vm/drop_caches; md5sum FIRST_${CALIB_FILES}_UNIFORM_FILES   (also warm: after cat; and hetch sum --checksum md5 --threads 1, cold)"

# ---------------------------------------------------------------- runs
DONE_RUNS=0
progress() {   # progress TAG SECONDS OK: one line with the share done and a rough ETA
    DONE_RUNS=$((DONE_RUNS + 1))
    local el=$((SECONDS - T_START)) eta
    eta=$(awk -v d="$DONE_RUNS" -v t="$TOTAL" -v e="$el" 'BEGIN { printf "%d", (t - d) * e / d / 60 + 0.5 }')
    log "[$DONE_RUNS/$TOTAL] $1: ${2}s ok=$3 (elapsed $((el / 60)) min, ~$eta min left)"
}

# run_point CASE DATASET SCHEME BLOCK HT RUN: destination removed, caches dropped, then
# timed: the push and a `sync` (so every scheme pays for getting its data onto the disk).
run_point() {
    local c=$1 ds=$2 s=$3 bs=$4 ht=$5 run=$6 label tag t0 t1 rc secs hsecs ok got
    label=$(point_label "$c" "$s" "$bs" "$ht")
    tag="$c.$ds.$label.$run"
    point_flags "$c" "$s" "$bs" "$ht"
    rm -rf "${DST:?}/$ds"
    drop_caches
    wait_idle
    t0=$(now)
    if hetch_push "${FLAGS[@]}" "$DATA/$ds" "$ds" >"$LOGS/$tag.out" 2>"$LOGS/$tag.err" </dev/null; then rc=0; else rc=$?; fi
    sync
    t1=$(now)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    hsecs=$(python3 -c 'import json,sys
try: print("%.4f" % json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["seconds"])
except Exception: print("")' "$LOGS/$tag.out")
    got=$(count_tree "$DST/$ds")
    ok=1
    if [ "$rc" != 0 ]; then
        ok=0; log "FAIL $tag: exit $rc: $(tail -n 3 "$LOGS/$tag.err" | tr '\n' ' ')"
    elif [ "$got" != "${DS_FILES[$ds]} ${DS_BYTES[$ds]}" ]; then
        ok=0; log "FAIL $tag: destination has '$got' (files bytes), expected '${DS_FILES[$ds]} ${DS_BYTES[$ds]}'"
    elif grep -q '"failed":[1-9]' "$LOGS/$tag.out"; then
        ok=0; log "FAIL $tag: hetch reports failed files: $(tail -n 1 "$LOGS/$tag.out")"
    fi
    [ "$ht" = 0 ] && ht=""
    csv_row "$c" "$ds" "$label" "$s" "$bs" "$ht" "$run" "$secs" "$hsecs" "${DS_BYTES[$ds]}" "$ok"
    progress "$tag" "$secs" "$ok"
    rm -rf "${DST:?}/$ds"
}

# c, the paper's checksum time per 500 MB: md5sum of files read from disk (cold cache),
# scaled to one unit by the report. Warm md5sum (CPU only) and hetch's own md5 (hetch sum,
# one thread, cold) are recorded beside it to explain differences.
calibrate_c() {
    local files=() bytes run secs t0 t1 rc
    mapfile -t files < <(find "$DATA/uniform" -type f | sort | head -n "$CALIB_FILES")
    bytes=$(cat "${files[@]}" | wc -c)
    for run in $(seq 1 "$RUNS"); do
        for what in md5sum-cold md5sum-warm hetch-sum-cold; do
            if [ "$what" = md5sum-warm ]; then sync; cat "${files[@]}" >/dev/null; else drop_caches; fi
            wait_idle
            t0=$(now)
            case "$what" in
                md5sum-*) if md5sum "${files[@]}" >"$LOGS/calib.$what.$run.out" 2>&1; then rc=0; else rc=$?; fi ;;
                hetch-sum-cold) if "$HETCH" sum --checksum md5 --threads 1 "${files[@]}" >"$LOGS/calib.$what.$run.out" 2>&1; then rc=0; else rc=$?; fi ;;
            esac
            t1=$(now)
            secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
            [ "$rc" = 0 ] || log "FAIL calib.$what.$run: exit $rc"
            csv_row calib uniform "$what" "$what" "" "1" "$run" "$secs" "" "$bytes" "$([ "$rc" = 0 ] && echo 1 || echo 0)"
            progress "calib.$what.$run" "$secs" "$([ "$rc" = 0 ] && echo 1 || echo 0)"
        done
    done
    # the two must agree, or the calibration hashed something else
    if ! diff -q <(awk '{print $1}' "$LOGS/calib.md5sum-cold.1.out") \
                 <(awk '{print $1}' "$LOGS/calib.hetch-sum-cold.1.out") >/dev/null; then
        log "warning: hetch sum --checksum md5 and md5sum disagree (see $LOGS/calib.*.1.out)"
    fi
}

log "mode $MODE, $RUNS run(s) per point, $TOTAL timed runs; logs in $LOGS"
start_hetch "$DST"
# One untimed push first: the first writes after the datasets were generated (or after a
# long pause) ran up to 2x slower in testing, which would bias whichever point runs first.
log "warm-up push (not timed)"
point_flags cd block "$HT_BLOCK" 1
hetch_push "${FLAGS[@]}" "$DATA/mixed" warmup >"$LOGS/warmup.out" 2>"$LOGS/warmup.err" </dev/null \
    || log "warning: warm-up push failed: $(tail -n 2 "$LOGS/warmup.err" | tr '\n' ' ')"
rm -rf "${DST:?}/warmup"

log "== c: md5sum of the first $CALIB_FILES uniform files, caches dropped"
calibrate_c

for g in "${PLAN[@]}"; do
    read -r c ds _ <<<"$g"
    log "== $c / $ds: $(grep -c . <<<"$g") points x $RUNS runs (runs interleaved: run 1 of every point, then run 2, ...)"
    for run in $(seq 1 "$RUNS"); do
        while read -r c ds s bs ht; do
            [ -n "$c" ] || continue
            run_point "$c" "$ds" "$s" "$bs" "$ht" "$run"
        done <<<"$g"
    done
done

# ---------------------------------------------------------------- report
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"
meta idle_wait "$IDLE_WAIT s max per run; waited ${IDLE_WAITED} s in all; $BUSY_RUNS runs started while other processes used >= 25% CPU"
meta elapsed "$(( (SECONDS - T_START) / 60 )) min $(( (SECONDS - T_START) % 60 )) s"
log "results: $CSV"
python3 "$ROOT/bench/integrity_report.py" --csv "$CSV" --meta "$META" --csv-link "$(basename "$CSV")" >"$MD"
cat "$MD"
log "report: $MD (elapsed $(( (SECONDS - T_START) / 60 )) min $(( (SECONDS - T_START) % 60 )) s)"
