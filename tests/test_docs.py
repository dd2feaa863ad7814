"""The README and the pages in docs/: every relative link resolves, and the README stays short.

A link resolves when its file exists inside the repository and, where it names an
anchor (``page.md#section``, ``#section``), the Markdown file it points to has a
heading with that anchor as GitHub makes it (lower case, punctuation dropped, spaces
to hyphens, ``-1``, ``-2`` … for repeats) or an explicit ``<a id=…>``/``<a name=…>``.
Links inside code (fenced blocks, inline spans) are not links; links with a scheme
(``https:``, ``mailto:``) are not checked. No model is needed.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 300
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the ``-1`` of a repeated one)."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file has: its headings' slugs and explicit HTML anchors."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code."""
    out: list[str] = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = INLINE_CODE.sub("", line)
        out += LINK.findall(line)
        m = REFERENCE.match(line)
        if m:
            out.append(m.group(1))
    return out


def broken(page: Path) -> list[str]:
    """Why each relative link of ``page`` does not resolve (empty when all do)."""
    problems: list[str] = []
    for target in links(page):
        if SCHEME.match(target):
            continue
        where, _, anchor = target.partition("#")
        dest = (page.parent / unquote(where)).resolve() if where else page
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
        elif not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_readme_stays_under_300_lines() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n < README_MAX_LINES, f"README.md has {n} lines; the details belong in docs/"


def test_the_readme_links_every_docs_page() -> None:
    """Each page in docs/ is reachable from the README (results/ holds data, not pages)."""
    linked = {(ROOT / unquote(t.partition("#")[0])).resolve() for t in links(README) if not SCHEME.match(t)}
    pages = [p for p in PAGES[1:] if "results" not in p.relative_to(ROOT).parts]
    assert [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked] == []


def _readme_keys() -> str:
    """The first column of the README's keys table, lower case, without spaces."""
    lines = README.read_text(encoding="utf-8").split("\n## Keys\n", 1)[1].split("\n## ", 1)[0].splitlines()
    return " ".join(line.split("|")[1] for line in lines if line.startswith("|")).lower().replace(" ", "")


def test_the_readme_keys_table_lists_every_key_of_the_app() -> None:
    """Every app binding (what F1 lists) and every palette command without a key."""
    from textual.binding import Binding

    from skippy_tui.ui.app import SkippyApp
    from skippy_tui.ui.commands import COMMANDS

    table = _readme_keys()
    names = {"escape": "esc", "up": "↑", "down": "↓"}
    bindings = [b for b in SkippyApp.BINDINGS if isinstance(b, Binding)]
    missing = []
    for b in bindings:
        for key in b.key.split(","):
            shown = "+".join(names.get(part, part) for part in key.split("+"))
            if shown not in table:
                missing.append(f"{shown} ({b.action})")
    assert missing == []
    bound = {b.action for b in bindings} | {b.action.split("(")[0] for b in bindings}
    keyless = [title for title, _, action in COMMANDS if action not in bound and action.split("(")[0] not in bound]
    text = README.read_text(encoding="utf-8")
    assert keyless and [t for t in keyless if t not in text] == []


def test_the_checker_sees_what_github_sees(tmp_path: Path) -> None:
    """Slugs, repeated headings, code spans and fences, the way GitHub renders them."""
    assert slug("RPC: beyond one machine") == "rpc-beyond-one-machine"
    assert slug("How `auto` chooses") == "how-auto-chooses"
    assert slug("Files: config, data and cache") == "files-config-data-and-cache"
    assert slug("[Link](x.md) and `n_draft`") == "link-and-n_draft"
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Same\n\n## Same\n\n```\n## not a heading\n[not](a-link.md)\n```\n\n"
        "[ok](#same-1) [bad](#not-a-heading) `[code](nowhere.md)` [gone](missing.md) [web](https://x.org)\n",
        encoding="utf-8",
    )
    assert anchors(page) == {"title", "same", "same-1"}
    assert links(page) == ["#same-1", "#not-a-heading", "missing.md", "https://x.org"]
