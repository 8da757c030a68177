"""The keys docs/json-output.md documents for a command, read from its tables, so that tests
hold the real ``--json`` output to them (a key added or renamed without the doc fails)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "json-output.md"


def section(heading: str) -> str:
    """The text of the section whose '## ' heading starts with ``heading``."""
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)
    found = [p for p in parts if p.startswith(heading)]
    assert len(found) == 1, f"docs/json-output.md: {len(found)} sections '## {heading}'"
    return found[0]


def tables(heading: str) -> list[dict[str, str]]:
    """Each table of the section: documented key -> its value cell (a row naming several
    keys, `a`, `b`, gives each the cell)."""
    out: list[dict[str, str]] = []
    rows: dict[str, str] | None = None
    for line in section(heading).splitlines():
        m = re.match(r"\|\s*(`[^|]*`)\s*\|(.*)\|\s*$", line)
        if m is None:
            rows = None
            continue
        if rows is None:
            rows = {}
            out.append(rows)
        for key in re.findall(r"`([^`]+)`", m.group(1)):
            rows[key] = m.group(2)
    return out


def object_keys(cell: str) -> list[set[str]]:
    """The key sets written as {"a", "b"} in a value cell."""
    return [set(re.findall(r'"([^"]+)"', m)) for m in re.findall(r"\{([^{}]*)\}", cell)]


def keys_of(cell: str, first: str) -> set[str]:
    """The documented object in ``cell`` whose keys include ``first``."""
    hits = [k for k in object_keys(cell) if first in k]
    assert hits, f"no {{\"{first}\", ...}} in {cell!r}"
    return hits[0]
