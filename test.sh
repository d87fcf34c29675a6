#!/usr/bin/env bash
# hetch's tests.
#
#   bash test.sh          the full tier, what CI runs: installs what the suite runs
#                         against (bench/install-test-tools.sh: Debian packages as root,
#                         MinIO, the cloud emulators, the MCP client; once, kept in
#                         target/tools), then every test of the workspace, the
#                         integration tests too (those a bare `cargo test` leaves out:
#                         MinIO, the emulators, PostgreSQL); a test whose tool is
#                         missing fails (HETCH_REQUIRE_ALL). Prints the time of each
#                         stage and the ten slowest tests.
#   bash test.sh --build  builds what the full tier runs (every test binary, the hetch
#                         and hetch-lab binaries), runs nothing.
#   bash test.sh --quick  the quick tier: offline, no root, Go, PostgreSQL or browser;
#                         the engine, protocol, stores (memory and POSIX), service on
#                         SQLite and MCP server, in process. Says what it leaves out.
#
# Extra arguments after the tier go to libtest (e.g. `bash test.sh --quick sync`).
set -euo pipefail
cd "$(dirname "$0")"
source bench/stages.sh

tier=full
case "${1:-}" in
    --quick) tier=quick; shift ;;
    --build) tier=build; shift ;;
    --full) shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

# Test binaries run under `env RUSTC_BOOTSTRAP=1` so that libtest on a stable
# toolchain reports each test's time (--report-time); set on the runner, not on cargo,
# because cargo would rebuild everything for a changed RUSTC_BOOTSTRAP.
host=$(rustc -vV | sed -n 's/^host: //p')
export "CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER=env RUSTC_BOOTSTRAP=1"
TIMES=(-Z unstable-options --report-time)

# The ten slowest tests of log $1. awk reads all of sort's output: `head` would
# close the pipe early and, under pipefail, sort's SIGPIPE failed the run (exit 141).
slowest() {
    echo "=== the ten slowest tests"
    sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' "$1" | sort -rn |
        awk 'NR <= 10 { printf "  %8.1fs  %s\n", $1, $2 }'
}

# Runs cargo test with `$@`, its output also in log $LOG (appended): every test
# binary, even after one failed, so that a red run names every failing test.
logged() {
    cargo test --no-fail-fast "$@" 2>&1 | tee -a "$LOG"
}

mkdir -p target
LOG=target/test-$tier.log
: >"$LOG"

# Every test binary and every binary of the workspace, in one cargo command: the
# end-to-end tests of the benchmark harness and the testbed run the lab's binary
# (HETCH_LAB_BIN), which `cargo test` alone does not build (it is another package's),
# and which `cargo build -p hetch-lab` would build with other features, compiling a
# second copy of much of the tree. `cargo test` then finds all of it fresh.
BUILD=(cargo build --workspace --bins --tests)
if [ "$tier" = build ]; then
    stage "test build" "${BUILD[@]}"
    exit 0
fi

if [ "$tier" = full ]; then
    stage "install test tools" bash bench/install-test-tools.sh
    export PATH="$PWD/target/tools/bin:$PATH"
    export HETCH_REQUIRE_ALL=1
    # The integration tests, which a bare `cargo test` leaves out: those that need a
    # server (MinIO, the cloud emulators, PostgreSQL) are #[ignore]d with a reason
    # that says so, and the backend lists default to the ones that need none.
    export HETCH_DB=sqlite,postgres HETCH_CONFORMANCE=posix,memory,s3,gcs,azure
    INTEGRATION=(--include-ignored)
    # Two tests per CPU at a time: the end-to-end tests spend most of their time
    # waiting on the processes and servers they start (the binary's suite, on 2 CPUs:
    # about 200 s with one per CPU, 112 s with two, for 80 CPU-seconds of its own).
    export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$(($(nproc) * 2))}"
    stage "test build" "${BUILD[@]}"
    export HETCH_LAB_BIN="$PWD/target/debug/hetch-lab"
    stage "tests" logged --workspace --lib --bins --tests -- "${TIMES[@]}" "${INTEGRATION[@]}" "$@"
    stage "doc tests" logged --workspace --doc -- "$@"
    slowest "$LOG"
    exit 0
fi

# The quick tier: every crate's unit tests and the in-process suites (the crates'
# own tests/), on the backends that need no server; not the end-to-end suite of the
# hetch binary (tests/it) nor the benchmark harness's peers.
export HETCH_DB=sqlite HETCH_CONFORMANCE=posix,memory
IN_PROCESS=(--workspace --exclude hetch --exclude hetch-bench --lib --bins --tests)
OWN_UNITS=(-p hetch -p hetch-bench --lib --bins)
stage "quick build" cargo test "${IN_PROCESS[@]}" --no-run
stage "quick build (bins)" cargo test "${OWN_UNITS[@]}" --no-run
stage "quick tests" logged "${IN_PROCESS[@]}" -- "${TIMES[@]}" "$@"
stage "quick tests (bins)" logged "${OWN_UNITS[@]}" -- "${TIMES[@]}" "$@"
slowest "$LOG"
cat <<'LEFT'
=== the quick tier left out (bash test.sh runs them):
  - the end-to-end suite of the hetch binary (tests/it: every command, the peers,
    the testbed, the browser, MinIO and the cloud emulators, the Python MCP client,
    Schemathesis over the service's API)
  - the job database and the service on PostgreSQL (HETCH_DB=sqlite here)
  - the conformance suite's S3, GCS and Azure backends (HETCH_CONFORMANCE=posix,memory)
  - the benchmark harness's peers (hetch-bench's tests/), the doc tests
LEFT
