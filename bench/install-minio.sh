#!/usr/bin/env bash
# Installs the MinIO server the S3 tests and benchmarks run against, built from source
# with `go install` at a pinned version (the Go module proxy is reachable; MinIO's own
# download site may not be). Takes about 3-4 minutes once; later runs find the binary.
#
# Where: $HETCH_TOOLS/bin/minio, by default target/tools/bin/minio in this repository
# (target/ is kept between CI runs, so CI builds it once).
set -euo pipefail
cd "$(dirname "$0")/.."

# MinIO publishes no semver tags for `go install`; this is the pseudo-version that
# `@latest` resolved to when the S3 backend was written (2026-02-12).
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
TOOLS="${HETCH_TOOLS:-$PWD/target/tools}"
BIN="$TOOLS/bin/minio"
STAMP="$TOOLS/bin/minio.version"

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$MINIO_VERSION" ]; then
    echo "install-minio: present: $BIN ($MINIO_VERSION)"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "install-minio: Go is needed to build MinIO (go install); not found" >&2
    exit 1
fi
mkdir -p "$TOOLS/bin"
echo "install-minio: building github.com/minio/minio@$MINIO_VERSION into $TOOLS/bin (a few minutes)"
GOBIN="$TOOLS/bin" GOFLAGS="-mod=mod" go install "github.com/minio/minio@$MINIO_VERSION"
echo "$MINIO_VERSION" > "$STAMP"
echo "install-minio: installed $BIN"
