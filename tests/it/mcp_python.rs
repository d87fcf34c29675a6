//! `hetch mcp` driven by an independent client: the official Python MCP SDK (PyPI
//! `mcp`, installed by bench/install-mcp-client.sh into target/tools/mcp-venv) runs
//! tests/it/mcp_python/client.py, which spawns the server over stdio and carries out a
//! scripted exchange. Without that venv the test says SKIPPED, unless
//! `HETCH_REQUIRE_ALL` is set (as the full tier, `bash test.sh`, sets it), when that is a failure.

use crate::util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use util::*;

/// Longest the whole exchange may take (it normally takes a few seconds).
const CLIENT_LIMIT: Duration = Duration::from_secs(180);

/// The venv's Python, if the client is installed.
fn python() -> Option<PathBuf> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/mcp-venv/bin/python");
    if py.is_file() {
        return Some(py);
    }
    util::skipped(format_args!(
        "{} is missing: the Python MCP client is not installed (bash bench/install-mcp-client.sh)",
        py.display()
    ));
    None
}

/// Runs client.py against `hetch mcp --policy POLICY` with `steps`; its JSON lines.
fn run_client(python: &Path, policy: &Path, config: &Path, steps: &Value) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_python/client.py");
    let out_dir = tempdir();
    let (out_path, err_path) = (out_dir.path().join("out"), out_dir.path().join("err"));
    let mut child = Command::new(python)
        .arg(&script)
        .arg(BIN)
        .arg(policy)
        .arg(steps.to_string())
        .env("HETCH_CONFIG_DIR", config)
        .env_remove("HETCH_TOKEN")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start the Python MCP client");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the client") {
            break Some(s);
        }
        if start.elapsed() > CLIENT_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    eprintln!(
        "client ran {:.1} s\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the client failed or hung ({status:?})"
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn python_sdk_plans_confirms_once_and_is_held_to_the_policy() {
    let Some(python) = python() else { return };
    let t = tempdir();
    let base = t.path().canonicalize().unwrap();
    let (src, dst, elsewhere) = (base.join("src"), base.join("dst"), base.join("elsewhere"));
    Tree::new(&src)
        .file("big", 20 << 20, 1)
        .file("sub/deeper/medium", 300_000, 2)
        .bytes("small.txt", b"hello from hetch\n")
        .bytes("empty", b"");
    Tree::new(&dst);
    Tree::new(&elsewhere).bytes("secret", b"not for the assistant");
    let audit = base.join("audit.jsonl");
    let policy = base.join("policy.toml");
    // 10 MB/s: the 20 MiB copy takes about 2 s, long enough for progress notifications.
    std::fs::write(
        &policy,
        format!(
            "read = [{src:?}]\nwrite = [{dst:?}]\nmax_bytes = \"1G\"\nmax_files = 1000\n\
             rate_limit = \"10M\"\naudit_log = {audit:?}\n"
        ),
    )
    .unwrap();
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let copy = dst.join("copy");
    let c = copy.to_str().unwrap();
    let steps = json!([
        {"tool": "list", "arguments": {"location": s}},
        {"tool": "copy", "arguments": {"sources": [s], "destination": c}},
        // Nothing started, nothing written: no transfer, the destination still empty.
        {"tool": "status", "arguments": {}},
        {"tool": "verify", "arguments": {"source": s, "destination": d}},
        {"tool": "confirm", "arguments": {"wait_seconds": 30}, "token_from": 1},
        {"tool": "confirm", "arguments": {"wait_seconds": 30}, "token_from": 1},
        {"tool": "list", "arguments": {"location": elsewhere.to_str().unwrap()}},
        {"tool": "verify", "arguments": {"source": s, "destination": c}},
    ]);
    let lines = run_client(&python, &policy, &base.join("config"), &steps);

    let head = |key: &str| -> &Value {
        lines
            .iter()
            .find(|l| l.get(key).is_some())
            .unwrap_or_else(|| panic!("no {key} line"))
    };
    let version = head("protocolVersion")["protocolVersion"].as_str().unwrap();
    eprintln!("negotiated protocol version: {version}");
    let tools: Vec<&str> = head("tools")["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for want in [
        "list",
        "dry_run",
        "verify",
        "copy",
        "sync",
        "confirm",
        "status",
        "wait",
        "cancel",
        "retry",
        "read_manifest",
        "doctor",
    ] {
        assert!(tools.contains(&want), "no tool {want} in {tools:?}");
    }
    let uris: Vec<&Value> = head("resources")["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["uri"])
        .collect();
    assert!(uris.contains(&&json!("hetch-mcp://policy")), "{uris:?}");
    let shown: Value = serde_json::from_str(head("resource")["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(shown["read"], json!([s]));
    assert_eq!(shown["rate_limit"], 10_000_000);

    let results: Vec<&Value> = lines.iter().filter(|l| l.get("step").is_some()).collect();
    assert_eq!(results.len(), steps.as_array().unwrap().len());
    let ok = |i: usize| -> &Value {
        let r = results[i];
        assert_eq!(r["isError"], false, "step {i} failed: {r}");
        &r["structuredContent"]
    };
    let total = (20u64 << 20) + 300_000 + 17;
    // Four files and two directories.
    assert_eq!(ok(0)["entries"], 6, "{}", results[0]);
    assert_eq!(ok(0)["bytes"], total);

    let plan = ok(1);
    let token = plan["confirm_token"].as_str().expect("a confirm_token");
    assert!(!token.is_empty());
    assert_eq!(plan["plan"]["would_copy"]["bytes"], total);
    assert_eq!(ok(2)["transfers"], json!([]), "copy started a transfer");
    let before = ok(3);
    assert_eq!(
        before["bytes_compared"], 0,
        "copy wrote something: {before}"
    );
    assert_eq!(before["identical"], 0, "copy wrote something: {before}");

    let done = ok(4);
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["result"]["bytes"], total);
    let notes = results[4]["progress"].as_u64().unwrap();
    assert!(notes >= 1, "no progress notification during confirm");
    let last = &results[4]["lastProgress"];
    assert!(last["progress"].as_f64().unwrap() <= total as f64, "{last}");
    assert_same_tree(&src, &copy);
    let names: Vec<_> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["copy"]);

    assert_eq!(results[5]["isError"], true, "a token was used twice");
    assert_eq!(results[6]["isError"], true, "listed outside the read roots");
    let refusal = results[6]["structuredContent"]["refused"].as_str().unwrap();
    assert!(refusal.contains("outside"), "{refusal}");
    assert_eq!(ok(7)["differences"], 0);

    // The audit log: one line per call, in order, with the tool and the decision;
    // besides, a successful confirm is on record before it acts, and a transfer's end.
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &records {
        assert!(r["tool"].is_string() && r["decision"].is_string(), "{r}");
    }
    let pre = |r: &&Value| r["tool"] == "confirm" && r["outcome"].get("carrying_out").is_some();
    let calls: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| r["tool"] != "transfer" && !pre(r))
        .map(|r| (r["tool"].as_str().unwrap(), r["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(
        calls,
        [
            ("list", "allowed"),
            ("copy", "planned"),
            ("status", "allowed"),
            ("verify", "allowed"),
            ("confirm", "allowed"),
            ("confirm", "refused"),
            ("list", "refused"),
            ("verify", "allowed"),
        ]
    );
    assert_eq!(records.iter().filter(pre).count(), 1);
    let ended: Vec<&Value> = records.iter().filter(|r| r["tool"] == "transfer").collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["decision"], "ended");
    assert_eq!(records.len(), steps.as_array().unwrap().len() + 2);
}
