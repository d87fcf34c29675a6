#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS each, default 60), as CI
# does. Needs a nightly toolchain; installs cargo-fuzz (pinned) into target/tools.
# The targets are built once, then run all at once, each for about FUZZ_SECONDS of a
# CPU. Exits non-zero if any target finds something; its input is in
# fuzz/artifacts/TARGET/ and its output in fuzz/logs/TARGET.log (printed here).
# `fuzz/run.sh --build` installs cargo-fuzz and builds the targets, and runs nothing
# (CI builds them in the background while it builds the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: no nightly toolchain; the fuzz targets' checks still run in cargo test" >&2
  exit 0
fi
tools="$PWD/target/tools"
if ! [ -x "$tools/bin/cargo-fuzz" ]; then
  cargo install --locked --root "$tools" cargo-fuzz@0.13.2
fi
export PATH="$tools/bin:$PATH"
targets=(frame_decoder session_sink session_source ledger settle)
cargo +nightly fuzz build
if [ "${1:-}" = --build ]; then
  exit 0
fi
mkdir -p fuzz/logs

# Every target at once, for as long as gives each about $seconds of a CPU (libFuzzer
# uses one per target; max_total_time is wall time): with 5 targets on 2 CPUs, 75 s
# where waves of 2 took 90 with one CPU idle in the last.
cpus=$(nproc)
wall=$(( (seconds * ${#targets[@]} + cpus - 1) / cpus ))
[ "$wall" -lt "$seconds" ] && wall=$seconds

# One target, its output in fuzz/logs/TARGET.log.
# -rss_limit_mb/-malloc_limit_mb: a peer must never make either side allocate more
# than this, whatever it announces.
run_one() {
  local target=$1
  echo "fuzz/run.sh: $target for ${wall}s"
  if cargo +nightly fuzz run "$target" -- \
    -max_total_time="$wall" -max_len=4096 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    >"fuzz/logs/$target.log" 2>&1; then
    echo "fuzz/run.sh: $target: $(grep -E '^Done [0-9]+ runs' "fuzz/logs/$target.log" || echo done)"
  else
    echo "fuzz/run.sh: $target FOUND SOMETHING (or failed); its output:"
    tail -n 60 "fuzz/logs/$target.log"
    return 1
  fi
}
export -f run_one
export wall
printf '%s\n' "${targets[@]}" | xargs -P "${#targets[@]}" -I{} bash -c 'run_one {}'
