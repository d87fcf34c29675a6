#!/usr/bin/env bash
# bench/core.sh: core transfer benchmark for hetch (issue 2). A benchmark, not a test:
# it measures and reports, side by side in one run, hetch against the machine's limits
# (iperf3, fio) and against scp, rsync (daemon and over ssh), cp -r and a tar pipe, and
# the peak RSS of the hetch client and server. Everything runs on this machine over
# 127.0.0.1; every server it starts is stopped on exit.
#
# Usage: bench/core.sh [--runs N] [--quick] [--work DIR] [--no-build] [--only CASES]
#   --runs N      repetitions of every point (default 3)
#   --quick       small sizes, for smoke-testing the script
#   --work DIR    datasets, destinations and logs (default /var/tmp/hetch-bench);
#                 datasets are generated once and reused
#   --tmpfs DIR   tmpfs directory for the warm loopback destination (default /dev/shm)
#   --no-build    do not run `cargo build --release --bin hetch` (use target/release/hetch)
#   --hetch PATH  measure this hetch binary instead (implies --no-build): e.g. an older
#                 build, to compare two versions in alternating runs
#   --label NAME  add -NAME to the results' file names (to keep such runs apart)
#   --only CASES  comma-separated subset of: net,disk,warm-big,cold-big,cold-1M,cold-16K,rss
#   --idle-wait S before each timed run, wait up to S seconds (default 30; 0: never) for
#                 other processes to use < 25% of the CPUs (the machine may be shared)
#   --no-fresh-fs write cold-case destinations into WORK/dst itself. By default each cold
#                 run of 10,000 files or more writes into a new ext4 file system (journal on, as on a server) made
#                 for it in WORK/cold-fs.img on a loop device with direct I/O: on the
#                 work disk's file system (ext4 without a journal here) creating files
#                 soon after another tool deleted thousands costs each creation a scan
#                 of the recently deleted inodes, so whoever ran before decides the
#                 small-file numbers (a tar pipe of 20,000 files: 3.9 s fresh, 18-36 s
#                 right after such a deletion)
#
# Output: bench/results/<date>-core.csv (one row per run) and <date>-core.md (the
# report, also printed on stdout); --quick writes <date>-core-quick.{csv,md} and --only
# adds -partial, so smoke tests never overwrite a full run's results.
# Needs root (drop_caches, sshd) and the peers from bench/install-peers.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=core
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
RUNS=3
QUICK=0
WORK=/var/tmp/hetch-bench
TMPFS=/dev/shm
BUILD=1
HETCH_BIN=""
LABEL=""
ONLY=""
IDLE_WAIT=30
FRESH_FS=1
ARGS_ORIG="$*"


while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#*=}; shift ;;
        --quick) QUICK=1; shift ;;
        --work) WORK=$2; shift 2 ;;
        --work=*) WORK=${1#*=}; shift ;;
        --tmpfs) TMPFS=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --hetch) HETCH_BIN=$2; BUILD=0; shift 2 ;;
        --label) LABEL=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --only=*) ONLY=${1#*=}; shift ;;
        --idle-wait) IDLE_WAIT=$2; shift 2 ;;
        --idle-wait=*) IDLE_WAIT=${1#*=}; shift ;;
        --no-fresh-fs) FRESH_FS=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "core.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*|0) echo "core.sh: --runs needs a positive integer" >&2; exit 2 ;; esac

# ---------------------------------------------------------------- sizes
MiB=$((1024 * 1024))
if [ "$QUICK" = 1 ]; then
    BIG_MIB=128          # one big file
    M1_COUNT=100         # files of 1 MiB
    K16_COUNT=2000       # files of 16 KiB
    RSS_SMALL=2000       # files of 1 KiB, RSS point 1
    RSS_LARGE=20000      # files of 1 KiB, RSS point 2
    IPERF_T=2
    FIO_T=3
    FIO_SIZE=256M
    MODE=quick
else
    BIG_MIB=2048
    M1_COUNT=1000
    K16_COUNT=20000
    RSS_SMALL=20000
    RSS_LARGE=200000
    IPERF_T=5
    FIO_T=10
    FIO_SIZE=1G
    MODE=full
fi

DATE=$(date +%Y-%m-%d)
RESULTS=$ROOT/bench/results
SUFFIX=core; [ "$QUICK" = 1 ] && SUFFIX=core-quick; [ -n "$ONLY" ] && SUFFIX=$SUFFIX-partial
[ -n "$LABEL" ] && SUFFIX=$SUFFIX-$LABEL
CSV=$RESULTS/$DATE-$SUFFIX.csv
MD=$RESULTS/$DATE-$SUFFIX.md
DATA=$WORK/data
DST=$WORK/dst
LOGS=$WORK/logs/$(date +%Y%m%d-%H%M%S)
RUNTMP=$(mktemp -d /tmp/hetch-bench.XXXXXX)
WARM_DST=$TMPFS/hetch-bench-warm.$$
META=$RUNTMP/meta.tsv
HETCH=${HETCH_BIN:-$ROOT/target/release/hetch}

