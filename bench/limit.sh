#!/usr/bin/env bash
# bench/limit.sh: the machine's floor (issue 39 item 6). Measures what this machine's
# CPU, memory, loopback and disk can do, and from that the least CPU-seconds and the
# shortest wall time that ANY mover with hetch's guarantees could take for each dataset
# of bench/core.sh (1 x 2 GiB, 1,000 x 1 MiB, 20,000 x 16 KiB), cold (source read from
# the device) and warm (source in the page cache, destination on tmpfs). No Rust is
# built: the measurements are a small C program compiled here with gcc (and, when the
# cargo registry holds it, BLAKE3's C reference from the blake3 crate hetch links),
# b3sum, openssl, iperf3 and fio.
#
# Usage: bench/limit.sh [--runs N] [--quick] [--work DIR] [--tmpfs DIR] [--label NAME]
#   --runs N      repetitions of every measurement; the median is kept (default 3)
#   --quick       short measurements and few files, for smoke-testing the script
#   --work DIR    the disk measured (fio files, small files; default /var/tmp/hetch-bench,
#                 core.sh's); everything written there is removed on exit
#   --tmpfs DIR   tmpfs for the warm small-file figures (default /dev/shm)
#   --idle-wait S before each measurement wait up to S seconds (default 5; 0: never)
#                 for other processes to use < 25% of the CPUs (the machine may be shared;
#                 there are about 50 measurements, so a long wait makes a long run)
#   --no-fresh-fs the small-file figures in WORK itself; by default each run makes a new
#                 ext4 (journal on) on a loop device with direct I/O, as core.sh's cold
#                 small-file destinations are
#   --label NAME  add -NAME to the results' file names
#
# What is measured (each --runs times; raw values and medians kept):
#   memcpy      one core copying a 256 MiB buffer into another, again and again (C);
#               also a 4 MiB buffer (in the caches), recorded, not used by the model
#   BLAKE3      one core: BLAKE3's C reference from the cargo registry (the same
#               assembly the blake3 crate links into hetch) hashing 4 MiB blocks of a
#               256 MiB buffer, and `b3sum --num-threads 1` of a 1 GiB file on tmpfs
#               (its rate over user time only, and over user + system: the latter
#               includes reading the file); the model takes the C figure, or b3sum's
#               user-time figure when the C source is not there
#   AES-GCM     `openssl speed -evp aes-256-gcm -bytes 16384 -seconds 3`, with and
#               without -decrypt (openssl divides by its user CPU time)
#   loopback    `iperf3 -c 127.0.0.1 -t 5 -J` against a server on 127.0.0.1: GB/s, and
#               CPU-seconds per GB (iperf3's cpu_utilization_percent, both ends)
#   disk        fio on WORK, direct I/O, 4 MiB blocks, iodepth 4, libaio: sequential
#               write of 2 GiB (then an fsync, timed with it), sequential read of it, and a mixed run (one
#               job reading that file while another writes a second, 5 s): a copy reads
#               and writes at the same time
#   per file    20,000 files of 16 KiB, with the program's CPU-seconds plus those of the
#               kernel's threads (writeback, journal, loop device), and the whole
#               machine's (/proc/stat, which counts other users too): create
#               (open O_CREAT|O_EXCL, write, futimens, close, then one syncfs), list
#               and read with O_DIRECT (8 threads), read back by name with O_DIRECT
#               (8 threads); warm: list and read from the page cache, create on tmpfs,
#               read back from tmpfs (1 thread each)
#
# The model (bench/limit.py prints it with the numbers; each term can be disagreed with:
# edit MODES / SCENARIOS in limit.py and `bench/limit.py rebuild LIMIT.json` recomputes
# the floors from the stored raw measurements):
#   Modes: defaults = TLS 1.3 AES-256-GCM both ways, BLAKE3 of every block at the
#   source, --verify written (the destination reads back what it wrote from the device
#   and hashes it); plain = --no-encrypt --verify received (BLAKE3 at the source and of
#   what arrived); plain-none = --no-encrypt --verify none (what core.sh's hetch-plain
#   runs: BLAKE3 at the source only).
#   Least CPU-seconds = bytes x (1/AES-enc + 1/AES-dec [defaults only]
#                                + passes/BLAKE3 [2; plain-none 1]
#                                + copies/memcpy)
#                       + files x per-file CPU.
#     copies: 2 across the socket (send and receive; a mover with direct I/O and no
#     zero-copy makes no page-cache copy when cold); warm adds the page-cache copies
#     it cannot avoid without zero-copy: reading the cached source (1), writing tmpfs
#     (1), reading tmpfs back (1, defaults only).
#     per-file CPU: the measured CPU-s (own + kernel threads) of the per-file phases
#     the mode needs (cold: create+syncfs, list+read, [defaults] read back; warm: the
#     warm phases), less the page-cache copies those phases make (already counted per
#     byte), / files.
#     Not counted: the mover's own per-file bookkeeping and messages, TLS records'
#     framing, TCP's own per-byte cost beyond the 2 copies (the output also gives the
#     floor with the socket charged at iperf3's measured CPU-s per GB instead).
#   Shortest time = max over resources of work / rate:
#     CPU: least CPU-seconds / cores (nproc);
#     loopback: bytes / iperf3's GB/s;
#     device (cold only): reads = bytes (source) [+ bytes (read-back), defaults],
#       writes = bytes, one device for both; reads and writes overlap at the mixed run's
#       rates while both are pending, what is left runs at the read or write rate alone
#       (or all reads, then all writes, if that is faster); computed per repetition
#       with that repetition's four disk rates, the median kept.
#     The device's per-file costs (metadata, journal, latency) are left out of the time
#     (only their CPU is in); the per-file phases' wall times are reported beside.
#
# Output: a table on stdout; bench/results/<date>-limit.json (measurements, raw values,
# versions, model, floors) and <date>-limit.md. --quick writes <date>-limit-quick.*.
# Compare a core.sh result with it: bench/limit.py ratio LIMIT.json CORE.csv
# Needs root for dropping caches and the loop device (without it: warnings, no drops).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=limit
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
RUNS=3
QUICK=0
WORK=/var/tmp/hetch-bench
TMPFS=/dev/shm
IDLE_WAIT=5
FRESH_FS=1
LABEL=""
ARGS_ORIG="$*"

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#*=}; shift ;;
        --quick) QUICK=1; shift ;;
        --work) WORK=$2; shift 2 ;;
        --work=*) WORK=${1#*=}; shift ;;
        --tmpfs) TMPFS=$2; shift 2 ;;
        --tmpfs=*) TMPFS=${1#*=}; shift ;;
        --idle-wait) IDLE_WAIT=$2; shift 2 ;;
        --idle-wait=*) IDLE_WAIT=${1#*=}; shift ;;
        --no-fresh-fs) FRESH_FS=0; shift ;;
        --label) LABEL=$2; shift 2 ;;
        --label=*) LABEL=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "limit.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*|0) echo "limit.sh: --runs needs a positive integer" >&2; exit 2 ;; esac
