#!/usr/bin/env python3
"""The machine's floor for bench/limit.sh (issue 39 item 6); stdlib only, Python 3.11.

  limit.py build --meta TSV --raw JSONL --json OUT --md OUT
        medians of limit.sh's raw measurements, the floors, the report (and a table on
        stdout)
  limit.py show LIMIT.json
        the floors again from the raw measurements stored in LIMIT.json, with the model
        as it is in this file now (edit MODES / SCENARIOS / DATASETS below to disagree)
  limit.py rebuild LIMIT.json
        the same, and LIMIT.json and LIMIT.md rewritten with it
  limit.py ratio LIMIT.json CORE.csv [--mode MODE]
        a bench/core.sh result as a fraction of the floor: for every case and tool,
        time_floor/time and cpu_floor/cpu of the medians (1.0 = at the floor)
  limit.py time --bytes N -- CMD...    (used by limit.sh) CMD's wall, user and system time
  limit.py iperf3 JSON | fio JSON BUSY [FSYNC] | kcpu   (used by limit.sh) the figures kept
        from iperf3's and fio's JSON; the kernel threads' CPU-seconds so far

The model, term by term, is MODEL_TEXT below; it is also written into the results.
"""

import argparse
import csv
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

GB = 1e9
MiB = 1 << 20

# ---------------------------------------------------------------------------- model
# Passes over every byte, per mode. aes: encrypt at the source and decrypt at the
# destination (1 each); blake3: BLAKE3 passes; readback: the destination reads what it
# wrote back from its storage (device when cold, tmpfs when warm).
MODES = {
    "defaults": {"flags": "TLS 1.3 AES-256-GCM, --verify written", "aes": True, "blake3": 2, "readback": True},
    "plain": {"flags": "--no-encrypt --verify received", "aes": False, "blake3": 2, "readback": False},
    "plain-none": {"flags": "--no-encrypt --verify none (core.sh's hetch-plain)", "aes": False, "blake3": 1, "readback": False},
}
SOCKET_COPIES = 2  # send (user -> socket buffer) and receive (socket buffer -> user)

# Scenarios: cold = source read from the device, destination written to it (direct I/O,
# no page-cache copy); warm = source in the page cache, destination on tmpfs (each
# page-cache access is a copy: no zero-copy, no mmap).
SCENARIOS = {
    "cold": {"what": "source read from the device, destination written to it (same disk), direct I/O",
             "src_copies": 0, "dst_copies": 0, "readback_copies": 0, "device": True,
             "phases": ["files_create", "files_walk_direct"], "readback_phase": "files_readback_direct"},
    "warm": {"what": "source in the page cache, destination on tmpfs",
             "src_copies": 1, "dst_copies": 1, "readback_copies": 1, "device": False,
             "phases": ["files_walk_warm", "files_create_tmpfs"], "readback_phase": "files_readback_tmpfs"},
}
# The page-cache copies each per-file phase makes (subtracted from its CPU, since the
# per-byte terms count them where the model says they are unavoidable).
PHASE_COPIES = {
    "files_create": 1, "files_walk_direct": 0, "files_readback_direct": 0,
    "files_walk_warm": 1, "files_create_tmpfs": 1, "files_readback_tmpfs": 1,
}
PHASE_WHAT = {
    "files_create": "create: open(O_CREAT|O_EXCL), write, futimens, close; one syncfs (cold fs)",
    "files_walk_direct": "list (readdir) + open, fstat, O_DIRECT read, close; 8 threads (cold)",
    "files_readback_direct": "by name: open, O_DIRECT read, close; 8 threads (cold read-back)",
    "files_walk_warm": "list + open, fstat, read, close, from the page cache; 1 thread",
    "files_create_tmpfs": "create on tmpfs: open, write, futimens, close; 1 thread",
    "files_readback_tmpfs": "by name on tmpfs: open, read, close; 1 thread",
}
# bench/core.sh's datasets.
DATASETS = [
    ("1 x 2 GiB", 1, 2048 * MiB),
    ("1,000 x 1 MiB", 1000, 1000 * MiB),
    ("20,000 x 16 KiB", 20000, 20000 * 16384),
]

