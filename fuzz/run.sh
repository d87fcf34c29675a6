#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS each, default 60), as CI
# does. Needs a nightly toolchain; installs cargo-fuzz (pinned) into target/tools.
# Exits non-zero on the first finding; its input is in fuzz/artifacts/TARGET/.
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
for target in frame_decoder session_sink session_source ledger settle; do
  echo "fuzz/run.sh: $target for ${seconds}s"
  # -rss_limit_mb/-malloc_limit_mb: a peer must never make either side allocate
  # more than this, whatever it announces.
  cargo +nightly fuzz run "$target" -- \
    -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -malloc_limit_mb=512
done