case "$IDLE_WAIT" in ''|*[!0-9]*) echo "limit.sh: --idle-wait needs seconds" >&2; exit 2 ;; esac

if [ "$QUICK" = 1 ]; then
    MEM_T=0.5 AES_T=1 IPERF_T=1 FIO_SIZE=256M FIO_MIXED_T=2 B3_MIB=256 FILES=2000 MODE=quick
else
    MEM_T=2 AES_T=3 IPERF_T=5 FIO_SIZE=2G FIO_MIXED_T=5 B3_MIB=1024 FILES=20000 MODE=full
fi
FILE_SIZE=16384
READ_THREADS=8

DATE=$(date +%Y-%m-%d)
RESULTS=$ROOT/bench/results
SUFFIX=limit; [ "$QUICK" = 1 ] && SUFFIX=limit-quick
[ -n "$LABEL" ] && SUFFIX=$SUFFIX-$LABEL
OUT_JSON=$RESULTS/$DATE-$SUFFIX.json
OUT_MD=$RESULTS/$DATE-$SUFFIX.md
RUNTMP=$(mktemp -d /tmp/hetch-limit.XXXXXX)
META=$RUNTMP/meta.tsv
RAW=$RUNTMP/raw.jsonl
SCRATCH=$WORK/limit.$$          # fio files and the small-file file system
SHM=$TMPFS/hetch-limit.$$       # b3sum's input and the warm small files
LIMIT_PY=$ROOT/bench/limit.py

