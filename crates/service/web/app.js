// hetch's web interface: one script, no dependencies, no build step.
//
// Every string from the service (file names, errors, user names) reaches the page
// through text nodes (`h()` never parses markup), and the Content-Security-Policy
// forbids inline script, so a name like "<script>" is shown, never run.
// Live data comes from one server-sent event stream (/api/events); a job's page
// reloads its details when that job's summary changes.

"use strict";

const view = document.getElementById("view");
const linkStatus = document.getElementById("link-status");

/** Replaces the page's content (skipping absent parts, which replaceChildren would
 * show as "null"). */
function setView(...children) {
  view.replaceChildren();
  append(view, children);
}
let session = { csrf: null, caller: "" };
let snapshot = { jobs: [], nodes: [] };
let onSnapshot = () => {};
// Bumped by each navigation: a load that finishes after the user moved on is dropped.
let page = 0;

// ---- Building the page ------------------------------------------------------

/** An element: props set attributes (or listeners for on*), children are text or nodes. */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  append(el, children);
  return el;
}

// ---- Units and times ----------------------------------------------------------

/** Sizes in binary units (GiB), as `ls -h` and df show them. */
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
}

/** Rates in decimal units (MB/s), as network rates are given. */
function rate(n) {
  if (!n) return "–";
  const units = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
}

function duration(sec) {
  if (sec === null || sec === undefined) return "–";
  if (sec < 60) return sec + " s";
  if (sec < 3600) return Math.floor(sec / 60) + " min " + (sec % 60) + " s";
  return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
}

function ago(ms) {
  const d = Math.round((Date.now() - ms) / 1000);
  if (d < -5) return "in " + duration(-d);
  if (d < 5) return "just now";
  return duration(d) + " ago";
}

/** A time, relative and absolute. */
function when(ms) {
  if (!ms) return "–";
  const iso = new Date(ms).toISOString();
  const local = new Date(ms).toLocaleString();
  return h("time", { datetime: iso, title: iso }, ago(ms), h("span", { class: "abs" }, " · " + local));
}

function percent(done, total) {
  if (!total) return done ? 100 : 0;
  return Math.min(100, Math.floor((100 * done) / total));
}

