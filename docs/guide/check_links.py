#!/usr/bin/env python3
"""Check the relative links of the built guide and of the repository's Markdown.

  check_links.py --html DIR          every href/src in DIR/**/*.html that is relative
                                     must name a file (or directory) that exists, and
                                     its #fragment an id or name in that page
  check_links.py --markdown FILE...  every [text](target) and [ref]: target in the
                                     files must name a file or directory that exists,
                                     and a #fragment must be a heading (GitHub's anchor
                                     rules) or an explicit id/name in the target .md
  check_links.py --self-test         builds a fixture with good and broken links in a
                                     temporary directory and checks that exactly the
                                     broken ones are reported

External links (anything with a scheme: http:, https:, mailto:, ...) are not checked.
Each broken link is printed as FILE: TARGET (reason); the exit code is 1 if any.
Standard library only (Python 3.11).
"""

import html.parser
import os
import re
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def external(target):
    return bool(SCHEME.match(target)) or target.startswith("//")


# --- HTML -----------------------------------------------------------------------------


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []  # (attr value, line)
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            if (name == "href" and tag in ("a", "link", "area")) or (
                name == "src" and tag in ("img", "script", "iframe", "source")
            ):
                self.links.append((value, self.getpos()[0]))

    handle_startendtag = handle_starttag


_html_cache = {}


def _parse_html(path):
    if path not in _html_cache:
        p = _Collect()
        with open(path, encoding="utf-8", errors="replace") as f:
            p.feed(f.read())
        _html_cache[path] = p
    return _html_cache[path]


def check_html(root):
    broken = []
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            path = os.path.join(dirpath, name)
            for link, line in _parse_html(path).links:
                why = _check_html_link(path, link)
                if why:
                    broken.append((f"{os.path.relpath(path)}:{line}", link, why))
    return broken


def _check_html_link(path, link):
    link = link.strip()
    if not link or external(link):
        return None
    target, _, frag = link.partition("#")
    target = unquote(target.split("?", 1)[0])
    if target:
        dest = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if os.path.isdir(dest):
            dest = os.path.join(dest, "index.html")
        if not os.path.exists(dest):
            return "no such file"
    else:
        dest = path
    if frag and dest.endswith(".html"):
        if unquote(frag) not in _parse_html(dest).ids:
            return f"no anchor #{frag} in {os.path.relpath(dest)}"
    return None


# --- Markdown -------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```+|~~~+)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
# [text](target) with text possibly spanning lines; images too ( ![alt](src) ).
INLINE_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)", re.S)
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"|\{#([\w-]+)\}")


def _strip_code(text):
    """Blank out fenced blocks and inline code, keeping line numbers."""
    text = _strip_code_fences_only(text)
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def github_slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").lower()
    text = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM"
    )
    return text.replace(" ", "-")


_anchor_cache = {}


def markdown_anchors(path):
    if path not in _anchor_cache:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        anchors, seen = set(), {}
        for line in _strip_code_fences_only(raw).split("\n"):
            m = HEADING.match(line)
            if m:
                slug = github_slug(m.group(2))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                anchors.add(slug if n == 0 else f"{slug}-{n}")
        for m in EXPLICIT_ID.finditer(raw):
            anchors.add(m.group(1) or m.group(2))
        _anchor_cache[path] = anchors
    return _anchor_cache[path]


def _strip_code_fences_only(text):
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def check_markdown(paths):
    broken = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = _strip_code(f.read())
        targets = [(m.group(2), m.start(2)) for m in INLINE_LINK.finditer(text)]
        targets += [(m.group(1), m.start(1)) for m in REF_DEF.finditer(text)]
        for target, pos in targets:
            line = text.count("\n", 0, pos) + 1
            why = _check_md_link(path, target)
            if why:
                broken.append((f"{os.path.relpath(path)}:{line}", target, why))
    return broken


def _check_md_link(path, link):
    if not link or external(link):
        return None
    target, _, frag = link.partition("#")
    target = unquote(target)
    if target:
        dest = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if not os.path.exists(dest):
            return "no such file"
    else:
        dest = path
    if frag and dest.endswith(".md") and os.path.isfile(dest):
        if unquote(frag) not in markdown_anchors(dest):
            return f"no anchor #{frag} in {os.path.relpath(dest)}"
    return None


# --- self-test ------------------------------------------------------------------------


def self_test():
    with tempfile.TemporaryDirectory() as d:

        def write(rel, text):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)

        write(
            "README.md",
            "# Top\n\n## What is copied: `cp -a` (and rsync)\n\n"
            "[ok](docs/A.md) [ok](docs/A.md#the-machines-floor-issue-39-item-6)\n"
            "[ok, across\nlines](#what-is-copied-cp--a-and-rsync) [ok](docs/)\n"
            "[ext](https://example.org/nowhere) `[code](nowhere.md)`\n"
            "```\n[fenced](nowhere.md)\n```\n"
            "[BROKEN-FILE](docs/missing.md) [BROKEN-ANCHOR](docs/A.md#nope)\n"
            "[ref]: docs/also-missing.md\n",
        )
        write("docs/A.md", "# A\n\n## The machine's floor (issue 39, item 6)\n\n[up](../README.md#top)\n")
        write(
            "book/index.html",
            '<h1 id="intro">x</h1><a href="ch.html#sec">ok</a><a href="#intro">ok</a>'
            '<a href="https://x.org/">ext</a><img src="img/p.png">'
            '<a href="ch.html#BROKEN">b</a><a href="gone.html">b</a>\n',
        )
        write("book/ch.html", '<h2 id="sec">s</h2><a href="index.html">ok</a><script src="missing.js"></script>\n')
        write("book/img/p.png", "")
        md = check_markdown([os.path.join(d, "README.md"), os.path.join(d, "docs/A.md")])
        ht = check_html(os.path.join(d, "book"))
    got = sorted(t for _, t, _ in md + ht)
    want = sorted(
        ["docs/missing.md", "docs/A.md#nope", "docs/also-missing.md",
         "ch.html#BROKEN", "gone.html", "missing.js"]
    )
    if got != want:
        print(f"check_links self-test FAILED:\n  reported {got}\n  expected {want}")
        return 1
    print(f"check_links self-test: ok (the {len(want)} broken links of the fixture reported, nothing else)")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    broken, i = [], 0
    while i < len(argv):
        if argv[i] == "--html" and i + 1 < len(argv):
            broken += check_html(argv[i + 1])
            i += 2
        elif argv[i] == "--markdown":
            files = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                files.append(argv[i])
                i += 1
            broken += check_markdown(files)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    for where, target, why in broken:
        print(f"{where}: broken link {target} ({why})")
    if broken:
        print(f"check_links: {len(broken)} broken link(s)")
        return 1
    print("check_links: no broken links")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