# ---------------------------------------------------------------- cleanup
IPERF_PID="" LOOP_DEV=""
drop_fs() {   # the small-file file system, if any
    if mountpoint -q "$SCRATCH/mnt" 2>/dev/null; then umount "$SCRATCH/mnt"; fi
    if [ -n "$LOOP_DEV" ]; then losetup -d "$LOOP_DEV" 2>/dev/null || true; LOOP_DEV=""; fi
    rm -f "$SCRATCH/fs.img"
}
cleanup() {
    local rc=$?
    set +e
    if [ -n "$IPERF_PID" ]; then kill "$IPERF_PID" 2>/dev/null; wait "$IPERF_PID" 2>/dev/null; fi
    drop_fs
    rm -rf "$SCRATCH" "$SHM" "$RUNTMP"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- preflight
for t in gcc fio iperf3 openssl python3 ss; do
    command -v "$t" >/dev/null 2>&1 || die "missing $t (bench/install-peers.sh installs fio and iperf3)"
done
[ "$(id -u)" = 0 ] || log "warning: not root: caches cannot be dropped, no loop device"
[ "$CAN_DROP" = 1 ] || log "warning: /proc/sys/vm/drop_caches not writable: caches will NOT be dropped (the disk figures may be the cache's)"
if [ "$FRESH_FS" = 1 ] && { [ "$(id -u)" != 0 ] || ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; }; then
    log "warning: no loop device here (needs root, losetup, mkfs.ext4): small files go into WORK itself"
    FRESH_FS=0
fi
B3SUM=$(command -v b3sum || true)
[ -n "$B3SUM" ] || [ ! -x "$ROOT/target/tools/bin/b3sum" ] || B3SUM=$ROOT/target/tools/bin/b3sum
mkdir -p "$RESULTS" "$SCRATCH" "$SHM"
: >"$META"
: >"$RAW"

raw() {   # raw KIND RUN JSON: one measurement, as limit.py reads it
    printf '{"kind":"%s","run":%s,"data":%s}\n' "$1" "$2" "$3" >>"$RAW"
}

# CPU-seconds the whole machine has been busy (user, nice, system, irq, softirq, steal).
busy_cpu() { awk '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }

# The kernel threads' CPU-seconds so far (limit.py kcpu).
kernel_cpu() { python3 "$LIMIT_PY" kcpu; }
delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# measured KIND RUN COMMAND...: runs COMMAND (which prints one JSON object) after
# wait_idle, and records it with the CPU-seconds of the kernel's threads over it (the
# work the kernel did for it outside its own CPU time), the whole machine's (which
# also counts whatever else runs here) and how busy the machine was just before.
measured() {
    local kind=$1 run=$2 c0 c1 k0 k1 out
    shift 2
    wait_idle
    k0=$(kernel_cpu)
    c0=$(busy_cpu)
    out=$("$@") || die "$kind (run $run) failed: $*"
    c1=$(busy_cpu)
    k1=$(kernel_cpu)
    out=${out%\}}
    raw "$kind" "$run" "$out,\"kernel_cpu_s\":$(delta "$k0" "$k1"),\"machine_cpu_s\":$(delta "$c0" "$c1"),\"busy_before_pct\":${LAST_BUSY:-0}}"
}

# ---------------------------------------------------------------- the C program
log "compiling the measuring program (gcc, nice -n 19)"
cat >"$RUNTMP/limit.c" <<'EOF'
/* bench/limit.sh's measuring program (written and compiled by limit.sh at run time).
 *   memcpy MIB SECONDS      copy a MIB buffer into another, again and again, one thread
 *   fill PATH MIB           write MIB of pseudo-random bytes to PATH
 *   blake3 MIB SECONDS      BLAKE3 of 4 MiB blocks of a MIB buffer, in turn (only when
 *                           built with -DHAVE_BLAKE3 and BLAKE3's C sources)
 *   create DIR N SIZE       N files of SIZE bytes, 1,000 per subdirectory: open
 *                           (O_CREAT|O_EXCL), write, futimens, close; then one syncfs
 *   walk DIR N SIZE T direct|buffered    list DIR's subdirectories (readdir), then on T
 *                           threads: open, fstat, read the whole file, close
 *   byname DIR N SIZE T direct|buffered  as walk, with the names known (no readdir)
 * Prints one JSON object (no closing newline issues: one line) with the wall time and
 * the process's CPU time (CLOCK_PROCESS_CPUTIME_ID).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_BLAKE3
#include "blake3.h"
#endif

static void die(const char *what) { perror(what); exit(1); }
static double clk(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static double wall(void) { return clk(CLOCK_MONOTONIC); }
static double cpu(void) { return clk(CLOCK_PROCESS_CPUTIME_ID); }

static void *big(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 4096)) die("posix_memalign");
    return p;
}
static void fill(unsigned char *p, size_t n) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

static int do_memcpy(size_t mib, double secs) {
    size_t n = mib << 20;
    unsigned char *a = big(n), *b = big(n);
    fill(a, n);
    memset(b, 1, n);
    memcpy(b, a, n); /* warm-up, not counted */
    double w0 = wall(), c0 = cpu();
    uint64_t copies = 0;
    do {
        a[(copies * 4099) % n] ^= 1; /* no two copies alike */
        memcpy(b, a, n);
        copies++;
    } while (wall() - w0 < secs);
    double w = wall() - w0, c = cpu() - c0;
    printf("{\"buffer_mib\":%zu,\"bytes\":%llu,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"check\":%d}\n",
           mib, (unsigned long long)(copies * n), w, c, b[n / 2]);
    return 0;
}