mkdir -p "$RESULTS" "$DATA" "$DST" "$LOGS"


want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# ---------------------------------------------------------------- cleanup
PIDS=()
cleanup() {
    local rc=$?
    set +e
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
    rm -rf "$RUNTMP" "$WARM_DST"
    drop_fresh_fs
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The cold cases' destination file system (see --no-fresh-fs): mounted at $DST/fs.
FRESH_IMG=$WORK/cold-fs.img FRESH_DEV=""
drop_fresh_fs() {
    if mountpoint -q "$DST/fs" 2>/dev/null; then umount "$DST/fs"; fi
    if [ -n "$FRESH_DEV" ]; then losetup -d "$FRESH_DEV" 2>/dev/null || true; FRESH_DEV=""; fi
    rm -f "$FRESH_IMG"
}
fresh_fs() {   # fresh_fs BYTES FILES: a new, empty ext4 at $DST/fs with room for BYTES,
               # for 10,000 files or more (only many deletions slow creation down; a loop
               # device would change how large files are written and read back)
    drop_fresh_fs
    mkdir -p "$DST/fs"
    [ "$FRESH_FS" = 1 ] && [ "$2" -ge 10000 ] || return 0
    local size=$(( 3 * $1 + (1 << 30) ))
    truncate -s "$size" "$FRESH_IMG"
    # Inode tables and journal written now, not by a background thread during the run.
    local inodes=$(( $2 > 100000 ? $2 + $2 / 4 : 131072 ))
    mkfs.ext4 -q -F -N "$inodes" -E lazy_itable_init=0,lazy_journal_init=0 "$FRESH_IMG" \
        || die "mkfs.ext4 $FRESH_IMG failed"
    FRESH_DEV=$(losetup --direct-io=on -f --show "$FRESH_IMG") || die "losetup $FRESH_IMG failed"
    mount "$FRESH_DEV" "$DST/fs" || die "mount $FRESH_DEV failed"
}

forget_pid() {
    local p=$1 out=() q
    for q in "${PIDS[@]}"; do [ "$q" = "$p" ] || out+=("$q"); done
    PIDS=("${out[@]}")
}

stop_pid() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    forget_pid "$1"
}

CSV_HEADER="case,tool,run,seconds,bytes,MB/s,ok,client_rss_kib,server_rss_kib,busy_before_pct,cpu_s"
csv_row() {   # case tool run seconds bytes ok client_rss server_rss
    local mbs=""
    if [ "$6" = 1 ] && [ -n "$4" ]; then
        mbs=$(awk -v b="$5" -v s="$4" 'BEGIN { if (s > 0) printf "%.2f", b / s / 1e6 }')
    fi
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$5" "$mbs" "$6" "${7:-}" "${8:-}" "$LAST_BUSY" "${LAST_CPU:-}" >>"$CSV"
    LAST_CPU=""
}

# CPU-seconds the whole machine has been busy (user, nice, system, irq, softirq, steal)
# since boot: the difference over a run counts both ends of a copy, its helpers
# (ssh, tar's two processes, kernel writeback) and nothing idle.
busy_cpu() { awk '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
LAST_CPU=""

# run_point CASE TOOL RUN MODE SRC DSTPATH FILES BYTES -- COMMAND...
#   MODE cold: destination removed, caches dropped, COMMAND + sync timed.
#   MODE warm: destination removed, source read into the page cache, COMMAND timed.
#   MODE rss:  destination removed and synced, COMMAND + sync timed.
# COMMAND's client RSS is taken when it is wrapped by `rss_wrap` (sets RSS_FILE).
RSS_FILE=""
LAST_OK=0
run_point() {
    local case=$1 tool=$2 run=$3 mode=$4 src=$5 dst=$6 files=$7 bytes=$8
    shift 9
    local tag="$case.$tool.$run" t0 t1 rc secs ok got rss=""
    rm -rf "$dst"
    case "$mode" in
        cold) drop_caches ;;
        warm) sync; find "$src" -type f -exec cat {} + >/dev/null ;;
        rss) sync ;;
    esac
    RSS_FILE=$RUNTMP/rss.$tag
    rm -f "$RSS_FILE"
    wait_idle
    local c0 c1
    c0=$(busy_cpu)
    t0=$(now)
    if "$@" >"$LOGS/$tag.out" 2>"$LOGS/$tag.err" </dev/null; then rc=0; else rc=$?; fi
    if [ "$mode" != warm ]; then sync; fi
    t1=$(now)
    c1=$(busy_cpu)
    LAST_CPU=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    got=$(count_tree "$dst")
    ok=1
    if [ "$rc" != 0 ]; then
        ok=0; log "FAIL $tag: exit $rc: $(tail -n 3 "$LOGS/$tag.err" | tr '\n' ' ')"
    elif [ "$got" != "$files $bytes" ]; then
        ok=0; log "FAIL $tag: destination has '$got' (files bytes), expected '$files $bytes'"
    fi
    if [ -s "$RSS_FILE" ]; then rss=$(tail -n 1 "$RSS_FILE"); fi
    LAST_OK=$ok
    local cpu=$LAST_CPU
    csv_row "$case" "$tool" "$run" "$secs" "$bytes" "$ok" "$rss" "${SERVER_RSS:-}"
    log "$tag: ${secs}s, ${cpu} CPU-s ($(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / s / 1e6 }') MB/s)${rss:+ client rss ${rss} KiB} ok=$ok"
}

