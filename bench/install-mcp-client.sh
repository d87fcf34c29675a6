#!/usr/bin/env bash
# Installs the official Python MCP SDK (PyPI `mcp`, pinned) into a venv at
# target/tools/mcp-venv: tests/it/mcp_python.rs drives `hetch mcp` with it, a client
# written independently of the server's Rust SDK (rmcp).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="2.3.0"
VENV="$PWD/target/tools/mcp-venv"

if "$VENV/bin/python" -c "import importlib.metadata as m, sys, mcp.client.stdio; sys.exit(m.version('mcp') != '$VERSION')" 2>/dev/null; then
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
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$VERSION"
echo "install-mcp-client: installed mcp $VERSION in $VENV"
