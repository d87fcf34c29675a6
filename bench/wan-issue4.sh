#!/usr/bin/env bash
# bench/wan-issue4.sh: the runs behind docs/BENCHMARKS.md "WAN testbed and harness"
# (issue 4), each one `hetch-lab bench` command. Needs root (the `hetch-lab wan` testbed and
# cache drops) and the peers (bench/install-peers.sh).
#
# Usage: bench/wan-issue4.sh [STEP...]
#        steps: acceptance acceptance-large loss loss-cubic sweep cc datasets
#        (default: all, in that order). Results: bench/results/DATE-<step>.{jsonl,md,...}
# Each step resumes its results file, so rerunning after an interruption continues.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --release -p hetch -p hetch-lab >&2
H=$ROOT/target/release/hetch
LAB=$ROOT/target/release/hetch-lab  # the harness and the testbed; it runs $H
DATE=${DATE:-$(date -u +%Y-%m-%d)}
OUT=$ROOT/bench/results
PEERS=hetch,iperf3,rsync,scp,rclone,gridftp,xrootd
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(acceptance acceptance-large loss loss-cubic sweep cc datasets)
trap '"$LAB" wan down >/dev/null 2>&1 || true' EXIT

for step in "${STEPS[@]}"; do
    echo "=== $step" >&2
    case "$step" in
    acceptance) # the zx claim: at 100 ms, >= 90% of the 0 ms throughput (2 Gbit/s link)
        "$LAB" bench sweep --min 1M --max 2G --factor 2048 --aggregate 2G --max-files 1000 \
            --tools hetch,iperf3 --rtt 0,100 --rate 2gbit --iterations 3 \
            --data /dev/shm/hetch-bench-acceptance --results "$OUT/$DATE-wan-acceptance.jsonl" || true
        rm -rf /dev/shm/hetch-bench-acceptance ;;
    acceptance-large) # the same claim where slow start and set-up weigh less: 6 GiB
        # This VM's host backs guest memory on first touch, which made the first copies
        # into 12 GiB of tmpfs run at half speed: touch it once before measuring.
        head -c 17G /dev/zero > /dev/shm/hetch-bench-touch; rm -f /dev/shm/hetch-bench-touch
        "$LAB" bench sweep --min 6G --max 6G --aggregate 6G \
            --tools hetch,iperf3 --rtt 0,100 --rate 2gbit --iterations 2 \
            --data /dev/shm/hetch-bench-acceptance --results "$OUT/$DATE-wan-acceptance-large-warm.jsonl" || true
        rm -rf /dev/shm/hetch-bench-acceptance ;;
    loss-cubic) # the loss case under cubic (the host default here is bbr)
        "$LAB" bench sweep --min 1G --max 1G --aggregate 1G \
            --tools hetch,iperf3,gridftp,xrootd --rtt 50 --loss 0,0.1% --rate 2gbit --cc cubic \
            --iterations 2 --data /dev/shm/hetch-bench-loss --results "$OUT/$DATE-wan-loss-cubic.jsonl" || true
        rm -rf /dev/shm/hetch-bench-loss ;;
    loss) # paper 002's loss case: 50 ms, 0.1% loss against none; every peer
        "$LAB" bench sweep --min 1G --max 1G --aggregate 1G \
            --tools "$PEERS" --rtt 50 --loss 0,0.1% --rate 2gbit --iterations 2 \
            --data /dev/shm/hetch-bench-loss --results "$OUT/$DATE-wan-loss.jsonl" || true
        rm -rf /dev/shm/hetch-bench-loss ;;
    sweep) # throughput against file size at RTT 0/50/100 ms (the zx paper's Figs. 4-8)
        "$LAB" bench sweep --min 1K --max 256M --factor 4 --aggregate 512M --max-files 2048 \
            --tools hetch,iperf3 --rtt 0,50,100 --rate 2gbit --iterations 2 \
            --data /dev/shm/hetch-bench-sweep --results "$OUT/$DATE-wan-sweep.jsonl" || true
        rm -rf /dev/shm/hetch-bench-sweep ;;
    cc) # congestion control: cubic, bbr, reno at 50 ms (the zx paper's Fig. 5)
        "$LAB" bench sweep --min 4K --max 256M --factor 16 --aggregate 512M --max-files 2048 \
            --tools hetch --rtt 50 --rate 2gbit --cc cubic,bbr,reno --iterations 2 \
            --data /dev/shm/hetch-bench-cc --results "$OUT/$DATE-wan-cc.jsonl" || true
        rm -rf /dev/shm/hetch-bench-cc ;;
    datasets) # paper 003's six datasets, disk to disk with cold caches, on loopback
        "$LAB" bench datasets --total 1000000000 --tools "$PEERS" --iterations "${DATASETS_ITERATIONS:-2}" --run-timeout 600s \
            --data /var/tmp/hetch-bench-datasets --results "$OUT/$DATE-datasets.jsonl" || true ;;
    *) echo "wan-issue4.sh: unknown step $step" >&2; exit 2 ;;
    esac
done