#ifdef HAVE_BLAKE3
static int do_blake3(size_t mib, double secs) {
    size_t blk = (size_t)4 << 20, n = mib << 20;
    if (n < blk) n = blk;
    unsigned char *a = big(n), out[32], acc = 0;
    fill(a, n);
    double w0 = wall(), c0 = cpu();
    uint64_t bytes = 0;
    size_t off = 0;
    do {
        blake3_hasher h;
        blake3_hasher_init(&h);
        blake3_hasher_update(&h, a + off, blk);
        blake3_hasher_finalize(&h, out, 32);
        acc ^= out[0];
        bytes += blk;
        off = (off + blk) % n;
    } while (wall() - w0 < secs);
    double w = wall() - w0, c = cpu() - c0;
    printf("{\"impl\":\"BLAKE3 C %s\",\"buffer_mib\":%zu,\"block_bytes\":%zu,\"bytes\":%llu,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"check\":%d}\n",
           BLAKE3_VERSION_STRING, mib, blk, (unsigned long long)bytes, w, c, acc);
    return 0;
}
#endif

static int do_fill(const char *path, size_t mib) {
    size_t n = (size_t)16 << 20;
    unsigned char *a = big(n);
    fill(a, n);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die(path);
    for (size_t i = 0; i < mib; i += 16) {
        a[0] = (unsigned char)i; a[4096] = (unsigned char)(i >> 8);
        size_t k = (mib - i < 16 ? mib - i : 16) << 20;
        if (write(fd, a, k) != (ssize_t)k) die("write");
    }
    if (close(fd)) die("close");
    return 0;
}

static char *name_of(const char *dir, long i) {
    char *s;
    if (asprintf(&s, "%s/d%04ld/f%06ld.bin", dir, i / 1000, i) < 0) die("asprintf");
    return s;
}

static int do_create(const char *dir, long n, size_t size) {
    unsigned char *a = big(size);
    fill(a, size);
    struct timespec ts[2] = {{1700000000, 0}, {1700000000, 0}};
    double w0 = wall(), c0 = cpu();
    for (long i = 0; i < n; i++) {
        char *p = name_of(dir, i);
        if (i % 1000 == 0) {
            char *d = strdup(p);
            *strrchr(d, '/') = 0;
            if (mkdir(d, 0755) && errno != EEXIST) die(d);
            free(d);
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) die(p);
        a[0] = (unsigned char)i;
        if (write(fd, a, size) != (ssize_t)size) die("write");
        if (futimens(fd, ts)) die("futimens");
        if (close(fd)) die("close");
        free(p);
    }
    double written = wall() - w0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || syncfs(dfd)) die("syncfs");
    close(dfd);
    double w = wall() - w0, c = cpu() - c0;
    printf("{\"files\":%ld,\"size\":%zu,\"wall_s\":%.6f,\"wall_before_syncfs_s\":%.6f,\"cpu_s\":%.6f}\n",
           n, size, w, written, c);
    return 0;
}

struct job { char **names; long n, next; size_t size; int direct; pthread_mutex_t mu; };

