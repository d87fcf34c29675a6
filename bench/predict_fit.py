#!/usr/bin/env python3
"""bench/predict_fit.py: fits and scores hetch's transfer-time model (hetch-doctor's
predict.rs) on the benchmark harness's runs of the six datasets of seed 003.

    t = SETUP_RTTS*T + max(n*f + B*c, B/L + RAMP_RTTS*T)

f (s/file) and c (s/byte) are fitted by grid search minimising the MAPE of the
fitting runs; SETUP_RTTS is 5 (the handshakes), RAMP_RTTS is fitted the same way.
Fits on iteration 1 and scores iteration 2 (held out), then prints the MAPE per
dataset and RTT of the constants given (those in predict.rs) over every run.

Usage: bench/predict_fit.py RESULTS.jsonl --rate 2gbit [--f 1.5e-4 --c 2e-9 --ramp 8]
"""
import argparse, collections, json, statistics

ap = argparse.ArgumentParser()
ap.add_argument("results")
ap.add_argument("--rate", default="2gbit")
ap.add_argument("--f", type=float)
ap.add_argument("--c", type=float)
ap.add_argument("--ramp", type=float)
a = ap.parse_args()
rate = float(a.rate.lower().replace("gbit", "")) * 1e9 / 8
SETUP = 5.0

runs = []
for line in open(a.results):
    r = json.loads(line)
    if r.get("tool") != "hetch" or not r.get("ok"):
        continue
    p = r["point"]
    runs.append((p["dataset"], p["files"], p["bytes"], (p["rtt_ms"] or 0) / 1e3, r["iteration"], r["seconds"]))

def predict(n, b, rtt, f, c, ramp):
    return SETUP * rtt + max(n * f + b * c, b / rate + ramp * rtt)

def mape(rows, f, c, ramp):
    return 100 * statistics.mean(abs(predict(n, b, t, f, c, ramp) - s) / s for _, n, b, t, _, s in rows)

def fit(rows):
    best = None
    for fi in range(50, 301, 5):
        for ci in range(10, 61):
            for ramp in range(0, 21):
                m = mape(rows, fi * 1e-6, ci * 1e-10, ramp)
                if best is None or m < best[0]:
                    best = (m, fi * 1e-6, ci * 1e-10, ramp)
    return best

train = [r for r in runs if r[4] == 1]
test = [r for r in runs if r[4] != 1]
m, f, c, ramp = fit(train)
print(f"fit on iteration 1 ({len(train)} runs): f = {f*1e6:.0f} us/file, c = {c*1e9:.2f} ns/byte, ramp = {ramp} RTTs; MAPE {m:.1f}%")
if test:
    print(f"held out (iteration 2, {len(test)} runs): MAPE {mape(test, f, c, ramp):.1f}%")
f = a.f if a.f is not None else f
c = a.c if a.c is not None else c
ramp = a.ramp if a.ramp is not None else ramp
print(f"\nconstants scored: f = {f*1e6:.0f} us/file, c = {c*1e9:.2f} ns/byte, ramp = {ramp} RTTs, set-up {SETUP:.0f} RTTs; all {len(runs)} runs: MAPE {mape(runs, f, c, ramp):.1f}%\n")
cells = collections.defaultdict(list)
for r in runs:
    cells[(r[0], r[3])].append(r)
rtts = sorted({r[3] for r in runs})
print("| dataset | " + " | ".join(f"{t*1e3:.0f} ms: measured / predicted (APE)" for t in rtts) + " | MAPE |")
print("|---|" + "---|" * (len(rtts) + 1))
for ds in sorted({r[0] for r in runs}, key=lambda d: -[r[1] for r in runs if r[0] == d][0]):
    cols, errs = [], []
    for t in rtts:
        rr = cells[(ds, t)]
        meas = statistics.median(r[5] for r in rr)
        pred = predict(rr[0][1], rr[0][2], t, f, c, ramp)
        e = [abs(pred - r[5]) / r[5] for r in rr]
        errs += e
        cols.append(f"{meas:.2f} / {pred:.2f} s ({100*statistics.mean(e):.0f}%)")
    print(f"| {ds} | " + " | ".join(cols) + f" | {100*statistics.mean(errs):.1f}% |")
by_rtt = [f"{t*1e3:.0f} ms {mape([r for r in runs if r[3] == t], f, c, ramp):.1f}%" for t in rtts]
print("\nMAPE per RTT: " + ", ".join(by_rtt))
