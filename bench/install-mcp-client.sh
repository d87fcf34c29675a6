#!/usr/bin/env bash
# Installs the official Python MCP SDK (PyPI `mcp`, pinned) into a venv at
# target/tools/mcp-venv: tests/it/mcp_python.rs drives `hetch mcp` with it, a client
# written independently of the server's Rust SDK (rmcp).
set -euo pipefail
cd "$(dirname "$0")/.."

bash bench/pip-venv.sh "$PWD/target/tools/mcp-venv" mcp 2.3.0 mcp.client.stdio
