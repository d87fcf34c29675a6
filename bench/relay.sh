#!/usr/bin/env bash
# bench/relay.sh: a copy between two servers (hetch cp hetch://A/x hetch://B/x: A
# pushes to B, the client only watches) beside the same push made by a client that
# reads A's files itself (hetch cp A's-root/x hetch://B/x), and iperf3 on the same
# loopback, in one run, RUNS times interleaved. Source and destinations on tmpfs
# (/dev/shm), so the disk is out of the picture. CPU seconds are the whole machine's
# busy time during each copy (both servers and the client).
#
# Usage: bench/relay.sh [SIZE_MIB] (default 2048; RUNS=3; HETCH_BIN=target/release/hetch)
# Output: iperf3's rate, then one line per copy: what, wall, MB/s, CPU-s, and the
# client's own CPU-s.
set -euo pipefail
size=${1:-2048}
runs=${RUNS:-3}
bin=${HETCH_BIN:-target/release/hetch}
[ -x "$bin" ] || { echo "relay.sh: no $bin (cargo build --release)" >&2; exit 2; }
work=$(mktemp -d /dev/shm/relay.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/a" "$work/b"
head -c "$((size << 20))" /dev/urandom > "$work/a/file.bin"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/b.token"; chmod 600 "$work/b.token"
export HETCH_CONFIG_DIR="$work/config"
serve() {   # serve NAME ROOT EXTRA...: starts a server, prints "ADDR FP"
    local name=$1 root=$2; shift 2
    "$bin" serve --root "$root" --listen 127.0.0.1:0 --state-dir "$work/$name.state" "$@" \
        2>"$work/$name.log" &
    for _ in $(seq 100); do
        grep -q "token in" "$work/$name.log" && break; sleep 0.1
    done
    echo "$(sed -n 's/.*listening on //p' "$work/$name.log") $(sed -n 's/.*fingerprint //p' "$work/$name.log")"
}
read -r b_addr b_fp < <(serve b "$work/b" --token-file "$work/b.token")
read -r a_addr a_fp < <(serve a "$work/a" --relay-to "$b_addr")
a_tok=$(cat "$work/a.state/token")
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
tck=$(getconf CLK_TCK)
one() {   # one LABEL TOKEN FINGERPRINT SRC: copies SRC to B's x, prints a line
    local label=$1 token=$2 fp=$3 src=$4 b0 b1 t
    rm -rf "$work/b/x"; sync
    b0=$(busy)
    HETCH_TOKEN=$token /usr/bin/time -o "$work/time" -f "%e %U %S" "$bin" cp -q \
        --fingerprint "$fp" --dest-fingerprint "$b_fp" --dest-token-file "$work/b.token" \
        "$src" "hetch://$b_addr/x" >/dev/null 2>&1
    t=$(tail -n 1 "$work/time")
    b1=$(busy)
    cmp -s "$work/a/file.bin" "$work/b/x" || { echo "relay.sh: $label: copy differs" >&2; exit 1; }
    read -r wall user sys <<<"$t"
    awk -v l="$label" -v w="$wall" -v u="$user" -v s="$sys" -v a="$b0" -v b="$b1" -v t="$tck" -v m="$size" \
        'BEGIN { printf "%-32s wall %6.2f s  %7.1f MB/s  machine %5.2f CPU-s  client %5.2f CPU-s\n", l, w, m*1.048576/w, (b-a)/t, u+s }'
}
if command -v iperf3 >/dev/null; then
    iperf3 -s -1 -p 5299 >/dev/null 2>&1 & sleep 0.3
    iperf3 -c 127.0.0.1 -p 5299 -t 5 -f M 2>/dev/null | awk '/receiver/{print "iperf3 loopback: " $7 " MBytes/s"}'
fi
echo "hetch $("$bin" --version 2>/dev/null | head -1); ${size} MiB file; $(nproc) CPUs"
for _ in $(seq "$runs"); do
    one "push (client reads A's file)" "$(cat "$work/b.token")" "$b_fp" "$work/a/file.bin"
    one "relay (A pushes to B)" "$a_tok" "$a_fp" "hetch://$a_addr/file.bin"
done
