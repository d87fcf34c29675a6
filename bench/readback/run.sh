#!/usr/bin/env bash
# What a read-back check of small files costs the destination (see readback_cost.c):
# every way of checking, each into a fresh ext4 (journal on) on a loop device with
# direct I/O, page cache dropped first. Root. Usage: bench/readback/run.sh [N [SIZE]]
set -euo pipefail
N=${1:-20000} SIZE=${2:-16384}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/var/tmp/hetch-readback}
mkdir -p "$WORK"
gcc -O2 -o "$WORK/readback_cost" "$HERE/readback_cost.c"
IMG=$WORK/fs.img MNT=$WORK/mnt DEV=""
cleanup() { umount "$MNT" 2>/dev/null || true; [ -n "$DEV" ] && losetup -d "$DEV" 2>/dev/null; rm -f "$IMG"; }
trap cleanup EXIT
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
echo "# $N files x $SIZE bytes; $(uname -r); machine CPU-s = /proc/stat busy ticks / 100"
for mode in 0 1 2 3 4 5; do
    cleanup; DEV=""
    truncate -s 2G "$IMG"
    mkfs.ext4 -q -F -N 131072 -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
    DEV=$(losetup --direct-io=on -f --show "$IMG")
    mkdir -p "$MNT"; mount "$DEV" "$MNT"; mkdir "$MNT/d"
    sync; echo 3 > /proc/sys/vm/drop_caches
    b0=$(busy)
    line=$("$WORK/readback_cost" "$mode" "$MNT/d" "$N" "$SIZE")
    b1=$(busy)
    echo "$line machine_cpu $(awk -v a="$b0" -v b="$b1" 'BEGIN{printf "%.2f", (b-a)/100}') s"
    umount "$MNT"; losetup -d "$DEV"; DEV=""
done