rss_wrap() {
    if [ -n "$RSS_FILE" ]; then /usr/bin/time -f %M -o "$RSS_FILE" "$@"; else "$@"; fi
}

# ---------------------------------------------------------------- preflight
[ "$(id -u)" = 0 ] || log "warning: not root: caches cannot be dropped and sshd may fail"
for t in iperf3 fio rsync ssh scp /usr/sbin/sshd /usr/bin/time python3 ss tar cargo; do
    command -v "$t" >/dev/null 2>&1 || die "missing $t: run bench/install-peers.sh"
done
[ "$CAN_DROP" = 1 ] || log "warning: /proc/sys/vm/drop_caches not writable: caches will NOT be dropped"

if [ "$BUILD" = 1 ]; then
    log "building: cargo build --release --bin hetch"
    (cd "$ROOT" && cargo build --release --bin hetch) >"$LOGS/build.log" 2>&1 \
        || { tail -n 30 "$LOGS/build.log" >&2; die "cargo build failed (log: $LOGS/build.log)"; }
fi
[ -x "$HETCH" ] || die "no $HETCH (build it, or drop --no-build)"

echo "$CSV_HEADER" >"$CSV"
: >"$META"

# ---------------------------------------------------------------- metadata
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta command "bench/core.sh $ARGS_ORIG"
meta mode "$MODE"
if [ "$BUILD" = 1 ]; then meta build "cargo build --release --bin hetch"; else meta build "not rebuilt (--no-build)"; fi
meta runs "$RUNS"
meta work "$WORK ($(findmnt -n -o FSTYPE,SOURCE -T "$WORK" 2>/dev/null | head -n 1 | tr -s ' '))"
meta warm_dst "$TMPFS ($(findmnt -n -o FSTYPE -T "$TMPFS" 2>/dev/null | head -n 1))"
meta caches_dropped "$CAN_DROP"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta git "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (work tree has uncommitted changes)')"
meta v.hetch "$("$HETCH" --version 2>&1)"
meta v.iperf3 "$(iperf3 --version 2>&1 | head -n 1)"
meta v.rsync "$(rsync --version 2>&1 | head -n 1)"
meta v.ssh "$(ssh -V 2>&1)"
meta v.fio "$(fio --version 2>&1)"
meta v.tar "$(tar --version 2>&1 | head -n 1)"
meta v.cp "$(cp --version 2>&1 | head -n 1)"
meta v.kernel "$(uname -r)"
meta m.nproc "$(nproc)"
meta m.cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
meta m.free "$(free -g)"
meta size.big "1 file x ${BIG_MIB} MiB"
meta size.1M "${M1_COUNT} files x 1 MiB"
meta size.16K "${K16_COUNT} files x 16 KiB"
meta size.rss-small "${RSS_SMALL} files x 1 KiB"
meta size.rss-large "${RSS_LARGE} files x 1 KiB"
meta iperf_t "$IPERF_T"
meta fio_t "$FIO_T"