function bar(done, total, label) {
  const p = percent(done, total);
  return h("div", { class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-valuenow": p, "aria-label": label },
  h("div", { class: "fill", style: null, "data-p": p }), h("span", { class: "pct" }, p + "%"));
}

/** Bars are sized from data-p by script (the CSP allows no inline style attributes). */
function sizeBars(root) {
  for (const f of root.querySelectorAll(".bar .fill")) f.style.width = f.dataset.p + "%";
}

function badge(state) {
  return h("span", { class: "badge state-" + state }, state);
}

// ---- The API ------------------------------------------------------------------

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && session.csrf) headers["X-CSRF-Token"] = session.csrf;
  let r;
  try {
    r = await fetch(path, { method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    return { ok: false, status: 0, data: { error: "cannot reach the service: " + e.message } };
  }
  if (r.status === 401) { location.href = "/login"; }
  let data = null;
  try { data = await r.json(); } catch (e) { data = { error: r.statusText }; }
  return { ok: r.ok, status: r.status, data };
}

// ---- Jobs list ----------------------------------------------------------------

const STATES = ["planning", "queued", "running", "done", "failed", "cancelled"];
const SORTS = {
  newest: (a, b) => b.created - a.created,
  oldest: (a, b) => a.created - b.created,
  state: (a, b) => STATES.indexOf(a.state) - STATES.indexOf(b.state) || b.created - a.created,
  progress: (a, b) => percent(b.bytes_done, b.bytes) - percent(a.bytes_done, a.bytes),
  rate: (a, b) => b.rate - a.rate,
  size: (a, b) => b.bytes - a.bytes,
};

function route(from, to) {
  return h("span", { class: "route" }, h("span", { class: "path" }, from), " → ", h("span", { class: "path" }, to));
}

function jobsView(params) {
  const filter = h("select", { id: "filter-state", "aria-label": "Show jobs in state" },
    h("option", { value: "" }, "all states"), STATES.map((st) => h("option", { value: st }, st)));
  filter.value = params.get("state") || "";
  const sort = h("select", { id: "sort", "aria-label": "Sort jobs by" },
    Object.keys(SORTS).map((k) => h("option", { value: k }, k)));
  sort.value = params.get("sort") || "newest";
  const body = h("tbody");
  const empty = h("p", { class: "empty", id: "no-jobs" }, "No jobs yet: submit one.");
  const table = h("table", { class: "jobs", id: "jobs" },
    h("caption", { class: "sr" }, "Jobs, updated live"),
    h("thead", {}, h("tr", {}, ["Job", "State", "Source → destination", "Progress", "Rate", "ETA",
      "Submitted by", "Started", "Finished"].map((c) => h("th", { scope: "col" }, c)))),
    body);
  const update = () => {
    const jobs = snapshot.jobs.filter((j) => !filter.value || j.state === filter.value)
      .sort(SORTS[sort.value]);
    empty.hidden = jobs.length > 0;
    table.hidden = jobs.length === 0;
    // The rows are rebuilt as jobs move: keep the keyboard on the job it was on.
    const a = document.activeElement;
    const focused = a && a.classList.contains("job-link") ? a.closest("tr").dataset.id : null;
    body.replaceChildren(...jobs.map(jobRow));
    sizeBars(body);
    if (focused) {
      const link = body.querySelector(`tr[data-id="${CSS.escape(focused)}"] .job-link`);
      if (link) link.focus();
    }
  };
  const keep = () => {
    const q = new URLSearchParams();
    if (filter.value) q.set("state", filter.value);
    if (sort.value !== "newest") q.set("sort", sort.value);
    history.replaceState(null, "", "#/jobs" + (q.toString() ? "?" + q : ""));
    update();
  };
  filter.addEventListener("change", keep);
  sort.addEventListener("change", keep);
  setView(
    h("div", { class: "toolbar" }, h("h1", {}, "Jobs"),
      h("label", {}, "State ", filter), h("label", {}, "Sort ", sort),
      h("a", { class: "button", href: "#/submit" }, "Submit a job")),
    empty, table);
  onSnapshot = update;
  update();
}

function jobRow(j) {
  const more = j.sources > 1 ? " (+" + (j.sources - 1) + ")" : "";
  return h("tr", { "data-id": j.id, "data-state": j.state },
    h("td", { "data-label": "Job" }, h("a", { href: "#/jobs/" + j.id, class: "job-link" }, j.id)),
    h("td", { "data-label": "State" }, badge(j.state)),
    h("td", { "data-label": "Route" }, route(j.source + more, j.dest)),
    h("td", { "data-label": "Progress" }, bar(j.bytes_done, j.bytes, "job " + j.id),
      h("span", { class: "counts" }, j.files_done + " / " + j.files + " files · " +
        bytes(j.bytes_done) + " / " + bytes(j.bytes))),
    h("td", { "data-label": "Rate", class: "num" }, rate(j.rate)),
    h("td", { "data-label": "ETA", class: "num" }, duration(j.eta_s)),
    h("td", { "data-label": "By" }, j.submitted_by),
    h("td", { "data-label": "Started" }, when(j.started)),
    h("td", { "data-label": "Finished" }, when(j.finished)));
}

// ---- One job --------------------------------------------------------------------

async function jobView(id) {
  const mine = page;
  let shown = null;
  let loading = false;
  const load = async () => {
    // One load at a time: a snapshot arriving meanwhile is caught by the next.
    if (loading) return;
    loading = true;
    const [job, act, files] = await Promise.all([
      api("GET", "/api/jobs/" + encodeURIComponent(id)),
      api("GET", "/api/jobs/" + encodeURIComponent(id) + "/activity"),
      api("GET", "/api/jobs/" + encodeURIComponent(id) + "/files?from=0&to=20"),
    ]);
    loading = false;
    if (mine !== page) return;
    if (!job.ok) {
      setView(h("h1", {}, "Job " + id), h("p", { class: "error", role: "alert" }, job.data.error));
      return;
    }
    renderJob(job.data, act.ok ? act.data : { samples: [], shares: [], failed: [] },
      files.ok ? files.data : []);
  };
  onSnapshot = () => {
    const j = snapshot.jobs.find((x) => x.id === id);
    const key = JSON.stringify(j);
    if (key !== shown) { shown = key; load(); }
  };
  await load();
}

function renderJob(job, act, files) {
  // The page is rebuilt as the job moves: keep the keyboard's place.
  const focused = document.activeElement && document.activeElement.id;
  const live = snapshot.jobs.find((x) => x.id === job.id) || {};
  const done = live.bytes_done ?? job.bytes_done;
  const final = ["done", "failed", "cancelled"].includes(job.state);
  const message = h("p", { id: "action-result", role: "status" });
  const act_ = async (what) => {
    const r = await api("POST", "/api/jobs/" + job.id + "/" + what);
    message.textContent = r.ok ? what + ": done" : r.data.error;
    message.className = r.ok ? "ok" : "error";
  };
  const o = job.spec.options || {};
  const opts = [
    o.checksum && "checksum " + o.checksum, o.verify && "verify " + o.verify,
    o.streams && o.streams + " streams", o.no_clobber && "no clobber",
    o.compress && "compress " + o.compress, o.block_size && "blocks of " + bytes(o.block_size),
    o.stream && (o.stream.forever ? "watch (follows for ever)" : "follow growing files"),
  ].filter(Boolean).join(", ") || "defaults";
  const u = job.units;
  setView(
    h("div", { class: "toolbar" },
      h("h1", {}, "Job ", h("code", {}, job.id)), badge(job.state),
      h("button", { id: "cancel", onclick: () => act_("cancel"), disabled: final }, "Cancel"),
      h("button", { id: "retry", onclick: () => act_("retry"),
        disabled: !["failed", "cancelled"].includes(job.state) }, "Retry"),
      h("a", { class: "button", id: "download-listing", href: "/api/jobs/" + job.id + "/listing",
        download: "hetch-job-" + job.id + "-files.jsonl" }, "Download file list")),
    message,
    job.error ? h("p", { class: "error", id: "job-error" }, job.error) : null,
    bar(done, job.bytes, "progress of job " + job.id),
    h("p", { class: "counts", id: "job-counts" }, job.files_done + " / " + job.files + " files · " +
      bytes(done) + " / " + bytes(job.bytes) + " · " + rate(live.rate) + " · ETA " + duration(live.eta_s)),
    h("dl", { class: "facts" },
      fact("Sources", job.spec.sources.map((p) => h("div", { class: "path" }, p))),
      fact("Destination", h("span", { class: "path" }, job.spec.dest)),
      fact("Options", opts),
      fact("Priority", job.spec.priority),
      fact("Rate limit", job.spec.rate_limit ? rate(job.spec.rate_limit) : "none"),
      fact("Submitted by", job.submitted_by),
      fact("Submitted", when(job.created)),
      fact("Started", when(job.started)),
      fact("Finished", when(job.finished)),
      fact("Units", `${u.done} done, ${u.leased} running, ${u.ready} ready, ${u.waiting} waiting, ` +
        `${u.failed} failed, ${u.cancelled} cancelled; ${u.retried} retried`),
      job.lag ? fact("Lag (appended to durable)", h("span", { id: "job-lag" },
        `p50 ${job.lag.p50_ms} ms, p99 ${job.lag.p99_ms} ms`)) : null,
      // The secret is never sent to the page: only that one is set.
      job.webhook ? fact("Webhook", h("span", { class: "path", id: "job-webhook" }, job.webhook.url +
        " (secret set)" + (job.webhook.delivery ? "; " + job.webhook.delivery.state + " after " +
        job.webhook.delivery.attempts + " attempts" + (job.webhook.delivery.last_error ?
          ": " + job.webhook.delivery.last_error : "") : ""))) : null),
    h("h2", {}, "Throughput"), chart(act.samples),
    h("h2", {}, "Share per node"),
    act.shares.length ? table(["Worker", "Units", "Bytes"], act.shares.map((s) =>
      [s.worker, s.units, bytes(s.bytes)]), "shares") : h("p", { class: "empty" }, "No unit finished yet."),
    h("h2", {}, "Failed units"),
    act.failed.length ? table(["Unit", "Kind", "First file", "Files", "Attempts", "State", "Error"],
      act.failed.map((f) => [f.seq, f.kind, h("span", { class: "path" }, f.path ?? "–"), f.files, f.attempts,
        f.state, h("span", { class: "error" }, f.error)]), "failed")
      : h("p", { class: "empty" }, "None."),
    h("h2", {}, "Files (the first 20)"),
    files.length ? table(["Path", "Size"], files.map((f) => [h("span", { class: "path" }, f.path), bytes(f.size)]),
      "files") : h("p", { class: "empty" }, "Not listed yet."));
  sizeBars(view);
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
}

function fact(name, ...value) {
  return [h("dt", {}, name), h("dd", {}, value)];
}

function table(heads, rows, id) {
  return h("table", { id },
    h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { "data-label": heads[i] }, c))))));
}