MODEL_TEXT = [
    "Modes: defaults = TLS 1.3 AES-256-GCM both ways, BLAKE3 of every block at the source, "
    "--verify written (the destination reads back what it wrote, from the device when cold, "
    "and hashes it with BLAKE3); plain = --no-encrypt --verify received (BLAKE3 at the source "
    "and of what arrived at the destination, no read-back); plain-none = --no-encrypt "
    "--verify none (BLAKE3 at the source only: what core.sh's hetch-plain runs).",
    "Least CPU-seconds = bytes x (1/AES-GCM encrypt + 1/AES-GCM decrypt [defaults] "
    "+ passes/BLAKE3 [defaults 2: source and read-back; plain 2: source and arrival; "
    "plain-none 1] + copies/memcpy) + files x per-file CPU. All rates are one core's.",
    "copies: 2 across the socket (send, receive). Cold: 0 more (direct I/O at both ends: "
    "the device reads into and writes from the mover's buffers). Warm: +1 reading the cached "
    "source, +1 writing tmpfs, +1 reading tmpfs back (defaults only); no zero-copy, no mmap.",
    "Per-file CPU: the CPU-seconds of the per-file phases the mode needs, measured on files of "
    "16 KiB (the program's own plus the kernel's threads: writeback, journal, loop device; "
    "the whole machine's figure, which also counts other users of a shared machine, is kept "
    "beside), less the page-cache copies they make "
    "(counted per byte above), divided by the files: cold = create + syncfs, list + direct "
    "read, [defaults] direct read-back; warm = list + read from cache, create on tmpfs, "
    "[defaults] read back from tmpfs. The same cost per file is assumed for 1 MiB files.",
    "Left out (so the floor is lower than any real mover): the mover's own per-file "
    "bookkeeping and messages, TLS record framing, TCP's per-byte work beyond the two copies "
    "(the alternative floor below charges the socket at iperf3's measured CPU-s per GB), the "
    "device's per-file costs in the time (metadata, journal, latency: only their CPU is in).",
    "Shortest time = max(CPU floor / cores, loopback bytes / iperf3 rate, device time). "
    "Device time (cold only; source and destination on one device, as in core.sh): reads = "
    "bytes (source) [+ bytes (read-back), defaults], writes = bytes; while both are pending "
    "they go at the mixed run's read and write rates, the rest at the read or write rate alone "
    "(or all reads, then all writes, if that is faster). Computed with each repetition's own "
    "four disk rates (they move together), the median of the repetitions kept.",
    "The last column: the device time if reads and writes did not slow each other down "
    "(max(reads / read rate, writes / write rate)), for comparison; not part of the floor.",
    "Rates: memcpy of a 256 MiB buffer and BLAKE3 of 4 MiB blocks of a 256 MiB buffer (the "
    "data not in the CPU's caches, as a block just read from a device or socket), divided "
    "by CPU time; AES-256-GCM from openssl speed on 16 KiB (TLS record size, in cache). The "
    "fastest BLAKE3 measured of the C reference and b3sum (user time) is used.",
]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------------------- helpers for limit.sh
def cmd_time(args):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(args.argv, stdout=subprocess.DEVNULL)
    w = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(p.returncode)
    print(json.dumps({"bytes": args.bytes, "wall_s": round(w, 6),
                      "user_s": round(r1.ru_utime - r0.ru_utime, 6),
                      "sys_s": round(r1.ru_stime - r0.ru_stime, 6)}))


def cmd_iperf3(args):
    d = json.load(open(args.json))
    e = d["end"]
    rec, sent = e["sum_received"], e["sum_sent"]
    cpu = e.get("cpu_utilization_percent", {})
    secs = rec["seconds"]
    out = {"bytes": rec["bytes"], "seconds": secs, "sent_bytes": sent["bytes"],
           "retransmits": sent.get("retransmits"),
           "host_cpu_pct": cpu.get("host_total"), "remote_cpu_pct": cpu.get("remote_total")}
    if cpu:
        out["iperf3_cpu_s"] = round((cpu["host_total"] + cpu["remote_total"]) / 100 * sent["seconds"], 4)
    print(json.dumps(out))


