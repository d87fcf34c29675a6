#!/usr/bin/env bash
# Installs Schemathesis (PyPI `schemathesis`, pinned) into a venv at
# target/tools/schemathesis-venv: tests/it/schemathesis.rs runs it against a real
# `hetch service`, generating requests from the service's OpenAPI document (a tool
# nobody here wrote, reading the document as any client would).
set -euo pipefail
cd "$(dirname "$0")/.."

bash bench/pip-venv.sh "$PWD/target/tools/schemathesis-venv" schemathesis 4.32.5