/** Bytes per second over time: at each sample, the rate over the six seconds
 * before it (workers report running units' progress every few seconds, so rates
 * between single samples would jump between zero and peaks). */
function chart(samples) {
  const WINDOW = 6000;
  const pts = [];
  let j = 0;
  for (let i = 1; i < samples.length; i++) {
    const [t1, b1] = samples[i];
    while (j < i - 1 && samples[j + 1][0] <= t1 - WINDOW) j++;
    const [t0, b0] = samples[j];
    if (t1 > t0) pts.push([t1, Math.max(0, (b1 - b0) * 1000 / (t1 - t0))]);
  }
  if (pts.length < 2) return h("p", { class: "empty", id: "chart" }, "Not enough samples yet (one a second while the job runs).");
  const W = 600, H = 160, t0 = pts[0][0], span = Math.max(1, pts[pts.length - 1][0] - t0);
  const top = Math.max(...pts.map((p) => p[1])) || 1;
  const line = pts.map(([t, r]) => ((t - t0) / span * W).toFixed(1) + "," + (H - r / top * (H - 10)).toFixed(1)).join(" ");
  return h("figure", { class: "chart", id: "chart" },
    s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "throughput over time, peak " + rate(top) },
      s("line", { x1: 0, y1: H, x2: W, y2: H, class: "axis" }),
      s("polyline", { points: line, class: "rate" })),
    h("figcaption", {}, "Peak " + rate(top) + " over " + duration(Math.round(span / 1000)) +
      "; the link's RTT and loss are not known to the service."));
}