# ---------------------------------------------------------------- datasets
gen_files() {   # gen_files DIR COUNT SIZE: COUNT random files, 1000 per subdirectory
    local dir=$1 count=$2 size=$3
    if [ -f "$dir.complete" ] && [ -d "$dir" ]; then return; fi
    log "generating $count x $size B in $dir"
    rm -rf "$dir" "$dir.tmp" "$dir.complete"
    python3 - "$dir.tmp" "$count" "$size" <<'PY'
import os, sys
d, n, sz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = 1000
for i in range(n):
    sub = os.path.join(d, "d%04d" % (i // per))
    if i % per == 0:
        os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d.bin" % i), "wb") as f:
        f.write(os.urandom(sz))
PY
    mv "$dir.tmp" "$dir"
    touch "$dir.complete"
}

gen_big() {   # gen_big FILE MIB
    local f=$1 mib=$2
    if [ -f "$f.complete" ] && [ -f "$f" ]; then return; fi
    log "generating $f ($mib MiB)"
    rm -f "$f" "$f.complete"
    head -c $((mib * MiB)) /dev/urandom >"$f.tmp"
    mv "$f.tmp" "$f"
    touch "$f.complete"
}

BIG=$DATA/big-${BIG_MIB}M.bin
SET_1M=$DATA/files-${M1_COUNT}x1M
SET_16K=$DATA/files-${K16_COUNT}x16K
SET_RSS_S=$DATA/files-${RSS_SMALL}x1K
SET_RSS_L=$DATA/files-${RSS_LARGE}x1K
if want warm-big || want cold-big; then gen_big "$BIG" "$BIG_MIB"; fi
if want cold-1M; then gen_files "$SET_1M" "$M1_COUNT" $MiB; fi
if want cold-16K; then gen_files "$SET_16K" "$K16_COUNT" 16384; fi
if want rss; then
    gen_files "$SET_RSS_S" "$RSS_SMALL" 1024
    gen_files "$SET_RSS_L" "$RSS_LARGE" 1024
fi

# ---------------------------------------------------------------- servers
HETCH_PORT="" HETCH_FP="" HETCH_PID="" HETCH_TOK=""
HETCH_STATE=$WORK/hetch-state
start_hetch() {   # start_hetch ROOT: a fresh hetch server on a spare port
    local root=$1 log=$LOGS/hetch-serve.$RANDOM.log i
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
stop_hetch() { stop_pid "$HETCH_PID"; HETCH_PID=""; }
server_hwm() { awk '$1 == "VmHWM:" { print $2 }' "/proc/$1/status" 2>/dev/null; }

hetch_push() {   # hetch_push [FLAGS...] SRC REMOTE_PATH
    local n=$# src=${*: -2:1} rpath=${*: -1}
    local flags=("${@:1:n-2}")
    HETCH_TOKEN=$HETCH_TOK rss_wrap "$HETCH" cp -q --json "${flags[@]}" --fingerprint "$HETCH_FP" \
        "$src" "hetch://127.0.0.1:$HETCH_PORT/$rpath"
}
HETCH_CMD='HETCH_TOKEN=$(cat TOKEN) hetch cp -q --json --fingerprint sha256:... SRC hetch://127.0.0.1:PORT/NAME   (server: hetch serve --root DST --listen 127.0.0.1:PORT --state-dir STATE)'
HETCH_PLAIN_CMD=${HETCH_CMD/--json/--json --no-encrypt --verify none}

SSH_DIR=$RUNTMP/ssh SSH_PORT="" SSH_PID=""
SSH_OPTS=()
start_sshd() {
    mkdir -p "$SSH_DIR" /run/sshd
    chmod 700 "$SSH_DIR"
    ssh-keygen -q -t ed25519 -N '' -f "$SSH_DIR/host_ed25519" </dev/null
    ssh-keygen -q -t ed25519 -N '' -f "$SSH_DIR/id_ed25519" </dev/null
    cp "$SSH_DIR/id_ed25519.pub" "$SSH_DIR/authorized_keys"
    SSH_PORT=$(free_port)
    cat >"$SSH_DIR/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $SSH_DIR/host_ed25519
PidFile $SSH_DIR/sshd.pid
AuthorizedKeysFile $SSH_DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel ERROR
EOF
    /usr/sbin/sshd -D -e -f "$SSH_DIR/sshd_config" 2>"$LOGS/sshd.log" &
    SSH_PID=$!
    PIDS+=("$SSH_PID")
    wait_port "$SSH_PORT" "$SSH_PID" || { cat "$LOGS/sshd.log" >&2; die "sshd did not start"; }
    SSH_OPTS=(-i "$SSH_DIR/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
              -o BatchMode=yes -o LogLevel=ERROR)
    ssh "${SSH_OPTS[@]}" -p "$SSH_PORT" root@127.0.0.1 true </dev/null \
        || { cat "$LOGS/sshd.log" >&2; die "cannot log in to the benchmark sshd"; }
    meta ssh.cipher "$(ssh "${SSH_OPTS[@]}" -v -p "$SSH_PORT" root@127.0.0.1 true </dev/null 2>&1 \
        | sed -n 's/.*kex: client->server cipher: \([^ ]*\) .*/\1/p' | head -n 1)"
}
do_scp() { scp -r -q "${SSH_OPTS[@]}" -P "$SSH_PORT" "$1" "root@127.0.0.1:$2"; }
SCP_CMD='scp -r -q -i KEY -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -P PORT SRC root@127.0.0.1:DST/NAME   (sshd -D -f TMP/sshd_config on a spare port)'
do_rsync_ssh() {
    local e="ssh -i $SSH_DIR/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -p $SSH_PORT"
    rsync -a -e "$e" "$1/" "root@127.0.0.1:$2/"
}
do_rsync_ssh_file() {
    local e="ssh -i $SSH_DIR/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -p $SSH_PORT"
    rsync -a -e "$e" "$1" "root@127.0.0.1:$2"
}
RSYNC_SSH_CMD='rsync -a -e "ssh -i KEY -o StrictHostKeyChecking=no ... -p PORT" SRC/ root@127.0.0.1:DST/NAME/'

RSYNCD_DIR=$RUNTMP/rsyncd RSYNCD_PORT="" RSYNCD_PID=""
start_rsyncd() {   # start_rsyncd PATH: module "bench" at PATH
    mkdir -p "$RSYNCD_DIR"
    RSYNCD_PORT=$(free_port)
    cat >"$RSYNCD_DIR/rsyncd.conf" <<EOF
pid file = $RSYNCD_DIR/rsyncd.pid
use chroot = no
[bench]
    path = $1
    read only = false
    uid = root
    gid = root
EOF
    rsync --daemon --no-detach --config="$RSYNCD_DIR/rsyncd.conf" --port="$RSYNCD_PORT" \
        --address=127.0.0.1 --log-file="$LOGS/rsyncd.log" &
    RSYNCD_PID=$!
    PIDS+=("$RSYNCD_PID")
    wait_port "$RSYNCD_PORT" "$RSYNCD_PID" || die "rsync daemon did not start"
}
do_rsyncd() {   # do_rsyncd SRC NAME (NAME under the module)
    if [ -d "$1" ]; then
        rsync -a "$1/" "rsync://127.0.0.1:$RSYNCD_PORT/bench/$2/"
    else
        rsync -a "$1" "rsync://127.0.0.1:$RSYNCD_PORT/bench/$2"
    fi
}
RSYNCD_CMD='rsync -a SRC[/] rsync://127.0.0.1:PORT/bench/NAME[/]   (rsync --daemon --no-detach --config=TMP/rsyncd.conf --port=PORT --address=127.0.0.1)'
GRIDFTP_DIR=$RUNTMP/gridftp GRIDFTP_PORT="" GRIDFTP_PID=""
start_gridftp() {   # anonymous, clear text: as nobody keeping CAP_DAC_OVERRIDE (as root it refuses anonymous root sessions)
    mkdir -p "$GRIDFTP_DIR"
    : >"$GRIDFTP_DIR/gridftp.conf"
    GRIDFTP_PORT=$(free_port)
    GLOBUS_USAGE_OPTOUT=1 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        --inh-caps=+dac_override --ambient-caps=+dac_override -- \
        globus-gridftp-server -c "$GRIDFTP_DIR/gridftp.conf" -aa -p "$GRIDFTP_PORT" \
        -control-interface 127.0.0.1 -data-interface 127.0.0.1 -d ERROR,WARN \
        >"$LOGS/gridftp.log" 2>&1 &
    GRIDFTP_PID=$!
    PIDS+=("$GRIDFTP_PID")
    wait_port "$GRIDFTP_PORT" "$GRIDFTP_PID" || { cat "$LOGS/gridftp.log" >&2; die "globus-gridftp-server did not start"; }
    meta v.gridftp "$(globus-gridftp-server -version 2>&1 | head -n 1); $(globus-url-copy -version 2>&1 | head -n 1)"
}
do_gridftp() {   # do_gridftp SRC DST: a file or a tree (-r, contents of SRC/ into DST/)
    if [ -d "$1" ]; then
        mkdir -p "$2"
        GLOBUS_USAGE_OPTOUT=1 globus-url-copy -p 4 -cc 4 -fast -cd -r "file://$1/" "ftp://127.0.0.1:$GRIDFTP_PORT$2/"
    else
        GLOBUS_USAGE_OPTOUT=1 globus-url-copy -p 4 -cc 4 -fast -cd "file://$1" "ftp://127.0.0.1:$GRIDFTP_PORT$2"
    fi
}
GRIDFTP_CMD='globus-url-copy -p 4 -cc 4 -fast -cd [-r] file://SRC[/] ftp://127.0.0.1:PORT/DST[/]   (globus-gridftp-server -aa, anonymous, clear text, no checksum; run as nobody with CAP_DAC_OVERRIDE)'
do_cp() { cp -r "$1" "$2"; }
CP_CMD='cp -r SRC DST/NAME'
do_tar() { mkdir -p "$2" && (cd "$1" && tar -cf - .) | (cd "$2" && tar -xf -); }
do_tar_file() {   # one file: into DST's directory under DST's name
    mkdir -p "$2.tar-tmp" && (cd "$(dirname "$1")" && tar -cf - "$(basename "$1")") | (cd "$2.tar-tmp" && tar -xf -) \
        && mv "$2.tar-tmp/$(basename "$1")" "$2" && rmdir "$2.tar-tmp"
}
TAR_CMD='mkdir DST/NAME && (cd SRC && tar -cf - .) | (cd DST/NAME && tar -xf -)'

# ---------------------------------------------------------------- 1. limits
if want net; then
    log "== net: iperf3 single stream, ${IPERF_T}s"
    IPERF_PORT=$(free_port)
    iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$LOGS/iperf3-server.log" 2>&1 &
    IPERF_PID=$!
    PIDS+=("$IPERF_PID")
    wait_port "$IPERF_PORT" "$IPERF_PID" || die "iperf3 server did not start"
    meta cmd.iperf3 "iperf3 -c 127.0.0.1 -p PORT -t $IPERF_T -J   (server: iperf3 -s -B 127.0.0.1 -p PORT)"
    for run in $(seq 1 "$RUNS"); do
        j=$LOGS/iperf3.$run.json
        wait_idle
        if iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t "$IPERF_T" -J >"$j" 2>"$LOGS/iperf3.$run.err"; then
            read -r secs bytes < <(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]["sum_received"]; print("%.4f %d" % (e["seconds"], e["bytes"]))' "$j")
            csv_row net iperf3 "$run" "$secs" "$bytes" 1
            log "net.iperf3.$run: $(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.2f Gbit/s", b * 8 / s / 1e9 }')"
        else
            csv_row net iperf3 "$run" "" 0 0
            log "FAIL net.iperf3.$run"
        fi
        sleep 1
    done
    stop_pid "$IPERF_PID"
fi

if want disk; then
    log "== disk: fio seq read, seq write, copy (read+write at once), direct=1, ${FIO_T}s each"
    FIO_DIR=$WORK/fio
    mkdir -p "$FIO_DIR"
    FIO_COMMON="--bs=1M --size=$FIO_SIZE --direct=1 --ioengine=libaio --iodepth=16 --runtime=$FIO_T --time_based --output-format=json"
    meta cmd.fio-seqread "fio --name=seqread --filename=WORK/fio/read.dat --rw=read $FIO_COMMON"
    meta cmd.fio-seqwrite "fio --name=seqwrite --filename=WORK/fio/write.dat --rw=write $FIO_COMMON"
    meta cmd.fio-copy "fio $FIO_COMMON --name=read --filename=WORK/fio/read.dat --rw=read --flow_id=1 --flow=1 --name=write --filename=WORK/fio/write.dat --rw=write --flow_id=1 --flow=1   (both jobs at once, flow control keeps them at the same rate; copy limit = min(read, write))"
    fio_parse() {   # fio_parse JSON rw|read|write|min -> "SECONDS BYTES"
        python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
what = sys.argv[2]
vals = []
for j in d["jobs"]:
    for k in ("read", "write"):
        if j[k]["io_bytes"] > 0:
            vals.append((k, j[k]["io_bytes"], j[k]["runtime"] / 1000.0))
if what == "min":
    # copy: the rate at which data can be read and written at the same time
    k, b, s = min(vals, key=lambda v: v[1] / v[2])
else:
    k, b, s = [v for v in vals if v[0] == what][0]
print("%.4f %d" % (s, b))
PY
    }
    for run in $(seq 1 "$RUNS"); do
        for tool in fio-seqread fio-seqwrite fio-copy; do
            j=$LOGS/$tool.$run.json
            case $tool in
                fio-seqread) args=(--name=seqread --filename="$FIO_DIR/read.dat" --rw=read); pick=read ;;
                fio-seqwrite) args=(--name=seqwrite --filename="$FIO_DIR/write.dat" --rw=write); pick=write ;;
                fio-copy) args=(--name=read --filename="$FIO_DIR/read.dat" --rw=read --flow_id=1 --flow=1
                                --name=write --filename="$FIO_DIR/write.dat" --rw=write --flow_id=1 --flow=1)
                          pick=min ;;
            esac
            wait_idle
            # shellcheck disable=SC2086
            if (cd "$FIO_DIR" && fio $FIO_COMMON "${args[@]}") >"$j" 2>"$LOGS/$tool.$run.err"; then
                read -r secs bytes < <(fio_parse "$j" "$pick")
                csv_row disk "$tool" "$run" "$secs" "$bytes" 1
                log "disk.$tool.$run: $(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f MB/s", b / s / 1e6 }')"
            else
                csv_row disk "$tool" "$run" "" 0 0
                log "FAIL disk.$tool.$run: $(tail -n 2 "$LOGS/$tool.$run.err" | tr '\n' ' ')"
            fi
        done
    done
