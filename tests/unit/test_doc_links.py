"""The contract is in the repository: code and docs point to sections of docs/, and those sections exist.

A comment that says "SPEC 6.3" or "issue 14" points to a document a reader of the repository does
not have; `docs/architecture.md#acknowledged-means-kept` points to one they do. Every such pointer
(`docs/<page>.md#<anchor>` anywhere in a tracked text file, and every relative link with an anchor
in a Markdown file) must name a heading that is there, with GitHub's anchor for it. (Another
project's issue is cited by its URL.)
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (".py", ".md", ".sh", ".conf", ".toml", ".mjs", ".js", ".html", ".yml", ".xml")

OUTSIDE = re.compile(r"\bSPEC ?(§|section )?[0-9]|\b[Ii]ssues? [0-9]")
DOCS_REF = re.compile(r"\bdocs/((?:[\w-]+/)*[\w-]+\.md)#([\w-]+)")
MD_LINK = re.compile(r"\]\(((?:[\w./-]+)?\.md)?#([^)\s]+)\)")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.splitlines() if name.endswith(TEXT) and (ROOT / name).is_file()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6} (.+)", line)
        if fenced or match is None:
            continue
        base = slug(match[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def test_nothing_points_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for path in _tracked()
        if path != this
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_every_docs_section_named_exists() -> None:
    broken = []
    for path in _tracked():
        text = path.read_text(errors="replace")
        targets = [(ROOT / "docs" / page, anchor) for page, anchor in DOCS_REF.findall(text)]
        if path.suffix == ".md":
            targets += [((path.parent / page) if page else path, anchor) for page, anchor in MD_LINK.findall(text)]
        for page, anchor in targets:
            page = page.resolve()
            if not page.is_file() or anchor not in anchors(page):
                broken.append(f"{path.relative_to(ROOT)}: {page.relative_to(ROOT)}#{anchor}")
    assert broken == []


def test_slugs_are_githubs() -> None:
    assert slug("Management API: `/api/v1/`") == "management-api-apiv1"
    assert slug("Several workers: `run --workers N`") == "several-workers-run---workers-n"
    assert slug("### Client ids and filters with a `:`".lstrip("# ")) == "client-ids-and-filters-with-a-"
