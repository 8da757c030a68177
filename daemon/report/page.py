"""The report's HTML (one static page: no JavaScript, no resource from the network).

``render`` takes plain values (sections of figures and tables the builder assembled) and
returns the page's text; everything shown is escaped here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any, Sequence

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 70em; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; } td.num { text-align: right; }
figure { display: inline-block; margin: 0.5em 1em 1em 0; vertical-align: top; }
figcaption { font-size: 0.85em; color: #444; max-width: 36em; }
.note { color: #555; } .empty { background: #fff8dc; padding: 1em; border: 1px solid #e0d090; }
"""


@dataclass
class Figure:
    src: str  # file name beside index.html
    alt: str
    caption: str


@dataclass
class Link:
    """A table cell that links within the page (``href``: ``#anchor``)."""
    text: str
    href: str


@dataclass
class Table:
    head: Sequence[str]
    rows: Sequence[Sequence[Any]]


@dataclass
class Section:
    title: str
    anchor: str
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    subsections: list["Section"] = field(default_factory=list)


def _cell(v: Any) -> str:
    if isinstance(v, Link):
        return f'<td><a href="{escape(v.href)}">{escape(v.text)}</a></td>'
    if isinstance(v, float):
        return f'<td class="num">{v:.4g}</td>'
    if isinstance(v, int) and not isinstance(v, bool):
        return f'<td class="num">{v}</td>'
    return f"<td>{escape('' if v is None else str(v))}</td>"


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.head)
    body = "\n".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in t.rows)
    return f"<table>\n{f'<tr>{head}</tr>' if any(t.head) else ''}\n{body}\n</table>"


def _section(s: Section, level: int) -> str:
    parts = [f'<h{level} id="{escape(s.anchor)}">{escape(s.title)}</h{level}>']
    parts += [f'<p class="note">{escape(n)}</p>' for n in s.notes]
    parts += [_table(t) for t in s.tables]
    parts += [f'<figure><img src="{escape(f.src)}" alt="{escape(f.alt)}">'
              f"<figcaption>{escape(f.caption)}</figcaption></figure>" for f in s.figures]
    parts += [_section(sub, level + 1) for sub in s.subsections]
    return "\n".join(parts)


def render(title: str, intro: list[str], sections: list[Section],
           empty: list[str] | None = None) -> str:
    """The whole page; ``empty`` (lines) replaces the sections when nothing is measured."""
    toc = "".join(f'<li><a href="#{escape(s.anchor)}">{escape(s.title)}</a></li>'
                  for s in sections)
    body = [f"<h1>{escape(title)}</h1>"] + [f'<p class="note">{escape(x)}</p>' for x in intro]
    if empty:
        body.append('<div class="empty" id="nothing-measured">' +
                    "".join(f"<p>{escape(x)}</p>" for x in empty) + "</div>")
    else:
        body.append(f"<ul>{toc}</ul>")
        body += [_section(s, 2) for s in sections]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