// ---- Submitting -----------------------------------------------------------------

const FIELDS = ["sources", "dest", "checksum", "verify", "rate_limit", "priority", "streams", "compress"];

/** A rate as `hetch` takes it: 500M = 500,000,000 B/s, 4gbit = 500,000,000 B/s. */
function parseRate(text) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit)?\s*$/i.exec(text);
  if (!m) return null;
  const mult = { "": 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[m[2].toLowerCase()];
  return Math.round(Number(m[1]) * mult / (m[3] ? 8 : 1));
}

/** A word as a shell would take it back. */
function quote(w) {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'";
}

function submitView() {
  const field = (name, label, input, hint) => {
    input.id = "f-" + name;
    input.name = name;
    const err = h("p", { class: "field-error", id: "e-" + name, role: "alert" });
    const hintEl = hint ? h("p", { class: "hint", id: "h-" + name }, hint) : null;
    input.setAttribute("aria-describedby", (hint ? "h-" + name + " " : "") + "e-" + name);
    return h("div", { class: "field" }, h("label", { for: "f-" + name }, label), hintEl, input, err);
  };
  const select = (...opts) => h("select", {}, opts.map(([v, t]) => h("option", { value: v }, t)));
  const f = {
    sources: h("textarea", { rows: 3, required: true, placeholder: "run42/" }),
    dest: h("input", { required: true, placeholder: "hetch://dtn2:7878/in/ or a path" }),
    checksum: select(["", "default (blake3)"], ["blake3", "blake3"], ["xxh3", "xxh3"], ["sha256", "sha256"],
      ["md5", "md5"], ["crc32c", "crc32c"], ["adler32", "adler32"]),
    verify: select(["", "default"], ["none", "none"], ["received", "received"], ["written", "written (read back)"]),
    rate_limit: h("input", { placeholder: "none, or 500M, 2gbit", inputmode: "text" }),
    priority: h("input", { type: "number", min: -100, max: 100, value: 0 }),
    streams: h("input", { type: "number", min: 1, max: 256, placeholder: "autotuned" }),
    compress: select(["", "default (none)"], ["auto", "auto"], ["zstd", "zstd"], ["none", "none"]),
    no_clobber: h("input", { type: "checkbox", id: "f-no_clobber" }),
  };
  const command = h("pre", { id: "command", tabindex: 0, "aria-label": "The same job as a command" });
  const copied = h("span", { role: "status", id: "copied" });
  const message = h("p", { id: "submit-result", role: "status" });
  const build = () => {
    const sources = f.sources.value.split("\n").map((x) => x.trim()).filter(Boolean);
    const spec = { sources, dest: f.dest.value.trim(), options: {} };
    const words = ["hetch", "job", "submit"];
    for (const k of ["checksum", "verify", "compress"]) {
      if (f[k].value) { spec.options[k] = f[k].value; words.push("--" + k, f[k].value); }
    }
    if (f.streams.value) {
      spec.options.streams = Number(f.streams.value);
      words.push("--streams", String(spec.options.streams));
    }
    if (f.no_clobber.checked) { spec.options.no_clobber = true; words.push("--no-clobber"); }
    if (f.priority.value && Number(f.priority.value) !== 0) {
      spec.priority = Number(f.priority.value);
      words.push("--priority", String(spec.priority));
    }
    if (f.rate_limit.value.trim()) {
      const r = parseRate(f.rate_limit.value);
      spec.rate_limit = r ?? -1;
      words.push("--rate-limit", r === null ? f.rate_limit.value.trim() : String(r));
    }
    words.push(...sources, spec.dest);
    command.textContent = words.map(quote).join(" ");
    return spec;
  };
  const clear = () => {
    for (const k of FIELDS) {
      document.getElementById("e-" + k).textContent = "";
      f[k].removeAttribute("aria-invalid");
    }
  };
  const showError = (name, text) => {
    const input = f[name] || f.sources;
    document.getElementById("e-" + (f[name] ? name : "sources")).textContent = text;
    input.setAttribute("aria-invalid", "true");
    input.focus();
  };
  const form = h("form", { id: "submit-form", novalidate: true },
    field("sources", "Sources", f.sources, "One per line: paths under the service's root, or hetch:// URLs on one server."),
    field("dest", "Destination", f.dest, "hetch://HOST:PORT/PATH, s3://, gs://, az:// or a path under the root."),
    h("fieldset", {}, h("legend", {}, "Options"),
      field("checksum", "Checksum", f.checksum),
      field("verify", "Verify", f.verify),
      field("rate_limit", "Rate limit", f.rate_limit, "Bytes per second for the whole job."),
      field("priority", "Priority", f.priority, "-100 to 100; higher goes first."),
      field("streams", "Streams", f.streams, "1 to 256; empty to autotune."),
      field("compress", "Compression", f.compress),
      h("div", { class: "field" }, h("label", {}, f.no_clobber, " Never replace an existing file (no clobber)"))),
    h("button", { type: "submit", id: "submit" }, "Submit"), message,
    h("h2", {}, "Copy as command"), command,
    h("button", { type: "button", id: "copy", onclick: async () => {
      try { await navigator.clipboard.writeText(command.textContent); copied.textContent = "copied"; }
      catch (e) { copied.textContent = "select the command and copy it"; }
    } }, "Copy"), copied);
  form.addEventListener("input", build);
  form.addEventListener("change", build);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear();
    const spec = build();
    if (spec.rate_limit === -1) return showError("rate_limit", "not a rate: use a number with k, M, G or T, or …bit");
    message.textContent = "submitting…";
    const r = await api("POST", "/api/jobs", spec);
    if (r.ok) { location.hash = "#/jobs/" + r.data.id; return; }
    message.textContent = "";
    showError(r.data.field || "sources", r.data.error);
  });
  setView(h("h1", {}, "Submit a job"), form);
  build();
  onSnapshot = () => {};
}

