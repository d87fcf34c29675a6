//! The service's API against its own OpenAPI document, by a tool nobody here wrote:
//! Schemathesis (PyPI `schemathesis`, pinned, installed by
//! bench/install-schemathesis.sh into target/tools/schemathesis-venv) generates
//! requests from the document a real `hetch service` serves, sends them with the
//! service's token, and checks that none gets a 5xx, that every status and body is one
//! the document names, and that no request the document allows is refused (but for
//! the one exception tests/it/schemathesis.toml gives, and why). Bounded: a
//! fixed seed, a few examples per route. Without the venv the test says
//! SKIPPED, unless `HETCH_REQUIRE_ALL` is set (as the full tier sets it): then it fails.

use crate::util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::service::start;

/// What Schemathesis checks on every answer.
const CHECKS: &str = "not_a_server_error,status_code_conformance,\
                      response_schema_conformance,positive_data_acceptance";

/// The venv's `schemathesis`, if it is installed.
fn schemathesis() -> Option<PathBuf> {
    let st = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/tools/schemathesis-venv/bin/schemathesis");
    if st.is_file() {
        return Some(st);
    }
    util::skipped(format_args!(
        "{} is missing: Schemathesis is not installed (bash bench/install-schemathesis.sh)",
        st.display()
    ));
    None
}

#[test]
fn schemathesis_finds_no_undocumented_answer_and_no_valid_request_refused() {
    let Some(st) = schemathesis() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/schemathesis.toml");
    let out = Command::new(st)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("https://{}/api/openapi.json", svc.addr))
        // The service's certificate is self-signed: its key, not a CA, is its identity.
        .arg("--tls-verify=false")
        .args(["-H", &format!("Authorization: Bearer {}", svc.token)])
        .args(["--checks", CHECKS])
        // Server-sent events: a stream that lasts as long as the session.
        .args(["--exclude-path", "/api/events"])
        .args(["--max-examples", "50", "--seed", "1"])
        .args(["--request-timeout", "10"])
        // Its report and Hypothesis' database go to the test's directory.
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures ({})\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