fi

# ---------------------------------------------------------------- 2. warm, loopback
BIG_BYTES=$((BIG_MIB * MiB))
if want warm-big; then
    log "== warm-big: ${BIG_MIB} MiB, page cache warm, destination on tmpfs $TMPFS"
    mkdir -p "$WARM_DST"
    start_hetch "$WARM_DST"
    meta cmd.hetch-tls "$HETCH_CMD"
    meta cmd.hetch-plain "$HETCH_PLAIN_CMD"
    log "warm-up push (not timed)"
    RSS_FILE=""
    hetch_push "$BIG" big >/dev/null 2>&1 || true
    for run in $(seq 1 "$RUNS"); do
        run_point warm-big hetch-tls "$run" warm "$BIG" "$WARM_DST/big" 1 "$BIG_BYTES" -- \
            hetch_push "$BIG" big
        run_point warm-big hetch-plain "$run" warm "$BIG" "$WARM_DST/big" 1 "$BIG_BYTES" -- \
            hetch_push --no-encrypt --verify none "$BIG" big
    done
    rm -rf "$WARM_DST/big"
    stop_hetch
fi

# ---------------------------------------------------------------- 3/4. cold copies
# Every tool on every dataset (issue 17's table): hetch with its defaults (TLS, --verify
# written), hetch with --no-encrypt --verify none, cp -r, a tar pipe, the rsync daemon,
# rsync over ssh, GridFTP (clear, no checksum) and scp, with the machine's CPU-seconds.
# hetch-received is plain mode as issue 39's target has it (--no-encrypt --verify
# received); hetch-local is `hetch cp SRC DST` on this machine, with the defaults;
# hetch-hxa (not in the default list) is hetch with -H -X -A (issue 40: hard links,
# attributes and ACLs asked for, on a tree that has none).
COLD_TOOLS=${COLD_TOOLS:-hetch,hetch-plain,hetch-received,hetch-local,cp,tar,rsyncd,rsync-ssh,gridftp,scp}
cold_tool() { case ",$COLD_TOOLS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
if want cold-big || want cold-1M || want cold-16K; then
    if cold_tool scp || cold_tool rsync-ssh; then start_sshd; fi
    if cold_tool rsyncd; then start_rsyncd "$DST"; fi
    if cold_tool gridftp; then start_gridftp; fi
    start_hetch "$DST"
fi

cold_case() {   # cold_case CASE SRC FILES BYTES
    local case=$1 src=$2 files=$3 bytes=$4 run tool
    log "== $case: $files files, $bytes bytes, caches dropped, final sync timed"
    if [ "$FRESH_FS" = 1 ] && [ "$files" -ge 10000 ]; then
        meta cold.fs "each run into a new ext4 (mkfs.ext4 -N 131072, journal on) on a loop device with direct I/O over WORK/cold-fs.img, mounted at WORK/dst/fs"
    else
        meta cold.fs "WORK/dst on the work disk's own file system"
    fi
    meta cmd.hetch "$HETCH_CMD"
    meta cmd.hetch-plain "${HETCH_CMD/--json/--json --no-encrypt --verify none}"
    meta cmd.hetch-received "${HETCH_CMD/--json/--json --no-encrypt --verify received}"
    meta cmd.hetch-local "hetch cp -q --json SRC DST/NAME"
    meta cmd.hetch-hxa "${HETCH_CMD/--json/--json -H -X -A}"
    meta cmd.scp "$SCP_CMD"
    meta cmd.rsyncd "$RSYNCD_CMD"
    meta cmd.rsync-ssh "$RSYNC_SSH_CMD"
    meta cmd.cp "$CP_CMD"
    meta cmd.tar "$TAR_CMD"
    meta cmd.gridftp "$GRIDFTP_CMD"
    for run in $(seq 1 "$RUNS"); do
        for tool in ${COLD_TOOLS//,/ }; do
            fresh_fs "$bytes" "$files"
            local d="$DST/fs/$case-$tool-$run" name="fs/$case-$tool-$run"
            case $tool in
                hetch) run_point "$case" hetch "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    hetch_push "$src" "$name" ;;
                hetch-plain) run_point "$case" hetch-plain "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    hetch_push --no-encrypt --verify none "$src" "$name" ;;
                hetch-received) run_point "$case" hetch-received "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    hetch_push --no-encrypt --verify received "$src" "$name" ;;
                hetch-hxa) run_point "$case" hetch-hxa "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    hetch_push -H -X -A "$src" "$name" ;;
                hetch-local) run_point "$case" hetch-local "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    rss_wrap "$HETCH" cp -q --json "$src" "$d" ;;
                scp) run_point "$case" scp "$run" cold "$src" "$d" "$files" "$bytes" -- do_scp "$src" "$d" ;;
                rsyncd) run_point "$case" rsyncd "$run" cold "$src" "$d" "$files" "$bytes" -- \
                    do_rsyncd "$src" "$name" ;;
                rsync-ssh) if [ -d "$src" ]; then
                        run_point "$case" rsync-ssh "$run" cold "$src" "$d" "$files" "$bytes" -- do_rsync_ssh "$src" "$d"
                    else
                        run_point "$case" rsync-ssh "$run" cold "$src" "$d" "$files" "$bytes" -- do_rsync_ssh_file "$src" "$d"
                    fi ;;
                cp) run_point "$case" cp "$run" cold "$src" "$d" "$files" "$bytes" -- do_cp "$src" "$d" ;;
                tar) if [ -d "$src" ]; then
                        run_point "$case" tar "$run" cold "$src" "$d" "$files" "$bytes" -- do_tar "$src" "$d"
                    else
                        run_point "$case" tar "$run" cold "$src" "$d" "$files" "$bytes" -- do_tar_file "$src" "$d"
                    fi ;;
                gridftp) run_point "$case" gridftp "$run" cold "$src" "$d" "$files" "$bytes" -- do_gridftp "$src" "$d" ;;
                *) die "COLD_TOOLS: unknown tool $tool" ;;
            esac
            # Many small files are kept until the case ends (without a fresh file system
            # per run, deleting them would slow down whoever creates files next: see
            # --no-fresh-fs); fewer, larger files go at once (disk space).
            if [ "$files" -lt 10000 ]; then rm -rf "$d"; fi
        done
    done
    rm -rf "$DST/fs/$case"-*
    drop_fresh_fs
}
if want cold-big; then cold_case cold-big "$BIG" 1 "$BIG_BYTES"; fi
if want cold-1M; then cold_case cold-1M "$SET_1M" "$M1_COUNT" $((M1_COUNT * MiB)); fi
if want cold-16K; then cold_case cold-16K "$SET_16K" "$K16_COUNT" $((K16_COUNT * 16384)); fi
if [ -n "$HETCH_PID" ]; then stop_hetch; fi
if [ -n "$RSYNCD_PID" ]; then stop_pid "$RSYNCD_PID"; RSYNCD_PID=""; fi
if [ -n "$SSH_PID" ]; then stop_pid "$SSH_PID"; SSH_PID=""; fi
if [ -n "$GRIDFTP_PID" ]; then stop_pid "$GRIDFTP_PID"; GRIDFTP_PID=""; fi