def cmd_fio(args):
    d = json.load(open(args.json))
    jobs = []
    for j in d["jobs"]:
        for k in ("read", "write"):
            s = j[k]
            if s["io_bytes"] > 0:
                jobs.append({"job": j["jobname"], "rw": k, "bytes": s["io_bytes"],
                             "runtime_s": s["runtime"] / 1000.0,
                             "job_runtime_s": j.get("job_runtime", s["runtime"]) / 1000.0,
                             "bw_bytes": s["bw_bytes"],
                             "sys_cpu_pct": j.get("sys_cpu"), "usr_cpu_pct": j.get("usr_cpu")})
    print(json.dumps({"jobs": jobs, "fsync_after_s": float(args.fsync), "busy_before_pct": int(args.busy)}))


def kernel_cpu_s():
    """CPU-seconds so far of every kernel thread (children of kthreadd: writeback, the
    journal, the loop device's workers, ksoftirqd): what the kernel does for a measured
    program outside the program's own CPU time, without the CPU of other programs that
    share the machine. Interrupts are left to whichever task they interrupt (without
    CONFIG_IRQ_TIME_ACCOUNTING, as here, a task's system time includes them; adding
    /proc/stat's irq and softirq would count them twice); those that land on an idle CPU
    are not counted."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rfind(")") + 2:].split()
        # rest[0] = state, rest[1] = ppid, rest[11] = utime, rest[12] = stime
        if pid == "2" or rest[1] == "2":
            total += int(rest[11]) + int(rest[12])
    return total / tick


def cmd_kcpu(args):
    print(f"{kernel_cpu_s():.2f}")


# ---------------------------------------------------------------------------- measurements
def read_meta(path):
    meta = {}
    for line in open(path):
        line = line.rstrip("\n")
        if "\t" not in line:
            continue
        k, v = line.split("\t", 1)
        v = v.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
        meta[k] = v
    return meta


def by_kind(raw):
    out = {}
    for r in raw:
        out.setdefault(r["kind"], []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["run"])
    return out


def fio_rate(r, rw, job=None):
    """GB/s of the job doing rw (named job, in a mixed run); a lone write's rate includes
    the fsync limit.sh timed after it."""
    for j in r["data"]["jobs"]:
        if j["rw"] == rw and (job is None or j["job"] == job):
            secs = j["runtime_s"] + (r["data"].get("fsync_after_s", 0) if job is None else 0)
            return j["bytes"] / secs / GB
    return None


def measurements(raw):
    """Every figure: per-run values (GB/s unless said), median, how."""
    k = by_kind(raw)
    m = {}

    def put(name, unit, how, vals, extra=None):
        if not vals:
            return
        e = {"unit": unit, "how": how, "values": [round(v, 4) if v is not None else None for v in vals],
             "median": round(med(vals), 4)}
        if extra:
            e.update(extra)
        m[name] = e

    rate = lambda r: r["data"]["bytes"] / r["data"]["cpu_s"] / GB  # noqa: E731
    put("memcpy", "GB/s", "one core copies a 256 MiB buffer into another (bytes copied / CPU time)",
        [rate(r) for r in k.get("memcpy", [])])
    put("memcpy_cached", "GB/s", "the same with a 4 MiB buffer (in the caches; not used)",
        [rate(r) for r in k.get("memcpy_cached", [])])
    if "blake3_c" in k:
        impl = k["blake3_c"][0]["data"].get("impl", "BLAKE3 C")
        put("blake3_c", "GB/s", f"{impl} reference, one core, 4 MiB blocks of a 256 MiB buffer",
            [rate(r) for r in k["blake3_c"]])
        put("blake3_c_cached", "GB/s", f"{impl}, one 4 MiB block again and again (in cache; not used)",
            [rate(r) for r in k.get("blake3_c_cached", [])])
    if "b3sum" in k:
        put("b3sum_user", "GB/s", "b3sum --num-threads 1 of a file on tmpfs, bytes / user time (the hashing)",
            [r["data"]["bytes"] / r["data"]["user_s"] / GB for r in k["b3sum"]])
        put("b3sum_cpu", "GB/s", "the same, bytes / (user + system) time (with reading the file)",
            [r["data"]["bytes"] / (r["data"]["user_s"] + r["data"]["sys_s"]) / GB for r in k["b3sum"]])
    put("aes_gcm_encrypt", "GB/s", "openssl speed -evp aes-256-gcm -bytes 16384 (per user CPU second)",
        [r["data"]["bytes_per_s"] / GB for r in k.get("aes_gcm_encrypt", [])])
    put("aes_gcm_decrypt", "GB/s", "the same with -decrypt",
        [r["data"]["bytes_per_s"] / GB for r in k.get("aes_gcm_decrypt", [])])
    ip = k.get("iperf3", [])
    put("loopback", "GB/s", "iperf3, one TCP stream on 127.0.0.1 (received bytes / seconds)",
        [r["data"]["bytes"] / r["data"]["seconds"] / GB for r in ip])
    put("loopback_cpu", "CPU-s/GB", "CPU-seconds per GB moved by iperf3: both ends' own (iperf3 -J) "
        "+ the kernel's threads",
        [(r["data"]["iperf3_cpu_s"] + r["data"].get("kernel_cpu_s", 0)) / (r["data"]["bytes"] / GB)
         for r in ip if r["data"].get("iperf3_cpu_s")])
    put("loopback_machine_cpu", "CPU-s/GB", "the same, the whole machine's busy CPU-seconds (/proc/stat; "
        "counts other users of the machine too)",
        [r["data"]["machine_cpu_s"] / (r["data"]["bytes"] / GB) for r in ip])
    put("disk_write", "GB/s", "fio sequential write, direct, 4 MiB, iodepth 4, and the fsync after it",
        [fio_rate(r, "write") for r in k.get("fio_write", [])])
    put("disk_read", "GB/s", "fio sequential read of that file, direct, 4 MiB, iodepth 4",
        [fio_rate(r, "read") for r in k.get("fio_read", [])])
    mixed = [(fio_rate(r, "read", "read"), fio_rate(r, "write", "write")) for r in k.get("fio_mixed", [])]
    if mixed:
        # read and write of one run belong together: the run with the median sum is kept
        mid = sorted(mixed, key=lambda p: p[0] + p[1])[(len(mixed) - 1) // 2]
        how = "of the run with the median read + write sum"
        put("disk_mixed_read", "GB/s", f"mixed run: the reading job, while another job writes ({how})",
            [p[0] for p in mixed], {"median": round(mid[0], 4)})
        put("disk_mixed_write", "GB/s", f"mixed run: the writing job, while the other reads ({how})",
            [p[1] for p in mixed], {"median": round(mid[1], 4)})
    for ph, what in PHASE_WHAT.items():
        rs = k.get(ph, [])
        if not rs:
            continue
        files = rs[0]["data"]["files"]
        put(ph, "CPU-s", f"{files:,} files of {rs[0]['data']['size']} B: {what}; the program's own CPU "
            "+ the kernel's threads",
            [r["data"]["cpu_s"] + r["data"]["kernel_cpu_s"] for r in rs],
            {"files": files, "size": rs[0]["data"]["size"],
             "wall_s": [r["data"]["wall_s"] for r in rs], "wall_median": round(med([r["data"]["wall_s"] for r in rs]), 4),
             "own_cpu_s": [round(r["data"]["cpu_s"], 4) for r in rs],
             "kernel_cpu_s": [r["data"]["kernel_cpu_s"] for r in rs],
             "machine_cpu_s": [r["data"]["machine_cpu_s"] for r in rs],
             "busy_before_pct": [r["data"].get("busy_before_pct") for r in rs]})
    return m


def disk_runs(m):
    """(read, write, mixed read, mixed write) GB/s of each repetition: the device time is
    computed per repetition (the figures of one moment together) and its median kept."""
    names = ("disk_read", "disk_write", "disk_mixed_read", "disk_mixed_write")
    if not all(n in m for n in names):
        return []
    return [list(x) for x in zip(*(m[n]["values"] for n in names)) if None not in x]


def rates_used(m):
    def g(name):
        return m[name]["median"] if name in m else None

    b3 = [(g("blake3_c"), "BLAKE3 C reference (4 MiB blocks, 256 MiB buffer)"),
          (g("b3sum_user"), "b3sum --num-threads 1 (user time)")]
    b3 = [x for x in b3 if x[0]]
    blake3, blake3_src = max(b3) if b3 else (None, "none")
    u = {"memcpy": g("memcpy"), "blake3": blake3, "blake3_source": blake3_src,
         "aes_enc": g("aes_gcm_encrypt"), "aes_dec": g("aes_gcm_decrypt") or g("aes_gcm_encrypt"),
         "loopback": g("loopback"), "loopback_cpu_per_gb": g("loopback_cpu"),
         "read": g("disk_read"), "write": g("disk_write"),
         "mixed_read": g("disk_mixed_read"), "mixed_write": g("disk_mixed_write"),
         "disk_runs": disk_runs(m)}
    # per-file CPU-seconds, each phase less its page-cache copies
    pf = {}
    for ph, copies in PHASE_COPIES.items():
        if ph in m:
            e = m[ph]
            copied = copies * e["files"] * e["size"] / (u["memcpy"] * GB)
            pf[ph] = max(0.0, e["median"] - copied) / e["files"]
    u["per_file_cpu_s"] = pf
    return u


# ---------------------------------------------------------------------------- floors
def device_time(reads, writes, d):
    """Seconds for one device to read `reads` and write `writes` bytes, given one run's
    rates d = (read, write, mixed read, mixed write) in GB/s: the least time over sharing
    the device among reading alone, the mixed run's way and writing alone (a small linear
    program: the mixed way while both are pending, then the rest alone; or reading and
    writing one after the other, if that is faster)."""
    r, w, mr, mw = (x * GB for x in d)
    if reads / mr >= writes / mw:
        t = writes / mw
        via_mixed = t + (reads - mr * t) / r
    else:
        t = reads / mr
        via_mixed = t + (writes - mw * t) / w
    return min(via_mixed, reads / r + writes / w)


def floor(files, nbytes, scenario, mode, u, cores, socket="memcpy"):
    sc, md = SCENARIOS[scenario], MODES[mode]
    B = nbytes
    cpu = {}
    if md["aes"]:
        cpu["aes"] = B / (u["aes_enc"] * GB) + B / (u["aes_dec"] * GB)
    cpu["blake3"] = md["blake3"] * B / (u["blake3"] * GB)
    copies = sc["src_copies"] + sc["dst_copies"] + (sc["readback_copies"] if md["readback"] else 0)
    if socket == "memcpy":
        copies += SOCKET_COPIES
    else:  # the socket charged at what iperf3 spends per byte
        cpu["socket"] = B / GB * u["loopback_cpu_per_gb"]
    cpu["copies"] = copies * B / (u["memcpy"] * GB)
    phases = list(sc["phases"]) + ([sc["readback_phase"]] if md["readback"] else [])
    pf = u["per_file_cpu_s"]
    cpu["per_file"] = files * sum(pf.get(p, 0.0) for p in phases)
    cpu_total = sum(cpu.values())
    wall = {"cpu": cpu_total / cores, "loopback": B / (u["loopback"] * GB)}
    extra = {}
    if sc["device"]:
        reads = B * (2 if md["readback"] else 1)
        runs = u["disk_runs"]
        per_run = [device_time(reads, B, d) for d in runs]
        wall["device"] = med(per_run)
        extra["device_runs_s"] = [round(t, 4) for t in per_run]
        # for comparison: as if reads and writes did not slow each other down
        extra["device_no_interference_s"] = round(med([max(reads / (d[0] * GB), B / (d[1] * GB)) for d in runs]), 4)
    bound = max(wall, key=wall.get)
    return {**extra,"files": files, "bytes": B, "scenario": scenario, "mode": mode, "copies": copies,
            "per_file_phases": phases if files else [],
            "cpu_terms_s": {k: round(v, 4) for k, v in cpu.items()}, "cpu_s": round(cpu_total, 4),
            "time_terms_s": {k: round(v, 4) for k, v in wall.items()}, "time_s": round(wall[bound], 4),
            "bound_by": bound}


def all_floors(u, cores, socket="memcpy"):
    out = []
    for name, files, nbytes in DATASETS:
        for scenario in SCENARIOS:
            for mode in MODES:
                f = floor(files, nbytes, scenario, mode, u, cores, socket)
                f["dataset"] = name
                out.append(f)
    return out


# ---------------------------------------------------------------------------- report
def table(rows, header):
    w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w[i]) if i else str(x).ljust(w[i]) for i, x in enumerate(r))  # noqa: E731
    return "\n".join([line(header), line(["-" * n for n in w])] + [line(r) for r in rows])


def md_table(rows, header):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |" for r in rows]
    return "\n".join(out)


def f2(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def measured_rows(m):
    rows = []
    for name, e in m.items():
        if name.startswith("files_"):
            continue
        rows.append([name, f2(e["median"]), e["unit"], " ".join(f2(v) for v in e["values"]), e["how"]])
    return rows


def phase_rows(m, u):
    rows = []
    for ph in PHASE_WHAT:
        if ph not in m:
            continue
        e = m[ph]
        rows.append([ph.removeprefix("files_"), f2(e["median"]), " ".join(f2(v) for v in e["values"]),
                     " ".join(f2(v) for v in e["own_cpu_s"]), " ".join(f2(v) for v in e["machine_cpu_s"]),
                     f2(e["wall_median"]), f2(u["per_file_cpu_s"].get(ph, 0) * 1e6, 1), PHASE_WHAT[ph]])
    return rows


FLOOR_HEADER = ["dataset", "case", "mode", "CPU-s floor", "= aes + blake3 + copies + per-file",
                "time floor s", "= max(CPU/cores, loopback, device)", "bound by", "device, no interference s"]


def floor_rows(floors):
    rows = []
    for f in floors:
        c, t = f["cpu_terms_s"], f["time_terms_s"]
        terms = " + ".join(f2(c.get(k, 0)) for k in ("aes", "blake3", "copies", "per_file"))
        tt = ", ".join(f2(t.get(k)) if k in t else "-" for k in ("cpu", "loopback", "device"))
        rows.append([f["dataset"], f["scenario"], f["mode"], f2(f["cpu_s"]), terms, f2(f["time_s"]),
                     tt, f["bound_by"], f2(f.get("device_no_interference_s"))])
    return rows


def compute(raw, meta):
    m = measurements(raw)
    u = rates_used(m)
    cores = int(meta.get("m.nproc") or os.cpu_count())
    floors = all_floors(u, cores)
    alt = all_floors(u, cores, socket="iperf3") if u.get("loopback_cpu_per_gb") else []
    return m, u, cores, floors, alt


def render(meta, m, u, cores, floors, alt, md=True):
    T = md_table if md else table
    out = []
    w = out.append
    runs = meta.get("runs", "?")
    if md:
        w(f"# The machine's floor: bench/limit.sh, {meta.get('date', '?')}\n")
        w(f"Command: `{meta.get('command', '?')}` ({meta.get('mode', '?')}, {runs} runs of each "
          f"measurement, medians; raw values in the JSON beside this file). Machine: {cores} cores "
          f"({meta.get('m.cpu', '?')}; {meta.get('m.cpu_flags', '').strip()}), {meta.get('m.mem', '?')}, "
          f"kernel {meta.get('v.kernel', '?')}; disk: {meta.get('work', '?')}. Load average at start "
          f"{meta.get('load_start', '?')}, at end {meta.get('load_end', '?')}; {meta.get('idle_wait', '')}.\n")
        w("| tool | version |\n|---|---|")
        for k in ("v.fio", "v.iperf3", "v.openssl", "v.b3sum", "v.blake3_c", "v.gcc", "v.kernel"):
            w(f"| {k[2:]} | {meta.get(k, '?')} |")
        w("")
        w("## Measured\n")
    else:
        w(f"The machine's floor ({meta.get('date', '?')}, {cores} cores, {meta.get('mode', '?')}, medians of {runs})\n")
    w(T(measured_rows(m), ["figure", "median", "unit", "runs", "how"]))
    w("")
    if md:
        w("## Per-file phases\n")
    w(T(phase_rows(m, u), ["phase", "CPU-s", "runs", "own CPU-s", "machine CPU-s", "wall s",
                           "per file us (model)", "what"]))
    w("")
    w(f"Rates in the model: memcpy {f2(u['memcpy'])} GB/s, BLAKE3 {f2(u['blake3'])} GB/s ({u['blake3_source']}), "
      f"AES-256-GCM {f2(u['aes_enc'])} / {f2(u['aes_dec'])} GB/s (encrypt / decrypt), loopback {f2(u['loopback'])} GB/s, "
      f"disk (read, write, mixed read, mixed write GB/s, per repetition) "
      f"{'; '.join(', '.join(f2(x) for x in d) for d in u['disk_runs'])}.")
    w("")
    if md:
        w("## The model\n")
        for t in MODEL_TEXT:
            w(f"- {t}")
        w("")
        w("## The floor\n")
    else:
        w("Floor (least CPU-seconds and shortest time any mover with these guarantees could take here):")
    w(T(floor_rows(floors), FLOOR_HEADER))
    w("")
    if alt:
        if md:
            w(f"### With the socket charged at iperf3's measured cost ({f2(u['loopback_cpu_per_gb'], 3)} CPU-s per GB, "
              f"both ends and the kernel's threads) instead of {SOCKET_COPIES} memcpy\n")
        else:
            w(f"With the socket charged at iperf3's measured {f2(u['loopback_cpu_per_gb'], 3)} CPU-s/GB instead of {SOCKET_COPIES} memcpy:")
        rows = []
        for f in alt:
            rows.append([f["dataset"], f["scenario"], f["mode"], f2(f["cpu_s"]), f2(f["time_s"]), f["bound_by"]])
        w(T(rows, ["dataset", "case", "mode", "CPU-s floor", "time floor s", "bound by"]))
        w("")
    return "\n".join(out)


def cmd_build(args):
    meta = read_meta(args.meta)
    raw = [json.loads(line) for line in open(args.raw) if line.strip()]
    doc = make_doc(raw, meta)
    write_results(doc, args.json, args.md)
    print(render(meta, doc["measurements"], doc["rates_used"], doc["cores"], doc["floors"],
                 doc["floors_socket_as_iperf3"], md=False))


def write_results(doc, json_path, md_path):
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    m, u, cores = doc["measurements"], doc["rates_used"], doc["cores"]
    with open(md_path, "w") as f:
        f.write(render(doc["meta"], m, u, cores, doc["floors"], doc["floors_socket_as_iperf3"], md=True))
        f.write(f"\nRaw measurements: [{os.path.basename(json_path)}]({os.path.basename(json_path)}). "
                f"Compare a core.sh run: `bench/limit.py ratio {os.path.basename(json_path)} CORE.csv`.\n")


def make_doc(raw, meta):
    m, u, cores, floors, alt = compute(raw, meta)
    return {"schema": "hetch-limit/1", "meta": meta, "cores": cores, "model": MODEL_TEXT,
            "modes": MODES, "scenarios": SCENARIOS, "measurements": m, "rates_used": u,
            "floors": floors, "floors_socket_as_iperf3": alt, "raw": raw}


def cmd_rebuild(args):
    old = json.load(open(args.json))
    doc = make_doc(old["raw"], old["meta"])
    base = args.json[:-5] if args.json.endswith(".json") else args.json
    write_results(doc, base + ".json", base + ".md")
    print(render(doc["meta"], doc["measurements"], doc["rates_used"], doc["cores"], doc["floors"],
                 doc["floors_socket_as_iperf3"], md=False))


def cmd_show(args):
    doc = json.load(open(args.json))
    m, u, cores, floors, alt = compute(doc["raw"], doc["meta"])
    print(render(doc["meta"], m, u, cores, floors, alt, md=args.md))


# ---------------------------------------------------------------------------- ratio
CASES = {  # core.sh case -> (scenario, bytes per file or None for one file)
    "warm-big": ("warm", None),
    "cold-big": ("cold", None),
    "cold-1M": ("cold", MiB),
    "cold-16K": ("cold", 16384),
}
# core.sh's tools -> the mode whose floor they are held to. hetch-local (`hetch cp` on
# one machine, defaults) has no TLS and no socket, so the defaults' floor is a loose one
# for it; it is marked like the peers.
TOOL_MODE = {"hetch": "defaults", "hetch-tls": "defaults", "hetch-plain": "plain-none",
             "hetch-received": "plain"}


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def cmd_ratio(args):
    doc = json.load(open(args.limit))
    m, u, cores, _, _ = compute(doc["raw"], doc["meta"])
    rows = list(csv.DictReader(open(args.core, newline="")))
    points = {}
    for r in rows:
        if r.get("ok") != "1" or num(r.get("seconds")) is None:
            continue
        points.setdefault((r["case"], r["tool"]), []).append(r)
    out, skipped = [], set()
    for (case, tool), rs in points.items():
        if case not in CASES:
            skipped.add(case)
            continue
        scenario, per = CASES[case]
        nbytes = int(med([num(r["bytes"]) for r in rs]))
        files = 1 if per is None else max(1, round(nbytes / per))
        mode = args.mode or TOOL_MODE.get(tool, "defaults")
        f = floor(files, nbytes, scenario, mode, u, cores)
        t = med([num(r["seconds"]) for r in rs])
        c = med([num(r.get("cpu_s")) for r in rs])
        note = "" if tool in TOOL_MODE or args.mode else "*"
        out.append([case, tool, len(rs), f2(t), f2(c), mode + note, f2(f["time_s"]), f2(f["cpu_s"]),
                    f2(f["time_s"] / t) if t else "-", f2(f["cpu_s"] / c) if c else "-"])
    print(f"{os.path.basename(args.core)} against the floor of {os.path.basename(args.limit)} "
          f"(medians of the ok runs; 1.00 = at the floor)\n")
    print(table(out, ["case", "tool", "runs", "time s", "CPU-s", "floor of", "time floor s", "CPU-s floor",
                      "time_floor/time", "cpu_floor/cpu"]))
    if any(r[5].endswith("*") for r in out):
        print("\n* a peer, against the floor of hetch's defaults: it gives fewer guarantees, so it can "
              "come out above 1.0")
    if skipped:
        print(f"\nno floor for: {', '.join(sorted(skipped))}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("build")
    s.add_argument("--meta", required=True)
    s.add_argument("--raw", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--md", required=True)
    s.set_defaults(fn=cmd_build)
    s = sub.add_parser("show")
    s.add_argument("json")
    s.add_argument("--md", action="store_true", help="Markdown instead of plain tables")
    s.set_defaults(fn=cmd_show)
    s = sub.add_parser("rebuild")
    s.add_argument("json")
    s.set_defaults(fn=cmd_rebuild)
    s = sub.add_parser("ratio")
    s.add_argument("limit")
    s.add_argument("core")
    s.add_argument("--mode", choices=list(MODES), help="compare every row with this mode's floor")
    s.set_defaults(fn=cmd_ratio)
    s = sub.add_parser("time")
    s.add_argument("--bytes", type=int, required=True)
    s.add_argument("argv", nargs=argparse.REMAINDER)
    s.set_defaults(fn=cmd_time)
    s = sub.add_parser("iperf3")
    s.add_argument("json")
    s.set_defaults(fn=cmd_iperf3)
    s = sub.add_parser("kcpu")
    s.set_defaults(fn=cmd_kcpu)
    s = sub.add_parser("fio")
    s.add_argument("json")
    s.add_argument("busy")
    s.add_argument("fsync", nargs="?", default="0")
    s.set_defaults(fn=cmd_fio)
    a = p.parse_args()
    if a.fn is cmd_time:
        a.argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
        if not a.argv:
            p.error("time: no command")
    a.fn(a)


if __name__ == "__main__":
    main()
