#!/usr/bin/env bash
# docs/guide/build.sh: builds the user guide (mdBook) into target/guide and checks
# every relative link: those of the built HTML (files and #anchors) and those of the
# repository's Markdown (README.md, CONTRIBUTING.md, CHANGELOG.md, docs/**/*.md outside
# the guide). External links are not checked. mdBook is installed from crates.io into
# target/tools the first time (pinned; a few minutes of compiling), then reused.
#
#   bash docs/guide/build.sh             install mdBook if missing, build, check links
#   bash docs/guide/build.sh --install   only install mdBook (CI starts this first, in
#                                        the background, beside the lints)
set -euo pipefail
cd "$(dirname "$0")/../.."

MDBOOK_VERSION=0.5.4
TOOLS=target/tools
MDBOOK=$TOOLS/bin/mdbook
CHECK="python3 docs/guide/check_links.py"

if ! { [ -x "$MDBOOK" ] && "$MDBOOK" --version | grep -qx "mdbook v$MDBOOK_VERSION"; }; then
    echo "guide: installing mdbook $MDBOOK_VERSION into $TOOLS"
    cargo install --locked --quiet --root "$TOOLS" --version "$MDBOOK_VERSION" \
        --no-default-features --features search mdbook
fi
[ "${1:-}" = --install ] && exit 0

# The checker must catch a broken link before its silence means anything.
$CHECK --self-test

rm -rf target/guide
"$MDBOOK" build docs/guide    # into target/guide (book.toml's build-dir)

markdown=(README.md CONTRIBUTING.md)
[ -f CHANGELOG.md ] && markdown+=(CHANGELOG.md)
while IFS= read -r f; do markdown+=("$f"); done < <(find docs -name '*.md' -not -path 'docs/guide/*' | sort)
$CHECK --html target/guide --markdown "${markdown[@]}"
echo "guide: built into target/guide/index.html"