static void *reader(void *arg) {
    struct job *j = arg;
    size_t cap = (j->size + 4095) & ~(size_t)4095;
    unsigned char *buf = big(cap);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        long i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n) break;
        int fd = open(j->names[i], O_RDONLY | O_CLOEXEC | (j->direct ? O_DIRECT : 0));
        if (fd < 0) die(j->names[i]);
        struct stat st;
        if (fstat(fd, &st)) die("fstat");
        ssize_t got, total = 0;
        while ((got = read(fd, buf, cap)) > 0) total += got;
        if (got < 0) die("read");
        if ((size_t)total != j->size) { fprintf(stderr, "%s: %zd bytes\n", j->names[i], total); exit(1); }
        close(fd);
    }
    free(buf);
    return NULL;
}

static int do_read(const char *what, const char *dir, long n, size_t size, int threads, int direct) {
    struct job j = { .names = calloc(n, sizeof(char *)), .n = 0, .size = size, .direct = direct };
    pthread_mutex_init(&j.mu, NULL);
    double w0 = wall(), c0 = cpu();
    if (strcmp(what, "walk") == 0) {
        DIR *top = opendir(dir);
        if (!top) die(dir);
        struct dirent *e;
        char **subs = NULL;
        long ns = 0;
        while ((e = readdir(top))) {
            if (e->d_name[0] == '.') continue;
            subs = realloc(subs, (ns + 1) * sizeof(char *));
            if (asprintf(&subs[ns++], "%s/%s", dir, e->d_name) < 0) die("asprintf");
        }
        closedir(top);
        for (long s = 0; s < ns; s++) {
            DIR *d = opendir(subs[s]);
            if (!d) die(subs[s]);
            while ((e = readdir(d))) {
                if (e->d_name[0] == '.') continue;
                if (j.n >= n) { fprintf(stderr, "%s: more than %ld files\n", dir, n); exit(1); }
                if (asprintf(&j.names[j.n++], "%s/%s", subs[s], e->d_name) < 0) die("asprintf");
            }
            closedir(d);
        }
        if (j.n != n) { fprintf(stderr, "%s: %ld files, expected %ld\n", dir, j.n, n); exit(1); }
    } else {
        for (long i = 0; i < n; i++) j.names[i] = name_of(dir, i);
        j.n = n;
    }
    pthread_t *t = calloc(threads, sizeof(pthread_t));
    for (int k = 0; k < threads; k++)
        if (pthread_create(&t[k], NULL, reader, &j)) die("pthread_create");
    for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);
    double w = wall() - w0, c = cpu() - c0;
    printf("{\"io\":\"%s\",\"threads\":%d,\"files\":%ld,\"size\":%zu,\"wall_s\":%.6f,\"cpu_s\":%.6f}\n",
           direct ? "direct" : "buffered", threads, n, size, w, c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "memcpy")) return do_memcpy(atol(argv[2]), atof(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "fill")) return do_fill(argv[2], atol(argv[3]));
#ifdef HAVE_BLAKE3
    if (argc >= 4 && !strcmp(argv[1], "blake3")) return do_blake3(atol(argv[2]), atof(argv[3]));
#endif
    if (argc >= 5 && !strcmp(argv[1], "create")) return do_create(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc >= 7 && (!strcmp(argv[1], "walk") || !strcmp(argv[1], "byname")))
        return do_read(argv[1], argv[2], atol(argv[3]), atol(argv[4]), atoi(argv[5]), !strcmp(argv[6], "direct"));
    fprintf(stderr, "usage: see the comment at the top of limit.c\n");
    return 2;
}
EOF

