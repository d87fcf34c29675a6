#!/usr/bin/env python3
"""Statistics and the Markdown report for bench/core.sh (stdlib only).

Reads the per-run CSV (case,tool,run,seconds,bytes,MB/s,ok,client_rss_kib,server_rss_kib)
and the metadata file core.sh writes (KEY<TAB>VALUE, newlines escaped), and prints the
report: machine and versions, ratio tables against the issue-2 targets with PASS/MISS,
per-point statistics (mean/median/stddev/min/max) and the exact commands.

Ratios compare medians of MB/s; the range shown next to a ratio is the worst case
(hetch's slowest run against the peer's fastest) to the best case.
"""

import argparse
import csv
import statistics
import sys
from collections import OrderedDict


def read_meta(path):
    meta = OrderedDict()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or "\t" not in line:
                continue
            k, v = line.split("\t", 1)
            out, i = [], 0
            while i < len(v):
                c = v[i]
                if c == "\\" and i + 1 < len(v):
                    n = v[i + 1]
                    out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(n, "\\" + n))
                    i += 2
                else:
                    out.append(c)
                    i += 1
            meta[k] = "".join(out)
    return meta


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


class Point:
    """All runs of one (case, tool)."""

    def __init__(self, case, tool):
        self.case, self.tool = case, tool
        self.rows = []

    def ok_rows(self):
        return [r for r in self.rows if r.get("ok") == "1" and num(r.get("seconds"))]

    def values(self, key):
        return [num(r[key]) for r in self.ok_rows() if num(r.get(key)) is not None]

    def mbs(self):
        return [num(r["bytes"]) / num(r["seconds"]) / 1e6 for r in self.ok_rows()]

    def summary(self, vals=None):
        return summary(self.mbs() if vals is None else vals)


def summary(vals):
    """n, mean, median, stddev, min and max of a list of numbers (None when empty)."""
    if not vals:
        return None
    return {
        "n": len(vals),
        "mean": statistics.mean(vals),
        "median": statistics.median(vals),
        "stddev": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "min": min(vals),
        "max": max(vals),
    }


def commands_block(w, meta, width, csv_link):
    """The report's closing lines: the `cmd.*` metadata, then the link to the raw rows."""
    w("```")
    for k, v in meta.items():
        if k.startswith("cmd."):
            w(f"{k[4:]:<{width}} {v}")
    w("```")
    w("")
    if csv_link:
        w(f"Raw results, one row per run: [{csv_link}]({csv_link})")
        w("")


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:,.{digits}f}"


def ratio_row(label, hetch, peer, target, kind="min", pct=False):
    """One line of a ratio table. kind=min: PASS when ratio >= target."""
    h, p = hetch.summary() if hetch else None, peer.summary() if peer else None
    if not h or not p:
        return f"| {label} | n/a | n/a | {target_text(target, pct)} | n/a |"
    r = h["median"] / p["median"]
    lo, hi = h["min"] / p["max"], h["max"] / p["min"]
    if pct:
        val, rng = f"{r * 100:.1f}%", f"{lo * 100:.1f}–{hi * 100:.1f}%"
    else:
        val, rng = f"{r:.2f}x", f"{lo:.2f}–{hi:.2f}x"
    if target is None:
        verdict = "(info)"
    else:
        ok = r >= target
        verdict = "**PASS**" if ok else f"**MISS** ({short_by(r, target, pct)})"
    return f"| {label} | {val} | {rng} | {target_text(target, pct)} | {verdict} |"


def short_by(r, target, pct):
    if pct:
        return f"{(target - r) * 100:.1f} points short"
    return f"{target / r:.2f}x short"