# ---------------------------------------------------------------- 5. peak RSS
if want rss; then
    log "== rss: peak RSS of hetch client (/usr/bin/time %M) and server (VmHWM), fresh server per run"
    meta cmd.rss "/usr/bin/time -f %M $HETCH_CMD; server: VmHWM from /proc/PID/status after the copy, before it is stopped; each run into a new ext4 as the cold cases (10,000 files or more)"
    for run in $(seq 1 "$RUNS"); do
        for point in rss-small rss-large; do
            if [ $point = rss-small ]; then src=$SET_RSS_S; files=$RSS_SMALL; else src=$SET_RSS_L; files=$RSS_LARGE; fi
            # Into a new file system, as the cold cases: on the work disk's own, creating
            # 200,000 files right after deleting as many costs each creation a scan of
            # the recently deleted inodes (13 to 70 s a run, against 14.5-15.7 s fresh).
            fresh_fs $((files * 4096)) "$files"
            start_hetch "$DST"
            SERVER_RSS=""
            # the server's HWM is read after the copy (below) and patched into the row
            run_point $point hetch "$run" rss "$src" "$DST/fs/$point" "$files" $((files * 1024)) -- \
                hetch_push "$src" "fs/$point"
            hwm=$(server_hwm "$HETCH_PID")
            stop_hetch
            rm -rf "$DST/fs/$point"
            drop_fresh_fs
            # patch the server's peak into the row just written (last line of the CSV)
            python3 - "$CSV" "$hwm" <<'PY'
import sys
path, hwm = sys.argv[1], sys.argv[2]
lines = open(path).read().splitlines()
cols = lines[-1].split(",")
cols[8] = hwm
lines[-1] = ",".join(cols)
open(path, "w").write("\n".join(lines) + "\n")
PY
            log "$point.hetch.$run: server VmHWM ${hwm} KiB"
        done
    done
fi

# ---------------------------------------------------------------- report
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"
meta idle_wait "$IDLE_WAIT s max per run; waited ${IDLE_WAITED} s in all; $BUSY_RUNS runs started while other processes used >= 25% CPU"
log "results: $CSV"
python3 "$ROOT/bench/stats.py" --csv "$CSV" --meta "$META" --csv-link "$(basename "$CSV")" >"$MD"
cat "$MD"
log "report: $MD"