// ---- Recurring mirrors ----------------------------------------------------------

/** How a schedule recurs: "every 1 h", "every 90 s" or "cron 0 * * * *". */
function recurrence(sc) {
  if (sc.cron) return "cron " + sc.cron;
  const s = Math.round(sc.every_ms / 1000);
  if (s % 86400 === 0) return "every " + s / 86400 + " d";
  if (s % 3600 === 0) return "every " + s / 3600 + " h";
  if (s % 60 === 0) return "every " + s / 60 + " min";
  return "every " + s + " s";
}

/** A run: its job (a link), state and bytes written, or why it was skipped. */
function runItem(r) {
  if (!r.job) return h("li", { class: "skipped" }, when(r.due), " skipped: ", r.skipped || "?");
  return h("li", {}, when(r.due), " ", h("a", { href: "#/jobs/" + r.job }, h("code", {}, r.job)), " ",
    badge(r.state || "gone"), " " + r.files_done + " files, " + bytes(r.bytes_done) + ", " +
    bytes(r.bytes_written) + " written", r.error ? h("span", { class: "error" }, " " + r.error) : null);
}

async function schedulesView() {
  const mine = page;
  const message = h("p", { id: "schedule-result", role: "status" });
  let shown = null;
  const render = async () => {
    const r = await api("GET", "/api/schedules");
    if (mine !== page) return;
    if (!r.ok) { setView(h("p", { class: "error" }, r.data.error)); return; }
    // Rebuilt only when something changed, so that a button is not replaced under
    // the pointer every second.
    const key = JSON.stringify(r.data);
    if (key === shown) return;
    shown = key;
    const focused = document.activeElement && document.activeElement.id;
    const toggle = async (sc) => {
      const what = sc.paused ? "resume" : "pause";
      const a = await api("POST", "/api/schedules/" + sc.id + "/" + what);
      message.textContent = a.ok ? sc.id + ": " + (sc.paused ? "resumed" : "paused") : a.data.error;
      message.className = a.ok ? "ok" : "error";
      await render();
    };
    const o = (sc) => sc.job.options || {};
    setView(h("h1", {}, "Recurring mirrors"), message,
      r.data.length ? table(["Schedule", "What", "Runs", "Next run", "", "Recent runs"],
        r.data.map((sc) => [h("code", {}, sc.id),
          [route(sc.job.sources.join(" "), sc.job.dest), o(sc).sync ? h("div", {}, "mirror (deletes what the sources lost" +
            (o(sc).max_delete !== undefined ? ", at most " + o(sc).max_delete : "") + ")") : null],
          recurrence(sc),
          sc.paused ? h("span", { class: "badge state-cancelled", id: "paused-" + sc.id }, "paused") : when(sc.next_at),
          h("button", { id: (sc.paused ? "resume-" : "pause-") + sc.id, onclick: () => toggle(sc) },
            sc.paused ? "Resume" : "Pause"),
          sc.runs.length ? h("ul", { class: "runs" }, sc.runs.slice(0, 5).map(runItem)) : "none yet"]), "schedules")
        : h("p", { class: "empty", id: "no-schedules" },
          "No recurring mirrors: make one with hetch job submit --every 1h --sync SRC DST."));
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  };
  // Runs move with the jobs they submit: shown again as the snapshot changes.
  onSnapshot = render;
  await render();
}