def target_text(target, pct):
    if target is None:
        return "—"
    return f"≥ {target * 100:.0f}%" if pct else f"≥ {target:g}x"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--csv-link", default=None, help="link text/target for the raw CSV")
    a = ap.parse_args()

    meta = read_meta(a.meta)
    rows = read_rows(a.csv)
    points = OrderedDict()
    for r in rows:
        key = (r["case"], r["tool"])
        points.setdefault(key, Point(*key)).rows.append(r)

    def P(case, tool):
        return points.get((case, tool))

    m = meta.get
    out = []
    w = out.append
    w("# hetch core transfer benchmark (issue 2)")
    w("")
    w(f"- Date: {m('date', '?')}; mode: **{m('mode', '?')}**; runs per point: {m('runs', '?')}")
    w(f"- Command: `{m('command', '?').strip()}`")
    w(f"- hetch: `{m('v.hetch', '?')}` at commit {m('git', '?')}; build: `{m('build', '?')}`, "
      "binary target/release/hetch")
    w(f"- Work dir (sources, disk destinations): {m('work', '?')}; warm-case destination: "
      f"{m('warm_dst', '?')}")
    w(f"- Load average (1/5/15 min) at start: {m('load_start', '?')}; at end: {m('load_end', '?')}")
    if m("cold.fs"):
        w(f"- Cold-case destinations: {m('cold.fs')}")
    if m("idle_wait"):
        w(f"- Waiting for an idle machine before each timed run: {m('idle_wait')}")
    if m("caches_dropped") != "1":
        w("- **Warning: page caches could NOT be dropped (not root?); cold numbers are warm.**")
    w("")
    w("## Machine and versions")
    w("")
    w("| what | value |")
    w("| --- | --- |")
    w(f"| nproc | {m('m.nproc', '?')} |")
    w(f"| CPU (lscpu) | {m('m.cpu', '?')} |")
    w(f"| kernel (uname -r) | {m('v.kernel', '?')} |")
    for k, label in [("v.hetch", "hetch --version"), ("v.iperf3", "iperf3 --version"),
                     ("v.rsync", "rsync --version \\| head -1"), ("v.ssh", "ssh -V"),
                     ("v.fio", "fio --version"), ("v.tar", "tar --version \\| head -1"),
                     ("v.cp", "cp --version \\| head -1")]:
        w(f"| {label} | `{m(k, '?')}` |")
    if m("ssh.cipher"):
        w(f"| ssh cipher negotiated (defaults) | `{m('ssh.cipher')}` |")
    w("")
    w("`free -g`:")
    w("")
    w("```")
    w(m("m.free", "?"))
    w("```")
    w("")

    # ---- 1. limits
    w("## 1. Limits")
    w("")
    w("| limit | median | mean | stddev | min | max | runs |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    ip = P("net", "iperf3")
    s = ip.summary() if ip else None
    if s:
        g = 8 / 1000  # MB/s -> Gbit/s
        w(f"| iperf3 single stream, {m('iperf_t', '?')} s (Gbit/s) | {s['median'] * g:.2f} | "
          f"{s['mean'] * g:.2f} | {s['stddev'] * g:.2f} | {s['min'] * g:.2f} | {s['max'] * g:.2f} | {s['n']} |")
        w(f"| iperf3 single stream (MB/s) | {fmt(s['median'])} | {fmt(s['mean'])} | "
          f"{fmt(s['stddev'])} | {fmt(s['min'])} | {fmt(s['max'])} | {s['n']} |")
    for tool, label in [("fio-seqread", "fio seq read, direct=1 (MB/s)"),
                        ("fio-seqwrite", "fio seq write, direct=1 (MB/s)"),
                        ("fio-copy", "fio copy limit: read one file while writing another, "
                                     "direct=1, min of the two (MB/s)")]:
        p = P("disk", tool)
        s = p.summary() if p else None
        if s:
            w(f"| {label} | {fmt(s['median'])} | {fmt(s['mean'])} | {fmt(s['stddev'])} | "
              f"{fmt(s['min'])} | {fmt(s['max'])} | {s['n']} |")
    w("")

    fio_copy = P("disk", "fio-copy")

    # ---- 2. warm loopback
    w(f"## 2. One big file ({m('size.big', '?')}), page cache warm, loopback, vs iperf3")
    w("")
    w("Destination on tmpfs, so the disk is out of the picture; the time is hetch's "
      "wall-clock time (process start to exit, including the TLS handshakes and its final "
      "syncfs).")
    w("")
    w("| ratio (medians of MB/s) | value | range (worst–best run) | target | result |")
    w("| --- | --- | --- | --- | --- |")
    w(ratio_row("hetch push, defaults (TLS + block digests) / iperf3",
                P("warm-big", "hetch-tls"), ip, 0.70, pct=True))
    w(ratio_row("hetch push --no-encrypt --verify none / iperf3", P("warm-big", "hetch-plain"), ip, 0.80, pct=True))
    w("")

    # ---- 3. cold copies
    for case, size in [("cold-big", m("size.big", "?")), ("cold-1M", m("size.1M", "?"))]:
        if not any(k[0] == case for k in points):
            continue
        w(f"## 3. {size}, caches dropped, final sync timed ({case})")
        w("")
        w("| ratio (medians of MB/s) | value | range (worst–best run) | target | result |")
        w("| --- | --- | --- | --- | --- |")
        h = P(case, "hetch")
        w(ratio_row("hetch / scp -r (sshd on 127.0.0.1)", h, P(case, "scp"), 3.0))
        peers = [p for p in (P(case, "rsyncd"), P(case, "cp")) if p and p.summary()]
        best = max(peers, key=lambda p: p.summary()["median"]) if peers else None
        name = {"rsyncd": "rsync -a daemon", "cp": "cp -r"}.get(best.tool, best.tool) if best else "?"
        w(ratio_row(f"hetch / best of (rsync daemon, cp -r) = {name}", h, best, 1.5))
        for p, label in [(P(case, "rsyncd"), "hetch / rsync -a (daemon)"), (P(case, "cp"), "hetch / cp -r")]:
            w(ratio_row(label, h, p, None))
        w(ratio_row("hetch / fio copy limit (fraction of the disk's copy limit)", h, fio_copy, None, pct=True))
        w("")

    # ---- 4. small files
    if any(k[0] == "cold-16K" for k in points):
        w(f"## 4. Small files ({m('size.16K', '?')}), caches dropped, final sync timed")
        w("")
        w("| ratio (medians of MB/s) | value | range (worst–best run) | target | result |")
        w("| --- | --- | --- | --- | --- |")
        h = P("cold-16K", "hetch")
        w(ratio_row("hetch / tar -cf - \\| tar -xf - (local pipe)", h, P("cold-16K", "tar"), 0.5))
        w(ratio_row("hetch / rsync -a over ssh to 127.0.0.1", h, P("cold-16K", "rsync-ssh"), 3.0))
        w("")

    # ---- 4b. cost per byte and per file (issue 17)
    cold = [c for c in ("cold-big", "cold-1M", "cold-16K") if any(k[0] == c for k in points)]
    if cold:
        tools = ["hetch", "hetch-hxa", "hetch-plain", "hetch-received", "hetch-local", "cp", "tar",
                 "rsyncd", "rsync-ssh", "gridftp", "scp"]
        names = {"hetch": "hetch (defaults: TLS, --verify written)",
                 "hetch-plain": "hetch --no-encrypt --verify none",
                 "hetch-received": "hetch --no-encrypt --verify received",
                 "hetch-hxa": "hetch -H -X -A (defaults otherwise)",
                 "hetch-local": "hetch cp, local (defaults)", "cp": "cp -r",
                 "tar": "tar \\| tar", "rsyncd": "rsync daemon", "rsync-ssh": "rsync over ssh",
                 "gridftp": "GridFTP (clear, no checksum)", "scp": "scp"}
        tools = [t for t in tools if any(P(c, t) for c in cold)]
        w("## 4b. Cost per byte and per file: seconds and CPU-seconds (issues 17 and 39)")
        w("")
        w("Median wall seconds (the final `sync` included) and median CPU-seconds of the whole "
          "machine over the same interval (both ends of the copy, their helpers and kernel "
          "writeback; /proc/stat user+nice+system+irq+softirq+steal).")
        w("")
        w("| dataset | " + " | ".join(names[t] for t in tools) + " |")
        w("|---|" + "---|" * len(tools))

        def med(p, key):
            vals = p.values(key) if p else []
            return statistics.median(vals) if vals else None

        for c in cold:
            cells = []
            for t in tools:
                p = P(c, t)
                s_, cpu = med(p, "seconds"), med(p, "cpu_s")
                cells.append("n/a" if s_ is None else f"{s_:.2f} s, {fmt(cpu) if cpu is not None else '?'}")
            w(f"| {m('size.' + c.split('-')[1], c)} | " + " | ".join(cells) + " |")
        w("")
        w("| target | measured | result |")
        w("| --- | --- | --- |")

        def target(label, a, b, factor, key, less=True):
            x, y = med(a, key), med(b, key)
            if x is None or y is None:
                w(f"| {label} | n/a | n/a |")
                return
            ok = x <= factor * y if less else x >= factor * y
            w(f"| {label} | {x:.2f} vs {y:.2f} ({x / y:.2f}x) | {'**PASS**' if ok else '**MISS**'} |")

        # Issue 39's targets (they replace issue 17's, which they tighten).
        h16 = P("cold-16K", "hetch")
        for peer in ("tar", "rsyncd"):
            target(f"16 KiB files: hetch seconds <= 0.9 x {names[peer]}", h16, P("cold-16K", peer), 0.9,
                   "seconds")
        target("16 KiB files: hetch CPU-s <= rsync daemon", h16, P("cold-16K", "rsyncd"), 1.0, "cpu_s")
        h1 = P("cold-1M", "hetch")
        target("1 MiB files: hetch seconds <= 1.05 x cp -r", h1, P("cold-1M", "cp"), 1.05, "seconds")
        target("1 MiB files: hetch CPU-s <= 1.3 x GridFTP", h1, P("cold-1M", "gridftp"), 1.3, "cpu_s")
        hb = P("cold-big", "hetch")
        target("big file: hetch seconds <= 1.05 x cp -r", hb, P("cold-big", "cp"), 1.05, "seconds")
        target("big file: hetch CPU-s <= 1.3 x GridFTP", hb, P("cold-big", "gridftp"), 1.3, "cpu_s")
        target("big file: hetch --no-encrypt --verify received CPU-s <= GridFTP",
               P("cold-big", "hetch-received"), P("cold-big", "gridftp"), 1.0, "cpu_s")
        for c in cold:
            target(f"{m('size.' + c.split('-')[1], c)}: local hetch cp seconds <= cp -r",
                   P(c, "hetch-local"), P(c, "cp"), 1.0, "seconds")
        w("")

    # ---- 5. RSS
    if any(k[0].startswith("rss-") for k in points):
        w("## 5. Peak RSS while moving many tiny files (hetch push, loopback)")
        w("")
        w("Peak over all runs; client from `/usr/bin/time -f %M`, server from VmHWM of a "
          "fresh server per run.")
        w("")
        w("| point | client peak (MiB) | server peak (MiB) | target | result |")
        w("| --- | --- | --- | --- | --- |")
        peaks = {}
        for point in ("rss-small", "rss-large"):
            p = P(point, "hetch")
            if not p:
                continue
            c = max(p.values("client_rss_kib"), default=None)
            sv = max(p.values("server_rss_kib"), default=None)
            peaks[point] = (c, sv)
            worst = max([x for x in (c, sv) if x is not None], default=None)
            if worst is None:
                verdict = "n/a"
            elif worst / 1024 <= 256:
                verdict = "**PASS**"
            else:
                verdict = f"**MISS** ({worst / 1024 / 256:.2f}x over)"
            cm = fmt(c / 1024) if c else "n/a"
            sm = fmt(sv / 1024) if sv else "n/a"
            w(f"| {m('size.' + point, point)} | {cm} | {sm} | ≤ 256 MiB each | {verdict} |")
        if len(peaks) == 2 and all(peaks["rss-small"]) and all(peaks["rss-large"]):
            cs, ss = peaks["rss-small"]
            cl, sl = peaks["rss-large"]
            w("")
            w(f"Flatness (10x the files): client {cl / cs:.2f}x, server {sl / ss:.2f}x the "
              "smaller point's peak (1.00x = flat).")
        w("")

    # ---- raw stats
    w("## All points")
    w("")
    w("MB = 10^6 bytes. `ok` counts runs that exited 0 and left the right number of files "
      "and bytes at the destination; failed runs are excluded from the statistics.")
    w("")
    w("| case | tool | ok/runs | MB/s mean | median | stddev | min | max | seconds (median) | files/s (median) | client RSS max (MiB) |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    files_of = {}
    for k, v in meta.items():
        if k.startswith("size.") and "files x" in v:
            try:
                files_of[k[5:]] = int(v.split()[0])
            except ValueError:
                pass
    case_size = {"warm-big": "big", "cold-big": "big", "cold-1M": "1M", "cold-16K": "16K",
                 "rss-small": "rss-small", "rss-large": "rss-large"}
    busy_rows = [r for r in rows if (num(r.get("busy_before_pct")) or 0) >= 25]
    for (case, tool), p in points.items():
        s = p.summary()
        secs = p.values("seconds")
        med_s = statistics.median(secs) if secs else None
        nfiles = files_of.get(case_size.get(case, ""))
        fps = fmt(nfiles / med_s, 0) if (nfiles and med_s and nfiles > 1) else ""
        rss = p.values("client_rss_kib")
        rssm = fmt(max(rss) / 1024) if rss else ""
        okn = f"{len(p.ok_rows())}/{len(p.rows)}"
        if s:
            w(f"| {case} | {tool} | {okn} | {fmt(s['mean'])} | {fmt(s['median'])} | "
              f"{fmt(s['stddev'])} | {fmt(s['min'])} | {fmt(s['max'])} | {fmt(med_s, 3)} | {fps} | {rssm} |")
        else:
            w(f"| {case} | {tool} | {okn} | n/a | n/a | n/a | n/a | n/a | n/a | | |")
    w("")

    if busy_rows:
        w(f"{len(busy_rows)} of {len(rows)} runs started while the machine was busy (>= 25% of "
          "all CPUs in use just before the run; column busy_before_pct of the CSV): "
          + ", ".join(f"{r['case']}/{r['tool']}#{r['run']} ({r['busy_before_pct']}%)" for r in busy_rows))
        w("")

    # ---- commands
    w("## Commands")
    w("")
    w("Every cold run: destination removed, `sync; echo 3 > /proc/sys/vm/drop_caches`, then "
      "timed: the command followed by `sync`. Warm runs: the source is read with `cat` first; "
      "no sync. Runs of different tools are interleaved (run 1 of every tool, then run 2, ...).")
    w("")
    commands_block(w, meta, 13, a.csv_link)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
