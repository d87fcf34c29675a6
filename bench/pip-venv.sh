#!/usr/bin/env bash
# Installs PyPI package PACKAGE==VERSION into a venv at VENV, unless it is there already
# (and, given IMPORT, that module imports): the shared step of the scripts that install
# the Python tools the tests drive (install-mcp-client.sh, install-schemathesis.sh).
#
#   bash bench/pip-venv.sh VENV PACKAGE VERSION [IMPORT]
set -euo pipefail
venv=$1 package=$2 version=$3 import=${4:-}

check="import importlib.metadata as m, sys${import:+, $import}; sys.exit(m.version('$package') != '$version')"
if "$venv/bin/python" -c "$check" 2>/dev/null; then
    exit 0
fi
rm -rf "$venv"
# Debian splits venv's pip bootstrap into python3-venv.
if ! python3 -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$package==$version"
echo "installed $package $version in $venv"