// ---- Nodes -----------------------------------------------------------------------

async function nodesView() {
  const mine = page;
  const render = async () => {
    const r = await api("GET", "/api/nodes");
    if (mine !== page) return;
    if (!r.ok) { setView(h("p", { class: "error" }, r.data.error)); return; }
    const { nodes, service } = r.data;
    const checks = (list) => list.length ? h("ul", { class: "checks" }, list.map((c) => h("li", {}, c))) : "no findings";
    setView(h("h1", {}, "Nodes"),
      h("h2", {}, "Service ", h("span", { class: "path" }, service.host)), checks(service.checks),
      h("h2", {}, "Workers"),
      nodes.length ? table(["Worker", "Host", "Health", "Active units", "Throughput", "Host checks"],
        nodes.map((n) => [n.name, n.host || "–",
          h("span", {}, h("span", { class: "badge " + (n.silent ? "state-failed" : "state-done") },
            n.silent ? "silent" : "alive"), " heard ", when(n.last_seen)),
          n.active + " / " + (n.capacity || "?"), rate(n.rate), checks(n.checks)]), "nodes")
        : h("p", { class: "empty" }, "No worker has asked for work in the last day."));
  };
  onSnapshot = render;
  await render();
}

// ---- Routing and the event stream ------------------------------------------------

function show() {
  page += 1;
  const [path, query] = (location.hash.slice(1) || "/jobs").split("?");
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("nav a")) {
    a.toggleAttribute("aria-current", path.startsWith(a.getAttribute("href").slice(1)));
  }
  const m = /^\/jobs\/([0-9a-f]{1,64})$/.exec(path);
  if (m) return jobView(m[1]);
  if (path === "/submit") return submitView();
  if (path === "/nodes") return nodesView();
  if (path === "/schedules") return schedulesView();
  return jobsView(params);
}

function listen() {
  const events = new EventSource("/api/events");
  events.addEventListener("snapshot", (e) => {
    snapshot = JSON.parse(e.data);
    linkStatus.textContent = "";
    onSnapshot();
  });
  events.addEventListener("error", async () => {
    linkStatus.textContent = "connection to the service lost; reconnecting…";
    if (events.readyState === EventSource.CLOSED) {
      const r = await api("GET", "/api/session");
      if (r.ok) setTimeout(listen, 3000);
    }
  });
}

async function start() {
  const r = await api("GET", "/api/session");
  if (!r.ok) return;
  session = r.data;
  document.getElementById("who").textContent = session.caller;
  window.addEventListener("hashchange", show);
  listen();
  show();
}

start();