# BLAKE3's C sources: from the blake3 crate in the cargo registry, the version in
# Cargo.lock first (the code hetch links), else the newest there. Compiling them is C,
# not a Rust build.
B3_LOCK=$(awk '/^name = "blake3"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$ROOT/Cargo.lock" 2>/dev/null || true)
B3_C=""
mapfile -t B3_DIRS < <(printf '%s\n' "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/blake3-*/c | sort -V -r)
for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/blake3-"$B3_LOCK"/c "${B3_DIRS[@]}"; do
    if [ -f "$d/blake3.h" ] && [ -f "$d/blake3_avx512_x86-64_unix.S" ]; then B3_C=$d; break; fi
done
PROG=$RUNTMP/limit
if [ -n "$B3_C" ] && [ "$(uname -m)" = x86_64 ] && nice -n 19 gcc -O2 -pthread -DHAVE_BLAKE3 -I"$B3_C" -o "$PROG" "$RUNTMP/limit.c" \
        "$B3_C/blake3.c" "$B3_C/blake3_dispatch.c" "$B3_C/blake3_portable.c" \
        "$B3_C"/blake3_{sse2,sse41,avx2,avx512}_x86-64_unix.S 2>"$RUNTMP/gcc.log"; then
    HAVE_B3C=1
else
    [ -z "$B3_C" ] || log "warning: BLAKE3's C sources did not compile ($(head -n 2 "$RUNTMP/gcc.log" | tr '\n' ' ')): b3sum only"
    [ -n "$B3_C" ] || log "no BLAKE3 C sources in the cargo registry: b3sum only"
    nice -n 19 gcc -O2 -pthread -o "$PROG" "$RUNTMP/limit.c" 2>"$RUNTMP/gcc.log" \
        || { cat "$RUNTMP/gcc.log" >&2; die "gcc failed"; }
    HAVE_B3C=0
fi

# ---------------------------------------------------------------- metadata
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta command "bench/limit.sh $ARGS_ORIG"
meta mode "$MODE"
meta runs "$RUNS"
meta work "$WORK ($(findmnt -n -o FSTYPE,SOURCE,OPTIONS -T "$WORK" 2>/dev/null | head -n 1 | tr -s ' '))"
meta tmpfs "$TMPFS ($(findmnt -n -o FSTYPE -T "$TMPFS" 2>/dev/null | head -n 1))"
meta caches_dropped "$CAN_DROP"
meta fresh_fs "$FRESH_FS"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
meta git "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)"
meta v.kernel "$(uname -r)"
meta v.gcc "$(gcc --version 2>&1 | head -n 1)"
meta v.fio "$(fio --version 2>&1)"
meta v.iperf3 "$(iperf3 --version 2>&1 | head -n 1)"
meta v.openssl "$(openssl version 2>&1)"
meta v.b3sum "$(if [ -n "$B3SUM" ]; then "$B3SUM" --version 2>&1; else echo 'not installed'; fi)"
meta v.blake3_c "$(if [ "$HAVE_B3C" = 1 ]; then echo "$B3_C"; else echo 'not available'; fi)"
meta v.python3 "$(python3 --version 2>&1)"
meta m.nproc "$(nproc)"
meta m.cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
meta m.cpu_flags "$(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(aes|vaes|avx2|avx512f|avx512vl|vpclmulqdq|sha_ni|erms|fsrm)$' | tr '\n' ' ')"
meta m.mem "$(free -m | awk '/^Mem:/ { print $2 " MiB" }')"
meta m.disk "$(lsblk -dn -o NAME,ROTA,SIZE,MODEL "$(findmnt -n -o SOURCE -T "$WORK" | head -n 1)" 2>/dev/null | tr -s ' ' || true)"
meta sizes "fio: $FIO_SIZE per file, mixed run ${FIO_MIXED_T}s; files: $FILES x $FILE_SIZE B; memcpy ${MEM_T}s per run; openssl ${AES_T}s; iperf3 ${IPERF_T}s"

# ---------------------------------------------------------------- 1. memcpy, BLAKE3, AES
log "== memcpy: 256 MiB and 4 MiB buffers, one core, ${MEM_T}s each"
for run in $(seq 1 "$RUNS"); do
    measured memcpy "$run" "$PROG" memcpy 256 "$MEM_T"
    measured memcpy_cached "$run" "$PROG" memcpy 4 1
done

log "== BLAKE3, one core"
if [ "$HAVE_B3C" = 1 ]; then
    for run in $(seq 1 "$RUNS"); do
        measured blake3_c "$run" "$PROG" blake3 256 "$MEM_T"
        measured blake3_c_cached "$run" "$PROG" blake3 4 1
    done
fi
if [ -n "$B3SUM" ]; then
    "$PROG" fill "$SHM/b3.bin" "$B3_MIB"
    "$B3SUM" --num-threads 1 "$SHM/b3.bin" >/dev/null   # warm-up
    for run in $(seq 1 "$RUNS"); do
        measured b3sum "$run" python3 "$LIMIT_PY" time --bytes $((B3_MIB << 20)) -- "$B3SUM" --num-threads 1 "$SHM/b3.bin"
    done
    rm -f "$SHM/b3.bin"
    meta cmd.b3sum "$B3SUM --num-threads 1 FILE   (FILE: ${B3_MIB} MiB on $TMPFS, in memory)"
fi
[ "$HAVE_B3C" = 1 ] || [ -n "$B3SUM" ] || die "neither b3sum nor BLAKE3's C sources: no BLAKE3 figure"

log "== AES-256-GCM, one core: openssl speed, ${AES_T}s, 16 KiB"
for run in $(seq 1 "$RUNS"); do
    for dir in encrypt decrypt; do
        flag=(); [ "$dir" = decrypt ] && flag=(-decrypt)
        wait_idle
        out=$(openssl speed -mr "${flag[@]}" -evp aes-256-gcm -bytes 16384 -seconds "$AES_T" 2>/dev/null) \
            || die "openssl speed failed"
        bps=$(printf '%s\n' "$out" | awk -F: '/^\+F:/ { print $4; exit }')
        secs=$(printf '%s\n' "$out" | awk -F: '/^\+R:/ { print $4; exit }')
        [ -n "$bps" ] || die "cannot parse openssl speed's output: $out"
        raw "aes_gcm_$dir" "$run" "{\"bytes_per_s\":$bps,\"user_s\":${secs:-null},\"busy_before_pct\":${LAST_BUSY:-0}}"
    done
done
meta cmd.aes "openssl speed -mr [-decrypt] -evp aes-256-gcm -bytes 16384 -seconds $AES_T"

# ---------------------------------------------------------------- 2. loopback
log "== loopback: iperf3, one stream, ${IPERF_T}s"
IPERF_PORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$RUNTMP/iperf3-server.log" 2>&1 &
IPERF_PID=$!
wait_port "$IPERF_PORT" "$IPERF_PID" || die "iperf3 server did not start"
for run in $(seq 1 "$RUNS"); do
    wait_idle
    k0=$(kernel_cpu)
    c0=$(busy_cpu)
    iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t "$IPERF_T" -J >"$RUNTMP/iperf3.$run.json" 2>"$RUNTMP/iperf3.$run.err" \
        || die "iperf3 run $run failed: $(tail -n 2 "$RUNTMP/iperf3.$run.err")"
    c1=$(busy_cpu)
    k1=$(kernel_cpu)
    j=$(python3 "$LIMIT_PY" iperf3 "$RUNTMP/iperf3.$run.json")
    raw iperf3 "$run" "${j%\}},\"kernel_cpu_s\":$(delta "$k0" "$k1"),\"machine_cpu_s\":$(delta "$c0" "$c1"),\"busy_before_pct\":${LAST_BUSY:-0}}"
    sleep 1
done
kill "$IPERF_PID" 2>/dev/null || true
wait "$IPERF_PID" 2>/dev/null || true
IPERF_PID=""
meta cmd.iperf3 "iperf3 -c 127.0.0.1 -p PORT -t $IPERF_T -J   (server: iperf3 -s -B 127.0.0.1 -p PORT)"

# ---------------------------------------------------------------- 3. disk
log "== disk: fio on $WORK, direct, 4 MiB, iodepth 4: write, read, mixed"
FIO_COMMON=(--direct=1 --ioengine=libaio --bs=4M --iodepth=4 --output-format=json)
meta cmd.fio-write "fio --name=write --filename=WORK/f1 --rw=write --size=$FIO_SIZE ${FIO_COMMON[*]}; then sync WORK/f1 (fsync, timed and added to fio's runtime)"
meta cmd.fio-read "fio --name=read --filename=WORK/f1 --rw=read --size=$FIO_SIZE ${FIO_COMMON[*]}"
meta cmd.fio-mixed "fio ${FIO_COMMON[*]} --size=$FIO_SIZE --time_based --runtime=$FIO_MIXED_T --name=read --filename=WORK/f1 --rw=read --name=write --filename=WORK/f2 --rw=write   (both jobs at once, each at its own pace)"
fio_run() {   # fio_run KIND RUN ARGS...; for KIND write, the fsync after it is timed too
    local kind=$1 run=$2 j t0 t1 fsync=0
    shift 2
    j=$RUNTMP/fio-$kind.$run.json
    drop_caches
    wait_idle
    (cd "$SCRATCH" && fio "${FIO_COMMON[@]}" "$@") >"$j" 2>"$RUNTMP/fio.err" \
        || die "fio $kind failed: $(tail -n 3 "$RUNTMP/fio.err" | tr '\n' ' ')"
    if [ "$kind" = write ]; then
        # fio's runtime would leave out an end_fsync: the device's cache flush, timed here
        t0=$(now); sync "$SCRATCH/f1"; t1=$(now)
        fsync=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
    fi
    raw "fio_$kind" "$run" "$(python3 "$LIMIT_PY" fio "$j" "${LAST_BUSY:-0}" "$fsync")"
}
for run in $(seq 1 "$RUNS"); do
    rm -f "$SCRATCH/f1" "$SCRATCH/f2"
    fio_run write "$run" --name=write --filename=f1 --rw=write --size="$FIO_SIZE"
    fio_run read "$run" --name=read --filename=f1 --rw=read --size="$FIO_SIZE"
    fio_run mixed "$run" --size="$FIO_SIZE" --time_based --runtime="$FIO_MIXED_T" \
        --name=read --filename=f1 --rw=read --name=write --filename=f2 --rw=write
    rm -f "$SCRATCH/f1" "$SCRATCH/f2"
done

# ---------------------------------------------------------------- 4. per-file costs
log "== per file: $FILES x $FILE_SIZE B: create+syncfs, list+read, read back; warm: the same in memory"
new_fs() {   # the directory the cold small files go into, on a fresh ext4 if we can
    drop_fs
    rm -rf "$SCRATCH/files"
    if [ "$FRESH_FS" = 1 ]; then
        mkdir -p "$SCRATCH/mnt"
        truncate -s $(( FILES * FILE_SIZE * 3 + (1 << 30) )) "$SCRATCH/fs.img"
        mkfs.ext4 -q -F -N 131072 -E lazy_itable_init=0,lazy_journal_init=0 "$SCRATCH/fs.img" \
            || die "mkfs.ext4 failed"
        LOOP_DEV=$(losetup --direct-io=on -f --show "$SCRATCH/fs.img") || die "losetup failed"
        mount "$LOOP_DEV" "$SCRATCH/mnt" || die "mount failed"
        COLD_DIR=$SCRATCH/mnt/files
    else
        COLD_DIR=$SCRATCH/files
    fi
    mkdir -p "$COLD_DIR"
}
if [ "$FRESH_FS" = 1 ]; then
    meta files.fs "each run a new ext4 (mkfs.ext4 -N 131072, journal on) on a loop device with direct I/O over a file in WORK, as core.sh's cold small-file destinations"
else
    meta files.fs "WORK's own file system"
fi
for run in $(seq 1 "$RUNS"); do
    new_fs
    drop_caches
    measured files_create "$run" "$PROG" create "$COLD_DIR" "$FILES" "$FILE_SIZE"
    drop_caches
    measured files_walk_direct "$run" "$PROG" walk "$COLD_DIR" "$FILES" "$FILE_SIZE" "$READ_THREADS" direct
    drop_caches
    measured files_readback_direct "$run" "$PROG" byname "$COLD_DIR" "$FILES" "$FILE_SIZE" "$READ_THREADS" direct
    "$PROG" walk "$COLD_DIR" "$FILES" "$FILE_SIZE" 1 buffered >/dev/null   # into the page cache
    measured files_walk_warm "$run" "$PROG" walk "$COLD_DIR" "$FILES" "$FILE_SIZE" 1 buffered
    rm -rf "$SHM/files"
    mkdir -p "$SHM/files"
    measured files_create_tmpfs "$run" "$PROG" create "$SHM/files" "$FILES" "$FILE_SIZE"
    measured files_readback_tmpfs "$run" "$PROG" byname "$SHM/files" "$FILES" "$FILE_SIZE" 1 buffered
    rm -rf "$SHM/files"
done
drop_fs
rm -rf "$SCRATCH/files"

# ---------------------------------------------------------------- report
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"
meta idle_wait "$IDLE_WAIT s max per measurement; waited ${IDLE_WAITED} s in all; $BUSY_RUNS measurements started while other processes used >= 25% CPU"
python3 "$LIMIT_PY" build --meta "$META" --raw "$RAW" --json "$OUT_JSON" --md "$OUT_MD"
log "results: $OUT_JSON, $OUT_MD"
