#!/usr/bin/env bash
# Installs Schemathesis (PyPI `schemathesis`, pinned) into a venv at
# target/tools/schemathesis-venv: tests/it/schemathesis.rs runs it against a real
# `hetch service`, generating requests from the service's OpenAPI document (a tool
# nobody here wrote, reading the document as any client would).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="4.32.5"
VENV="$PWD/target/tools/schemathesis-venv"

if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('schemathesis') != '$VERSION')" 2>/dev/null; then
    exit 0
fi
rm -rf "$VENV"
# Debian splits venv's pip bootstrap into python3-venv.
if ! python3 -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$VERSION"
echo "install-schemathesis: installed schemathesis $VERSION in $VENV"
