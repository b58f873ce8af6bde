"""Every relative link in README.md and docs/*.md resolves: the file exists and, for a link into a
Markdown page with ``#anchor``, the page has a heading with that anchor (GitHub's rule). The README
is the front door and the reference lives in docs/, so a page moved or a heading renamed must not
leave a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def _prose(text: str, *, keep_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed (a link there is no
    link) unless ``keep_code`` (a heading's anchor keeps its code's text)."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((n, line if keep_code else CODE_SPAN.sub("", line)))
    return out


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-',
    a repeated anchor numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose(page.read_text(encoding="utf-8"), keep_code=True):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def dead_links(page: Path) -> list[str]:
    """Each relative link of ``page`` that does not resolve, as ``page:line: target (why)``."""
    dead = []
    for i, line in _prose(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                dead.append(f"{page.name}:{i}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                dead.append(f"{page.name}:{i}: {target} (no heading with that anchor)")
    return dead


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert dead_links(page) == []


def test_readme_links_every_docs_page() -> None:
    readme = "\n".join(line for _, line in _prose((ROOT / "README.md").read_text(encoding="utf-8")))
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    pages = {f"docs/{p.name}" for p in PAGES[1:]}
    assert pages, "no docs/*.md found"
    assert pages - linked == set()


def test_a_dead_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Dead runs\n\nsee [x](#dead-runs) and [y](b.md#top)\n")
    (tmp_path / "b.md").write_text(
        "# Top\n\n[gone](c.md), [wrong](a.md#production), [ok](a.md#dead-runs)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[web](https://example.com/x) [late](d.md)\n"
    )
    assert dead_links(tmp_path / "a.md") == []
    assert dead_links(tmp_path / "b.md") == [
        "b.md:3: c.md (no such file)",
        "b.md:3: a.md#production (no heading with that anchor)",
        "b.md:8: d.md (no such file)",
    ]


def test_a_heading_anchor_keeps_the_text_of_its_code(tmp_path: Path) -> None:
    # GitHub drops the backticks, not the code: "## `run.py` (the bench's)" is #runpy-the-benchs.
    (tmp_path / "a.md").write_text("## `run.py` (the bench's)\n\n[ok](#runpy-the-benchs) [no](#the-benchs)\n")
    assert dead_links(tmp_path / "a.md") == ["a.md:3: #the-benchs (no heading with that anchor)"]
