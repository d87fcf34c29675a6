#!/usr/bin/env bash
# Installs the emulators the GCS and Azure tests run against, at pinned versions:
# fake-gcs-server (Google Cloud Storage) with `go install` from the Go module proxy, and
# Azurite (Azure Blob Storage) from the npm registry. Later runs find them.
#
# Where: $HETCH_TOOLS/bin/fake-gcs-server and $HETCH_TOOLS/azurite (with a launcher at
# $HETCH_TOOLS/bin/azurite-blob), by default under target/tools of this repository.
set -euo pipefail
cd "$(dirname "$0")/.."

FAKE_GCS_VERSION="v1.56.1"
AZURITE_VERSION="3.37.0"
TOOLS="${HETCH_TOOLS:-$PWD/target/tools}"
mkdir -p "$TOOLS/bin"

gcs="$TOOLS/bin/fake-gcs-server"
if [ -x "$gcs" ] && [ "$(cat "$gcs.version" 2>/dev/null)" = "$FAKE_GCS_VERSION" ]; then
    echo "install-emulators: present: $gcs ($FAKE_GCS_VERSION)"
elif command -v go >/dev/null 2>&1; then
    echo "install-emulators: building github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
    GOBIN="$TOOLS/bin" GOFLAGS="-mod=mod" go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
    echo "$FAKE_GCS_VERSION" > "$gcs.version"
else
    echo "install-emulators: Go is needed for fake-gcs-server; not found" >&2
    exit 1
fi

az="$TOOLS/bin/azurite-blob"
if [ -x "$az" ] && [ "$(cat "$az.version" 2>/dev/null)" = "$AZURITE_VERSION" ]; then
    echo "install-emulators: present: $az ($AZURITE_VERSION)"
elif command -v npm >/dev/null 2>&1; then
    echo "install-emulators: installing azurite@$AZURITE_VERSION from npm"
    npm install --silent --no-audit --no-fund --prefix "$TOOLS/azurite" "azurite@$AZURITE_VERSION"
    ln -sf "$TOOLS/azurite/node_modules/.bin/azurite-blob" "$az"
    echo "$AZURITE_VERSION" > "$az.version"
else
    echo "install-emulators: npm is needed for Azurite; not found" >&2
    exit 1
fi
