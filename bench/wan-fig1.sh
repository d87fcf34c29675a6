#!/usr/bin/env bash
# bench/wan-fig1.sh: reproduces the shape of Fig. 1 of the zx paper (seed 000) on the
# `hetch-lab wan` testbed: one iperf3 TCP stream from host a to host b at RTT 0/10/50/100 ms,
# with the namespaces' default socket-buffer limits and with tuned ones (tcp_rmem and
# tcp_wmem maximum raised to 64 MiB in both namespaces; these sysctls are per network
# namespace, net.core.rmem_max/wmem_max are not). Also records the delay line's measured
# round trip (UDP echo) against the configured RTT.
#
# Usage: bench/wan-fig1.sh [--runs N] [--seconds S] [--rtts "0 10 50 100"] [--rate R]
# Needs root, iperf3 and python3; builds hetch (release) unless --no-build.
# Output: bench/results/<date>-wan-fig1.{csv,md}
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=2; SECS=8; RTTS="0 10 50 100"; RATE=0; BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --rtts) RTTS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) echo "wan-fig1.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "wan-fig1.sh: needs root (network namespaces)" >&2; exit 2; }
[ "$BUILD" = 1 ] && (cd "$ROOT" && cargo build --release -p hetch -p hetch-lab >&2)
H=$ROOT/target/release/hetch
LAB=$ROOT/target/release/hetch-lab  # the harness and the testbed; it runs $H
DATE=$(date -u +%Y-%m-%d)
CSV=$ROOT/bench/results/$DATE-wan-fig1.csv
MD=$ROOT/bench/results/$DATE-wan-fig1.md
trap '"$LAB" wan down >/dev/null 2>&1 || true; pkill -f "udp-echo-hetch" || true' EXIT

# A UDP echo on b and a client on a: the round trip the link really gives.
ECHO='import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
if sys.argv[1]=="server":
    s.bind(("10.77.0.2",9999))
    while True:
        d,a=s.recvfrom(2048); s.sendto(d,a)
r=[]
for i in range(30):
    t=time.perf_counter(); s.sendto(b"x",("10.77.0.2",9999)); s.recvfrom(2048); r.append((time.perf_counter()-t)*1000); time.sleep(0.02)
r.sort(); print("%.2f %.2f %.2f"%(r[0],r[len(r)//2],r[-1]))'

echo "rtt_ms,buffers,run,gbit_per_s,retransmits,ping_min_ms,ping_median_ms,ping_max_ms" > "$CSV"
for rtt in $RTTS; do
    "$LAB" wan down >/dev/null 2>&1 || true
    "$LAB" wan up --untuned --rtt "${rtt}ms" --rate "$RATE" >&2
    ip netns exec hetch-b python3 -c "$ECHO" server udp-echo-hetch & 
    sleep 0.3
    read -r pmin pmed pmax < <(ip netns exec hetch-a python3 -c "$ECHO" client)
    pkill -f "udp-echo-hetch" || true
    for buffers in default tuned; do
        if [ "$buffers" = tuned ]; then
            for ns in hetch-a hetch-b; do
                ip netns exec $ns sysctl -q -w net.ipv4.tcp_rmem="4096 131072 67108864" net.ipv4.tcp_wmem="4096 16384 67108864"
            done
        fi
        for run in $(seq 1 "$RUNS"); do
            ip netns exec hetch-b iperf3 -s -1 -D >/dev/null
            sleep 0.3
            json=$(ip netns exec hetch-a iperf3 -c 10.77.0.2 -t "$SECS" -J)
            read -r gbps retr < <(python3 -c 'import json,sys; d=json.load(sys.stdin)["end"]; print("%.3f %d" % (d["sum_received"]["bits_per_second"]/1e9, d["sum_sent"].get("retransmits",0)))' <<<"$json")
            echo "$rtt,$buffers,$run,$gbps,$retr,$pmin,$pmed,$pmax" >> "$CSV"
            echo "[fig1] rtt ${rtt} ms, $buffers buffers, run $run: $gbps Gbit/s (udp rtt median ${pmed} ms)" >&2
        done
    done
    "$LAB" wan down >/dev/null
done

python3 - "$CSV" "$MD" "$RUNS" "$SECS" "$RATE" <<'PY'
import csv, statistics, sys, subprocess, platform
rows = list(csv.DictReader(open(sys.argv[1])))
runs, secs, rate = sys.argv[3], sys.argv[4], sys.argv[5]
def v(cmd):
    try: return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception: return "?"
out = ["# Fig. 1 reproduction on the `hetch-lab wan` testbed", "",
       f"Command: `bench/wan-fig1.sh --runs {runs} --seconds {secs} --rate {rate}`; {v('iperf3 --version')}; kernel {platform.release()}.",
       "One iperf3 TCP stream a -> b through hetch's userspace delay line (MTU 9000, no rate limit unless given).",
       "default = the namespaces' own limits (tcp_rmem max inherited: " + v("sysctl -n net.ipv4.tcp_rmem") + "; tcp_wmem max: " + v("sysctl -n net.ipv4.tcp_wmem") + "); tuned = tcp_rmem and tcp_wmem max 64 MiB in both namespaces.", "",
       "| RTT (ms) | measured UDP RTT min/median/max (ms) | default (Gbit/s, median) | tuned (Gbit/s, median) |", "|---|---|---|---|"]
for rtt in sorted({int(r["rtt_ms"]) for r in rows}):
    rr = [r for r in rows if int(r["rtt_ms"]) == rtt]
    med = lambda b: statistics.median(float(r["gbit_per_s"]) for r in rr if r["buffers"] == b)
    p = rr[0]
    out.append(f"| {rtt} | {p['ping_min_ms']} / {p['ping_median_ms']} / {p['ping_max_ms']} | {med('default'):.2f} | {med('tuned'):.2f} |")
out += ["", "Raw rows: [" + sys.argv[1].split("/")[-1] + "](" + sys.argv[1].split("/")[-1] + ")"]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
